"""Data-parallel scaling, measured here and projected to 1-64 GPUs (a projection, not a run).

    python benchmarks/scaling.py                          # CPU: paper config (~7 s on 2 cores)
    python benchmarks/scaling.py --configs paper,big      # + big (about a minute more on CPU)
    python benchmarks/scaling.py --device cuda            # one GPU: paper+big, bf16
    python benchmarks/scaling.py --inter-gbps 25 --gpus 1,8,16,32

Measured on the machine it runs on, per config:

* compute: the per-process step time of the trainer's own step (`TrainStep`: replayed CUDA
  graphs on CUDA, eager on CPU, as every rank runs it) without its all-reduce, at the
  per-process batch b (`--batch-per-process`, default the config's B: paper 20, big 128), as
  `throughput.py` times it;
* bytes: what the step all-reduces per step, its flat buffer of every parameter's gradient,
  sum(numel) x 4 bytes (fp32 gradients: the parameters stay fp32 under bf16 autocast);
* all-reduce: a real `torch.distributed.all_reduce` of a float32 tensor of that many bytes, on
  CPU between 2 processes over gloo on 127.0.0.1, on CUDA in a 1-process NCCL group (no link:
  a lower bound), median of `--allreduce-repeats`.

Projected for N GPUs (weak scaling: each rank keeps b streams, the global batch is N·b):

    all-reduce(N) = 2(N-1)/N · bytes / bandwidth + 2(N-1) · latency        (ring; 0 at N = 1)
    step(N)       = compute + all-reduce(N)       (the step all-reduces between its backward
                                                  and its update: nothing overlaps it)
    tokens/s(N)   = N · b · T / step(N)
    efficiency(N) = tokens/s(N) / (N · tokens/s(1))

The bandwidth is an all-reduce bus bandwidth, as nccl-tests reports it (busbw = bytes /
time · 2(N-1)/N). Up to `--gpus-per-node` (8) GPUs the ring stays inside one node and uses
`--intra-gbps` (default 450 GB/s: the all_reduce bus bandwidth NVIDIA's nccl-tests reach on
8x H100 SXM over NVLink 4 / NVSwitch); above it the ring crosses nodes and the slowest link,
`--inter-gbps` (default 50 GB/s: one 400 Gb/s NDR InfiniBand NIC per GPU, as in a DGX H100),
bounds it. `--latency-us` (default 5 µs per ring step) is an assumption, not a measurement.
The compute time is this machine's: on a CPU the projection is for N such processes joined
by that interconnect. Table and JSON (`--json`, default benchmarks/results/scaling.json).
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

from common import comma_list, free_port, meta_line, run_meta, write_json
from throughput import CONFIGS, PRECISIONS, VARIANTS, Case, Runner

DEFAULT_JSON = Path(__file__).parent / "results" / "scaling.json"
GPUS = "1,2,4,8,16,64"
INTRA_GBPS = 450.0  # nccl-tests all_reduce busbw, 8x H100 SXM, NVLink 4 / NVSwitch
INTER_GBPS = 50.0  # 400 Gb/s NDR InfiniBand, one NIC per GPU
LATENCY_US = 5.0  # per ring step: an assumption
GRAD_BYTES = 4  # fp32 gradients
WORKER_FLAG = "--allreduce-worker"
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
        "--batch-per-process", type=int, help="streams per rank b (default: the config's B)"
    )
    for name in ("vocab", "hidden", "bptt"):
        p.add_argument(f"--{name}", type=int, help=f"{name}: overrides every config")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps (2)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per round (5)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; median reported (3)")
    p.add_argument("--allreduce-repeats", type=int, default=10, help="timed all-reduces (10)")
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
    return args


def ring_allreduce_s(nbytes: int, n: int, gbps: float, latency_us: float) -> float:
    """Return the ring all-reduce time of `nbytes` over n ranks at bus bandwidth `gbps` GB/s."""
    if n == 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / (gbps * 1e9) + 2 * (n - 1) * latency_us * 1e-6


def project(
    step_s: float, nbytes: int, tokens_per_step: int, args: argparse.Namespace
) -> list[dict]:
    """Return one projected row per GPU count: all-reduce, step, tokens/s and efficiency."""
    rows = []
    single = tokens_per_step / step_s
    for n in args.gpus:
        inside = n <= args.gpus_per_node
        gbps = args.intra_gbps if inside else args.inter_gbps
        allreduce = ring_allreduce_s(nbytes, n, gbps, args.latency_us)
        step = step_s + allreduce
        tokens = n * tokens_per_step / step
        rows.append(
            {
                "gpus": n,
                "nodes": -(-n // args.gpus_per_node),
                "link": "intra-node" if inside else "inter-node",
                "bus_gbps": gbps,
                "projected_allreduce_ms": allreduce * 1e3,
                "projected_step_ms": step * 1e3,
                "projected_tokens_per_s": tokens,
                "projected_efficiency": tokens / (n * single),
            }
        )
    return rows


def allreduce_worker(argv: list[str]) -> None:
    """One rank of the measured all-reduce: time `repeats` all-reduces of `numel` float32s;
    rank 0 prints the seconds of each as one JSON line."""
    rank, world, numel, repeats, backend = (*map(int, argv[:4]), argv[4])
    import torch.distributed as dist

    dist.init_process_group(backend, rank=rank, world_size=world)
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    x = torch.ones(numel, dtype=torch.float32, device=device)
    times = []
    for i in range(repeats + 2):  # two untimed: connection set-up, buffers
        dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        dist.all_reduce(x)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= 2:
            times.append(time.perf_counter() - start)
    if rank == 0:
        print(json.dumps(times), flush=True)
    dist.destroy_process_group()
    # gloo's worker threads can crash an ordinary interpreter exit (pytorch/pytorch#179291,
    # see docs/performance.md): the result is out, leave at once
    sys.stdout.flush()
    os._exit(0)


def measure_allreduce(nbytes: int, device: torch.device, repeats: int) -> dict:
    """Return the median time of a real all-reduce of `nbytes` (float32): 2 gloo processes on
    127.0.0.1 on CPU, a 1-process NCCL group on CUDA."""
    world, backend = (1, "nccl") if device.type == "cuda" else (2, "gloo")
    numel = nbytes // GRAD_BYTES
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                WORKER_FLAG,
                str(r),
                str(world),
                str(numel),
                str(repeats),
                backend,
            ],  # fmt: skip
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
            raise RuntimeError(f"all-reduce worker exited {proc.returncode}: {last}")
    times = json.loads(outs[0][0].strip().splitlines()[-1])
    seconds = statistics.median(times)
    return {
        "allreduce_backend": backend,
        "allreduce_ranks": world,
        "allreduce_ms": seconds * 1e3,
        "allreduce_times_ms": [t * 1e3 for t in times],
        # nccl-tests' bus bandwidth: bytes / time · 2(N-1)/N (N = 1: no traffic, no figure)
        "allreduce_bus_gbps": (nbytes / seconds * 2 * (world - 1) / world / 1e9)
        if world > 1
        else None,
    }


def measure_config(config: str, args: argparse.Namespace, device: torch.device) -> dict:
    """Return the measurements of one config: step time, gradient bytes, all-reduce."""
    overrides = {k: getattr(args, k) for k in ("vocab", "hidden", "bptt") if getattr(args, k)}
    shape = replace(CONFIGS[config], **overrides)
    if args.batch_per_process:
        shape = replace(shape, batch=args.batch_per_process)
    case = Case(args.variant, config, args.precision, MODE[device.type])
    runner = Runner(case, shape, SimpleNamespace(layers=1, order=3), device)
    runner.warmup(args.warmup)
    rounds = [runner.run(args.steps) / args.steps for _ in range(args.rounds)]
    step_s = statistics.median(rounds)
    params = [p for p in runner.model.parameters() if p.requires_grad]
    nbytes = sum(p.numel() for p in params) * GRAD_BYTES
    del runner
    measured = {
        "config": config,
        **asdict(shape),
        "batch_per_process": shape.batch,
        "variant": args.variant,
        "precision": args.precision,
        "params": nbytes // GRAD_BYTES,
        "grad_bytes": nbytes,
        "step_ms": step_s * 1e3,
        "step_round_ms": [r * 1e3 for r in rounds],
        "tokens_per_s": shape.batch * shape.bptt / step_s,
        **measure_allreduce(nbytes, device, args.allreduce_repeats),
    }
    measured["projection"] = project(step_s, nbytes, shape.batch * shape.bptt, args)
    return measured


HEADER = (
    f"{'GPUs':>5}{'nodes':>6}  {'link':<11}{'GB/s':>6}{'global B':>9}"
    f"{'all-reduce ms':>15}{'step ms':>10}{'tokens/s':>13}{'efficiency':>12}"
)
SUBHEADER = f"{'':>5}{'':>6}  {'':<11}{'':>6}{'':>9}{'projected':>15}{'projected':>10}" + (
    f"{'projected':>13}{'projected':>12}"
)


def print_config(m: dict) -> None:
    """Print one config's measurements and its projection table."""
    bus = m["allreduce_bus_gbps"]
    link = (
        f"{m['allreduce_ranks']} {m['allreduce_backend']} processes on 127.0.0.1, "
        f"{bus:.2f} GB/s bus"
        if bus is not None
        else f"{m['allreduce_ranks']} {m['allreduce_backend']} process (no link: a lower bound)"
    )
    print(
        f"== {m['config']}: {m['variant']}, V {m['vocab']}, H {m['hidden']}, "
        f"b {m['batch_per_process']} per process, T {m['bptt']}, {m['precision']}\n"
        f"measured: step {m['step_ms']:.2f} ms ({m['tokens_per_s']:.0f} tokens/s per process); "
        f"{m['params']:,} parameters = {m['grad_bytes'] / 1e6:.2f} MB fp32 gradients "
        f"all-reduced per step; all-reduce {m['allreduce_ms']:.2f} ms ({link})"
    )
    print(HEADER)
    print(SUBHEADER)
    for r in m["projection"]:
        print(
            f"{r['gpus']:>5}{r['nodes']:>6}  {r['link']:<11}{r['bus_gbps']:>6.0f}"
            f"{r['gpus'] * m['batch_per_process']:>9}{r['projected_allreduce_ms']:>15.3f}"
            f"{r['projected_step_ms']:>10.2f}{r['projected_tokens_per_s']:>13.0f}"
            f"{r['projected_efficiency']:>12.3f}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> list[dict]:
    """Measure every config, print its projection table, write the JSON."""
    args = parse_args(argv)
    device = torch.device(args.device)
    meta = run_meta(
        "scaling.py",
        argv,
        device,
        args,
        step=f"hornn_dist.training.step.TrainStep ({MODE[device.type]}, as each rank runs it)",
        model="projected: ring all-reduce = 2(N-1)/N * bytes / bus bandwidth + 2(N-1) * "
        "latency; step = compute + all-reduce (no overlap); tokens/s = N * b * T / step; "
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
        "the all-reduce runs between backward and update, not overlapped"
    )
    print(f"wrote {args.json}")
    return rows


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == WORKER_FLAG:
        allreduce_worker(sys.argv[2:])
    else:
        main()
