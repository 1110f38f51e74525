"""Data-parallel scaling, measured here and projected to 1-64 GPUs (a projection, not a run).

    python benchmarks/scaling.py                          # CPU: paper config (~1 min on 2 cores)
    python benchmarks/scaling.py --configs paper,big      # + big (several minutes more on CPU)
    python benchmarks/scaling.py --device cuda            # one GPU: paper+big, bf16
    python benchmarks/scaling.py --inter-gbps 25 --gpus 1,8,16,32
    python benchmarks/scaling.py --compute-from RECORD/scaling.json   # another run's compute

Measured on the machine it runs on, per config:

* compute: the per-process step time of the trainer's own step (`TrainStep`: replayed CUDA
  graphs on CUDA, eager on CPU, as every rank runs it) without its exchange, at the
  per-process batch b (`--batch-per-process`, default the config's B: paper 20, big 128), as
  `throughput.py` times it;
* the overlap window: on the eager one-process step (the only one that overlaps), the time
  from the output layer's gradient being complete (its post-accumulate hooks, after a device
  synchronize on CUDA) to the end of the backward (the last parameter's hook), median of the
  timed steps; on CUDA that eager step is launch-bound and slower than the graphed one, so
  its window is an upper bound for a graphed step's;
* what the step exchanges (`hornn_dist.training.exchange.plan_exchange`, the trainer's own
  decision, made again for every GPU count and `--reduce-dtypes`): the output layer's dense
  gradient (early), every other dense gradient (late), both in the reduce dtype, and the
  input embedding's touched rows (b·T slots of E fp32 values and an id, all-gathered) where
  they send fewer bytes than the dense all-reduce;
* collectives: a real all-reduce of the dense bytes (each reduce dtype) and a real all-gather
  of the rows, on CPU between 2 processes over gloo on 127.0.0.1, on CUDA in a 1-process NCCL
  group (no link: a lower bound), median of `--allreduce-repeats`.

Projected for N GPUs (weak scaling: each rank keeps b streams, the global batch is N·b), each
collective on a ring:

    all-reduce(bytes, N) = 2(N-1)/N · bytes / bandwidth + 2(N-1) · latency      (0 at N = 1)
    all-gather(bytes per process, N) = (N-1) · bytes / bandwidth + (N-1) · latency
    exposed, eager (CPU)     = max(0, all-reduce(early) - window) + all-reduce(late)
                               + all-gather(rows)     (collectives run one after another)
    exposed, graphed (CUDA)  = all-reduce(early + late) + all-gather(rows)   (no overlap)
    step(N) = compute + exposed       tokens/s(N) = N · b · T / step(N)
    efficiency(N) = tokens/s(N) / (N · tokens/s(1))

On CUDA the table also gives the efficiency with the eager step's overlap (`eff overlap`):
what the graphed step would reach if it overlapped the output layer's all-reduce as the eager
step does (not built). The bandwidth is an all-reduce bus bandwidth, as nccl-tests reports it
(busbw = bytes / time · 2(N-1)/N), taken for the all-gather too (its busbw). Up to
`--gpus-per-node` (8) GPUs the ring stays inside one node and uses `--intra-gbps` (default
450 GB/s: the all_reduce bus bandwidth NVIDIA's nccl-tests reach on 8x H100 SXM over NVLink 4
/ NVSwitch); above it the ring crosses nodes and the slowest link, `--inter-gbps` (default
50 GB/s: one 400 Gb/s NDR InfiniBand NIC per GPU, as in a DGX H100), bounds it.
`--latency-us` (default 5 µs per ring step) is an assumption, not a measurement. The compute
time is this machine's (or `--compute-from`'s record, whose window is then unknown: its
projection has no overlap): on a CPU the projection is for N such processes joined by that
interconnect. Table and JSON (`--json`, default benchmarks/results/scaling.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

import torch

from hornn_dist.training.exchange import REDUCE_DTYPES, ExchangePlan, plan_exchange

from common import comma_list, free_port, meta_line, run_meta, write_json
from throughput import CONFIGS, PRECISIONS, VARIANTS, Case, Runner, build, sync

DEFAULT_JSON = Path(__file__).parent / "results" / "scaling.json"
GPUS = "1,2,4,8,16,64"
INTRA_GBPS = 450.0  # nccl-tests all_reduce busbw, 8x H100 SXM, NVLink 4 / NVSwitch
INTER_GBPS = 50.0  # 400 Gb/s NDR InfiniBand, one NIC per GPU
LATENCY_US = 5.0  # per ring step: an assumption
GRAD_BYTES = 4  # fp32 gradients: what every step all-reduced before the exchange
WORKER_FLAG = "--collective-worker"
MODE = {"cuda": "graphed", "cpu": "eager"}  # how the trainer runs its step on each device


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line: `scaling.py: message`, exit 2."""

    def error(self, message: str):
        print(f"scaling.py: {message}", file=sys.stderr)
        sys.exit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Return the command-line options, with device-dependent defaults filled in."""
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument(
        "--configs", help=f"comma list of {', '.join(CONFIGS)} (default: cpu paper, cuda both)"
    )
    p.add_argument("--variant", default="hornn-fofe", help="model (default hornn-fofe, as ptb)")
    p.add_argument("--precision", help="fp32, bf16 or fp16 autocast (default: cpu fp32, cuda bf16)")
    p.add_argument(
        "--reduce-dtypes",
        default=",".join(REDUCE_DTYPES),
        help="comma list of train.reduce_dtype values to project (default fp32,bf16)",
    )
    p.add_argument(
        "--batch-per-process", type=int, help="streams per rank b (default: the config's B)"
    )
    for name in ("vocab", "hidden", "bptt"):
        p.add_argument(f"--{name}", type=int, help=f"{name}: overrides every config")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps (2)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per round (5)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; median reported (3)")
    p.add_argument("--allreduce-repeats", type=int, default=10, help="timed collectives (10)")
    p.add_argument(
        "--compute-from",
        type=Path,
        help="a scaling.json whose measured step time (per config) replaces this machine's; "
        "nothing is timed but the collectives",
    )
    p.add_argument("--gpus", default=GPUS, help=f"comma list of GPU counts to project ({GPUS})")
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (8)")
    p.add_argument(
        "--intra-gbps",
        type=float,
        default=INTRA_GBPS,
        help="all-reduce bus bandwidth within a node, GB/s (default 450: NVIDIA nccl-tests "
        "all_reduce_perf busbw on 8x H100 SXM, NVLink 4 / NVSwitch)",
    )
    p.add_argument(
        "--inter-gbps",
        type=float,
        default=INTER_GBPS,
        help="all-reduce bus bandwidth across nodes, GB/s (default 50: 400 Gb/s NDR "
        "InfiniBand, one NIC per GPU as in a DGX H100)",
    )
    p.add_argument(
        "--latency-us", type=float, default=LATENCY_US, help="latency per ring step, µs (5)"
    )
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"default {DEFAULT_JSON}")
    args = p.parse_args(argv)
    cuda = args.device.startswith("cuda")
    if args.device not in ("cpu", "cuda") and not args.device.startswith("cuda:"):
        p.error(f"--device {args.device!r}: choose cpu or cuda")
    if cuda and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA GPU here (torch.cuda.is_available() is False)")
    args.configs = comma_list(
        p, "--configs", args.configs or ("paper,big" if cuda else "paper"), CONFIGS
    )
    args.reduce_dtypes = comma_list(p, "--reduce-dtypes", args.reduce_dtypes, REDUCE_DTYPES)
    if args.variant not in VARIANTS:
        p.error(f"--variant: unknown {args.variant!r}; choose from {', '.join(VARIANTS)}")
    args.precision = args.precision or ("bf16" if cuda else "fp32")
    if args.precision not in PRECISIONS:
        p.error(f"--precision: unknown {args.precision!r}; choose from {', '.join(PRECISIONS)}")
    try:
        args.gpus = [int(n) for n in args.gpus.split(",") if n]
    except ValueError:
        p.error(f"--gpus: not a comma list of integers: {args.gpus!r}")
    if not args.gpus or min(args.gpus) < 1:
        p.error(f"--gpus: counts must be >= 1, got {args.gpus}")
    for flag in ("batch_per_process", "vocab", "hidden", "bptt", "steps", "rounds",
                 "allreduce_repeats", "gpus_per_node"):  # fmt: skip
        value = getattr(args, flag)
        if value is not None and value < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    if args.warmup < 0:
        p.error(f"--warmup must be >= 0, got {args.warmup}")
    for flag in ("intra_gbps", "inter_gbps"):
        if getattr(args, flag) <= 0:
            p.error(f"--{flag.replace('_', '-')} must be > 0, got {getattr(args, flag)}")
    if args.latency_us < 0:
        p.error(f"--latency-us must be >= 0, got {args.latency_us}")
    args.recorded = {}
    if args.compute_from is not None:
        try:
            rows = json.loads(args.compute_from.read_text())["results"]
            args.recorded = {r["config"]: r for r in rows}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            p.error(f"--compute-from {args.compute_from}: not a scaling.py JSON ({exc})")
        missing = [c for c in args.configs if c not in args.recorded]
        if missing:
            p.error(f"--compute-from {args.compute_from}: no {', '.join(missing)} config in it")
    return args


def ring_allreduce_s(nbytes: int, n: int, gbps: float, latency_us: float) -> float:
    """Return the ring all-reduce time of `nbytes` over n ranks at bus bandwidth `gbps` GB/s."""
    if n == 1 or nbytes == 0:
        return 0.0
    return 2 * (n - 1) / n * nbytes / (gbps * 1e9) + 2 * (n - 1) * latency_us * 1e-6


def ring_allgather_s(nbytes_each: int, n: int, gbps: float, latency_us: float) -> float:
    """Return the ring all-gather time of `nbytes_each` from each of n ranks at bus bandwidth
    `gbps` GB/s (each rank receives the other n-1 pieces, one ring step each)."""
    if n == 1 or nbytes_each == 0:
        return 0.0
    return (n - 1) * nbytes_each / (gbps * 1e9) + (n - 1) * latency_us * 1e-6


def project_exchange(
    plan: ExchangePlan, n: int, gbps: float, latency_us: float, window_s: float | None
) -> dict:
    """Return the seconds of each collective of `plan` on n ranks, and the part of them the
    step waits for: overlapped by up to `window_s` (eager), or not at all (None: graphed)."""
    sizes = plan.bytes_per_process()
    early = ring_allreduce_s(sizes["early"], n, gbps, latency_us)
    late = ring_allreduce_s(sizes["late"], n, gbps, latency_us)
    rows = ring_allgather_s(sizes["rows"], n, gbps, latency_us)
    if window_s is None:  # graphed: the dense parts as one all-reduce between the graphs
        dense = ring_allreduce_s(sizes["early"] + sizes["late"], n, gbps, latency_us)
        return {"early": early, "late": late, "dense": dense, "rows": rows, "hidden": 0.0,
                "exposed": dense + rows}  # fmt: skip
    hidden = min(early, window_s)
    return {"early": early, "late": late, "dense": early + late, "rows": rows,
            "hidden": hidden, "exposed": early - hidden + late + rows}  # fmt: skip


def project(
    step_s: float,
    plans: dict[int, ExchangePlan],
    tokens_per_step: int,
    window_s: float | None,
    graphed: bool,
    args: argparse.Namespace,
) -> list[dict]:
    """Return one projected row per GPU count for one reduce dtype: what each collective
    costs, what the step waits for, its tokens/s and efficiency (and, graphed, both with the
    eager step's overlap)."""
    rows = []
    single = tokens_per_step / step_s
    for n in args.gpus:
        inside = n <= args.gpus_per_node
        gbps = args.intra_gbps if inside else args.inter_gbps
        plan = plans[n]
        built = project_exchange(plan, n, gbps, args.latency_us, None if graphed else window_s)
        row = {
            "gpus": n,
            "nodes": -(-n // args.gpus_per_node),
            "link": "intra-node" if inside else "inter-node",
            "bus_gbps": gbps,
            "reduce_dtype": plan.reduce_dtype,
            "rows_exchanged": plan.rows is not None,
            "bytes_per_process": plan.bytes_per_process(),
            **{f"projected_{k}_ms": v * 1e3 for k, v in built.items()},
            "projected_step_ms": (step_s + built["exposed"]) * 1e3,
        }
        row["projected_tokens_per_s"] = n * tokens_per_step / (step_s + built["exposed"])
        row["projected_efficiency"] = row["projected_tokens_per_s"] / (n * single)
        if graphed and window_s is not None:  # the graphed step, were it to overlap as eager
            over = project_exchange(plan, n, gbps, args.latency_us, window_s)
            row["projected_exposed_with_overlap_ms"] = over["exposed"] * 1e3
            row["projected_efficiency_with_overlap"] = step_s / (step_s + over["exposed"])
        rows.append(row)
    return rows


def collective_worker(argv: list[str]) -> None:
    """One rank of the measured collectives: for each (op, bytes, dtype) of the JSON list in
    argv, time `repeats` all-reduces of that many bytes of dtype, or all-gathers of that many
    bytes from each rank; rank 0 prints the seconds of each as one JSON list of lists."""
    rank, world, repeats = map(int, argv[:3])
    backend, ops = argv[3], json.loads(argv[4])
    import torch.distributed as dist

    dist.init_process_group(backend, rank=rank, world_size=world)
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    every = []
    for op, nbytes, dtype in ops:
        wire = REDUCE_DTYPES[dtype]
        x = torch.ones(max(1, nbytes // wire.itemsize), dtype=wire, device=device)
        out = torch.empty(world * x.numel(), dtype=wire, device=device)
        times = []
        for i in range(repeats + 2):  # two untimed: connection set-up, buffers
            dist.barrier()
            sync(device)
            start = time.perf_counter()
            if op == "allgather":
                gather(out, x)
            else:
                dist.all_reduce(x)
            sync(device)
            if i >= 2:
                times.append(time.perf_counter() - start)
        every.append(times)
    if rank == 0:
        print(json.dumps(every), flush=True)
    dist.destroy_process_group()
    # gloo's worker threads can crash an ordinary interpreter exit (pytorch/pytorch#179291,
    # see docs/performance.md): the result is out, leave at once
    sys.stdout.flush()
    os._exit(0)


def measure_collectives(
    ops: list[tuple[str, int, str]], device: torch.device, repeats: int
) -> list[dict]:
    """Return the median time of each real collective (op, bytes, dtype): an all-reduce of
    `bytes` of dtype, or an all-gather of `bytes` from each process; 2 gloo processes on
    127.0.0.1 on CPU, a 1-process NCCL group on CUDA."""
    world, backend = (1, "nccl") if device.type == "cuda" else (2, "gloo")
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, __file__, WORKER_FLAG]
    procs = [
        subprocess.Popen(
            [*cmd, str(r), str(world), str(repeats), backend, json.dumps(ops)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    outs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        if proc.returncode != 0:
            last = (err.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"collective worker exited {proc.returncode}: {last}")
    every = json.loads(outs[0][0].strip().splitlines()[-1])
    results = []
    for (op, nbytes, dtype), times in zip(ops, every, strict=True):
        seconds = statistics.median(times)
        # nccl-tests' bus bandwidth: all-reduce bytes / time · 2(N-1)/N; all-gather (N · bytes
        # each) / time · (N-1)/N (N = 1: no traffic, no figure)
        moved = 2 * (world - 1) / world * nbytes if op == "allreduce" else (world - 1) * nbytes
        results.append(
            {
                "op": op,
                "dtype": dtype,
                "bytes": nbytes,
                "backend": backend,
                "ranks": world,
                "ms": seconds * 1e3,
                "times_ms": [t * 1e3 for t in times],
                "bus_gbps": moved / seconds / 1e9 if world > 1 else None,
            }
        )
    return results


def measure_window(runner: Runner, steps: int) -> dict:
    """Return the eager step's overlap window: per step, the time from the output layer's
    gradient being complete (the last of its post-accumulate hooks) to the end of the backward
    (the last parameter's hook); the median, and every step's."""
    model, device = runner.model, runner.device
    early = {id(p) for p in model.decoder.parameters()} - {id(model.embedding.weight)}
    marks: dict[int, float] = {}

    def mark(param: torch.nn.Parameter) -> None:
        sync(device)  # the gradient is complete on the device, not only queued
        marks[id(param)] = time.perf_counter()

    params = [p for p in model.parameters() if p.requires_grad]
    hooks = [p.register_post_accumulate_grad_hook(mark) for p in params]
    windows, whole = [], []
    try:
        for _ in range(steps):
            marks.clear()
            start = time.perf_counter()
            runner.step()
            sync(device)
            whole.append(time.perf_counter() - start)
            ready = max(marks[i] for i in early)
            windows.append(max(marks.values()) - ready)
    finally:
        for hook in hooks:
            hook.remove()
    return {
        "window_ms": statistics.median(windows) * 1e3,
        "window_steps_ms": [w * 1e3 for w in windows],
        # the same steps' own time (hooks and synchronizes included): the window's context
        "window_step_ms": statistics.median(whole) * 1e3,
    }


def measure_config(config: str, args: argparse.Namespace, device: torch.device) -> dict:
    """Return the measurements of one config: step time, overlap window, what the exchange
    sends, the collectives; and its projection per reduce dtype."""
    overrides = {k: getattr(args, k) for k in ("vocab", "hidden", "bptt") if getattr(args, k)}
    shape = replace(CONFIGS[config], **overrides)
    if args.batch_per_process:
        shape = replace(shape, batch=args.batch_per_process)
    graphed = MODE[device.type] == "graphed"
    recorded = args.recorded.get(config)
    precision = args.precision if recorded is None else recorded.get("precision", "?")
    if recorded is not None:  # another run's compute: the step and window are not timed here
        step_s, window = recorded["step_ms"] / 1e3, None
        rounds = [r / 1e3 for r in recorded["step_round_ms"]]
        graphed = recorded.get("mode", "graphed") == "graphed"
        model, _ = build(args.variant, shape, torch.device("meta"))  # sizes only
    else:
        case = Case(args.variant, config, args.precision, MODE[device.type])
        runner = Runner(case, shape, SimpleNamespace(layers=1, order=3), device)
        runner.warmup(args.warmup)
        rounds = [runner.run(args.steps) / args.steps for _ in range(args.rounds)]
        step_s = statistics.median(rounds)
        if graphed:  # only an eager step overlaps: measure its window on one
            del runner
            eager = Case(args.variant, config, args.precision, "eager")
            runner = Runner(eager, shape, SimpleNamespace(layers=1, order=3), device)
            runner.warmup(args.warmup)
        window = measure_window(runner, args.steps * args.rounds)
        model = runner.model
    tokens = shape.batch * shape.bptt
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    plans = {
        dtype: {n: plan_exchange(model, tokens, n, dtype) for n in [2, *args.gpus]}
        for dtype in args.reduce_dtypes
    }
    del model
    ops = []
    for dtype, by_n in plans.items():  # at 2 processes, as the CPU measures them
        sizes = by_n[2].bytes_per_process()
        ops.append(("allreduce", sizes["early"] + sizes["late"], dtype))
    rows_bytes = max(by_n[2].bytes_per_process()["rows"] for by_n in plans.values())
    if rows_bytes:
        ops.append(("allgather", rows_bytes, "fp32"))
    collectives = measure_collectives(ops, device, args.allreduce_repeats)
    window_s = window["window_ms"] / 1e3 if window else None
    measured = {
        "config": config,
        **asdict(shape),
        "batch_per_process": shape.batch,
        "variant": args.variant,
        "precision": precision,
        "mode": "graphed" if graphed else "eager",
        "compute_from": str(args.compute_from) if recorded is not None else None,
        "params": params,
        "grad_bytes": params * GRAD_BYTES,  # the dense fp32 all-reduce of every gradient
        "step_ms": step_s * 1e3,
        "step_round_ms": [r * 1e3 for r in rounds],
        "tokens_per_s": tokens / step_s,
        "window_ms": window["window_ms"] if window else None,
        "window_steps_ms": window["window_steps_ms"] if window else None,
        "window_step_ms": window["window_step_ms"] if window else None,
        "window_source": None if window is None else "eager one-process step",
        "collectives": collectives,
        "projection": {
            dtype: project(step_s, by_n, tokens, window_s, graphed, args)
            for dtype, by_n in plans.items()
        },
    }
    return measured


HEADER = (
    f"{'GPUs':>5}{'nodes':>6}{'GB/s':>6}{'global B':>9}{'dense MB':>9}{'rows MB':>8}"
    f"{'early ms':>9}{'late ms':>9}{'rows ms':>9}{'hidden ms':>10}{'waited ms':>10}"
    f"{'step ms':>9}{'tokens/s':>11}{'eff':>7}"
)


def print_config(m: dict) -> None:
    """Print one config's measurements and its projection tables (one per reduce dtype)."""
    window = (
        f"overlap window {m['window_ms']:.2f} ms of a {m['window_step_ms']:.2f} ms step "
        f"({m['window_source']})"
        if m["window_ms"] is not None
        else "overlap window not measured (compute from a record: no overlap)"
    )
    source = f"from {m['compute_from']}" if m["compute_from"] else "measured"
    print(
        f"== {m['config']}: {m['variant']}, V {m['vocab']}, H {m['hidden']}, "
        f"b {m['batch_per_process']} per process, T {m['bptt']}, {m['precision']}, "
        f"{m['mode']} step\n"
        f"{source}: step {m['step_ms']:.2f} ms ({m['tokens_per_s']:.0f} tokens/s per process); "
        f"{window}; {m['params']:,} parameters = {m['grad_bytes'] / 1e6:.2f} MB of fp32 "
        "gradients, all of them all-reduced per step before the exchange"
    )
    for c in m["collectives"]:
        bus = f", {c['bus_gbps']:.2f} GB/s bus" if c["bus_gbps"] else " (no link: a lower bound)"
        print(
            f"measured {c['op']} of {c['bytes'] / 1e6:.2f} MB {c['dtype']}: {c['ms']:.2f} ms "
            f"({c['ranks']} {c['backend']} process{'es' if c['ranks'] > 1 else ''}{bus})"
        )
    overlap = m["mode"] == "graphed" and m["window_ms"] is not None
    for dtype, rows in m["projection"].items():
        print(
            f"-- reduce_dtype {dtype}: per process, the dense gradients (the output layer's "
            "early, the rest late) and the embedding's rows where they pay"
        )
        print(HEADER + (f"{'eff overlap':>12}" if overlap else ""))
        for r in rows:
            sizes = r["bytes_per_process"]
            line = (
                f"{r['gpus']:>5}{r['nodes']:>6}{r['bus_gbps']:>6.0f}"
                f"{r['gpus'] * m['batch_per_process']:>9}"
                f"{(sizes['early'] + sizes['late']) / 1e6:>9.2f}{sizes['rows'] / 1e6:>8.2f}"
                f"{r['projected_early_ms']:>9.3f}{r['projected_late_ms']:>9.3f}"
                f"{r['projected_rows_ms']:>9.3f}{r['projected_hidden_ms']:>10.3f}"
                f"{r['projected_exposed_ms']:>10.3f}{r['projected_step_ms']:>9.2f}"
                f"{r['projected_tokens_per_s']:>11.0f}{r['projected_efficiency']:>7.3f}"
            )
            if overlap:
                line += f"{r['projected_efficiency_with_overlap']:>12.3f}"
            print(line, flush=True)


def main(argv: list[str] | None = None) -> list[dict]:
    """Measure every config, print its projection tables, write the JSON."""
    args = parse_args(argv)
    device = torch.device(args.device)
    meta = run_meta(
        "scaling.py",
        argv,
        device,
        args,
        step=f"hornn_dist.training.step.TrainStep ({MODE[device.type]}, as each rank runs it)",
        exchange="hornn_dist.training.exchange.plan_exchange, per GPU count and reduce dtype",
        model="projected: ring all-reduce = 2(N-1)/N * bytes / bus bandwidth + 2(N-1) * "
        "latency; ring all-gather = (N-1) * bytes each / bus bandwidth + (N-1) * latency; "
        "waited = early - min(early, window) + late + rows (eager) or all-reduce(early + "
        "late) + rows (graphed); step = compute + waited; tokens/s = N * b * T / step; "
        "efficiency = tokens/s(N) / (N * tokens/s(1))",
        intra_gbps_source="NVIDIA nccl-tests all_reduce_perf busbw, 8x H100 SXM (NVLink 4)",
        inter_gbps_source="400 Gb/s NDR InfiniBand, one NIC per GPU (DGX H100)",
    )
    print(meta_line(meta), flush=True)
    rows: list[dict] = []
    for config in args.configs:
        rows.append(measure_config(config, args, device))
        print_config(rows[-1])
        write_json(args.json, meta, rows)  # after every config: a killed run keeps its rows
    print(
        f"projected: intra-node {args.intra_gbps:g} GB/s up to {args.gpus_per_node} GPUs, "
        f"inter-node {args.inter_gbps:g} GB/s above, {args.latency_us:g} µs per ring step; "
        "'rows MB' 0: the embedding's gradient is in the dense all-reduce; 'hidden': the output layer's all-reduce under the backward (eager "
        "steps); 'waited': what the step waits for"
    )
    print(f"wrote {args.json}")
    return rows


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == WORKER_FLAG:
        collective_worker(sys.argv[2:])
    else:
        main()
