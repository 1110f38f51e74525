"""Training throughput (tokens/s) and peak memory of HORNN poolings vs torch.nn RNN/LSTM.

One step is the trainer's own step, `hornn_dist.training.step.TrainStep` (what
`hornn_dist.train` runs on each TBPTT window), around a bare model with the trainer's
default recipe (`OptimConfig()`: SGD lr 0.5, momentum 0.5, weight decay 1e-6, the clip
that `optim.clip_mode = "auto"` resolves for the model, no max-norm):

    batch upload -> embedding -> recurrence -> softmax cross-entropy -> backward
    -> (gradient norms) -> clip -> SGD -> max-norm (off) -> the state carried, detached

The trainer measures the gradient norms only on its logging steps (every `log.every`), so
eager and compiled steps are timed without them (`measure=False`); a CUDA graph computes
them on every replay, as the trainer's graph does. Under bf16/fp16 the forward runs in
`torch.autocast` as Accelerate's prepared model runs it; fp16 rows have no gradient scaler
(the trainer's fp16 adds Accelerate's, with fused SGD). Every mode runs that step:

    eager     TrainStep.run every step, as the trainer on CPU or with train.cuda_graph = false
    graphed   (CUDA) TrainStep's own CUDA graph, as the trainer on one GPU: WARMUP_STEPS
              eager steps on a side stream, then captured and replayed; the warm-up runs at
              least WARMUP_STEPS + 1 steps, so every timed step is a replay
    compiled  torch.compile of TrainStep's forward+backward and its update, default mode
              (--compile; `compile_parts` here: the product's step has no compiled route)
    eager-ar, graphed-ar
              what a rank of a multi-process run runs: the step averages its gradients over
              the processes (TrainStep(reduce=True)), eagerly or between its two graphs.
              Unless launched with more ranks, the group is this one process (NCCL on CUDA,
              gloo on CPU): the cost of the exchange path, not of the wire (scaling.py
              projects that)
    eager-ddp the peer of those: the eager step around a DDP-wrapped model (DDP's bucketed
              all-reduce overlapping the backward), the trainer's multi-process step before
              the flat all-reduce

Configs (order 3, one layer, E = H):

    paper   V 10k, H 400,  B 20,  T 30   (the paper's PTB setting)
    big     V 44k, H 1024, B 128, T 30

    python benchmarks/throughput.py                 # CPU: paper, fp32, eager (~30 s on 2 cores)
    python benchmarks/throughput.py --device cuda   # paper+big, fp32+bf16, eager+graphed
    python benchmarks/throughput.py --device cuda --compile --configs paper
    python benchmarks/throughput.py --variants hornn-fofe,hornn-fofe-loop,lstm
    python benchmarks/throughput.py --device cuda --variants hornn-fofe,hornn-fofe-triton,lstm

Default variants: hornn-{sum,max,fofe,gated} (fused engine), rnn, lstm; on CUDA, when the
triton engine can run there, also hornn-{sum,max,fofe,gated}-triton (model.engine = "triton",
one Triton kernel per time step). On CPU a -triton row runs only under Triton's interpreter
(TRITON_INTERPRET=1, very slow: tests and tiny sizes); otherwise it is an error row. The HORNN
rows run what the trainer runs by default: under bf16/fp16 on CUDA each layer in fp16, as cuDNN
runs its RNNs (model.recurrence_precision = "fp16"); a -autocastrec row runs it in autocast's
dtype, a -fp32rec row in fp32 (TF32 GEMMs on CUDA).

Each (config, precision) is one group: its variants × modes are built together and timed in
interleaved rounds (median reported), so a burst of other load hits one round of every row
rather than every round of one. The ratio column divides by the best LSTM of the same group
(the larger of its eager and graphed tokens/s). A row that fails (capture error, OOM, no
CUDA) keeps its error string and the run goes on. Add a variant to VARIANTS or a config to
CONFIGS and it shows up in the table and the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import hornn_dist  # noqa: F401  before torch: the trainer's CPU allocator option (its __init__)

# isort: split
import torch

from hornn_dist.config import OptimConfig
from hornn_dist.models import ModelConfig, RecurrentLM, build_model
from hornn_dist.models.poolings import PAPER_POOLINGS
from hornn_dist.models.precision import AUTOCAST_DTYPES
from hornn_dist.training.optim import build_optimizer
from hornn_dist.training.step import WARMUP_STEPS, TrainStep

from common import (
    comma_list,
    error_line,
    forced_tiles,
    free_port,
    meta_line,
    run_meta,
    write_json,
)

DEFAULT_JSON = Path(__file__).parent / "results" / "throughput.json"
OPTIM = OptimConfig()  # the trainer's default recipe, as in configs/demo.toml
STEP_SETTINGS = ("lr", "momentum", "weight_decay", "clip", "clip_mode", "max_col_norm")  # JSON
BLOCKS = 16  # distinct (T+1, B) token blocks cycled through, so steps do not repeat one batch


@dataclass(frozen=True)
class Shape:
    """Sizes of one benchmark config: vocabulary, hidden (= embedding unless set), batch, T."""

    vocab: int
    hidden: int
    batch: int
    bptt: int
    embedding: int = 0  # 0 = hidden


CONFIGS: dict[str, Shape] = {
    "paper": Shape(vocab=10_000, hidden=400, batch=20, bptt=30),
    "big": Shape(vocab=44_000, hidden=1024, batch=128, bptt=30),
}


def _hornn(
    pooling: str, engine: str = "fused", precision: str = ModelConfig.recurrence_precision
) -> ModelConfig:
    return ModelConfig(
        arch="hornn", pooling=pooling, order=3, engine=engine, recurrence_precision=precision
    )


VARIANTS: dict[str, ModelConfig] = {
    "hornn-sum": _hornn("sum"),
    "hornn-max": _hornn("max"),
    "hornn-fofe": _hornn("fofe"),
    "hornn-gated": _hornn("gated"),
    "rnn": ModelConfig(arch="rnn"),
    "lstm": ModelConfig(arch="lstm"),
    "gru": ModelConfig(arch="gru"),
    "hornn-fofe-loop": _hornn("fofe", engine="loop"),
    # the triton engine (one Triton kernel per time step; CUDA, or Triton's interpreter)
    **{f"hornn-{pooling}-triton": _hornn(pooling, engine="triton") for pooling in PAPER_POOLINGS},
    # under mixed precision the rows above run each layer in fp16, as cuDNN runs its RNNs
    # (model.recurrence_precision = "fp16", the default); these in autocast's dtype
    # (-autocastrec) or in fp32 with TF32 GEMMs (-fp32rec), on both engines; under fp32 they
    # equal the rows above
    **{
        f"hornn-{pooling}{engine_suffix}-{precision}rec": _hornn(
            pooling, engine=engine, precision=precision
        )
        for precision in ("autocast", "fp32")
        for engine, engine_suffix in (("fused", ""), ("triton", "-triton"))
        for pooling in PAPER_POOLINGS
    },
}
DEFAULT_VARIANTS = "hornn-sum,hornn-max,hornn-fofe,hornn-gated,rnn,lstm"  # CPU; CUDA adds:
TRITON_VARIANTS = "hornn-sum-triton,hornn-max-triton,hornn-fofe-triton,hornn-gated-triton"
PRECISIONS = {"fp32": None, **AUTOCAST_DTYPES}  # autocast dtype
# The *-ar modes give the step `reduce=True` (TrainStep's multi-process path: the gradient
# exchange, training/exchange.py) and eager-ddp wraps the model in DDP instead (the trainer's earlier
# multi-process step, the peer), in a one-process group (NCCL on CUDA, gloo on CPU) unless
# launched with more: what a rank runs, less the wire time that scaling.py adds. Each maps to
# the one-process mode it is compared with.
ALL_REDUCE_MODES = {
    "eager-ar": "eager",
    "graphed-ar": "graphed",
    "eager-ddp": "eager",
}
MODES = ("eager", "graphed", "compiled", *ALL_REDUCE_MODES)


@dataclass(frozen=True)
class Case:
    """One row of the table: a variant at one config, precision and mode."""

    variant: str
    config: str
    precision: str
    mode: str


def default_variants(device: str) -> str:
    """Return the default --variants for a device: on CUDA also the triton ones if they can run.

    The triton engine's module is imported only here and only for CUDA: the triton package is
    optional (the module itself reports it missing through `unavailable_reason`).
    """
    if not device.startswith("cuda"):
        return DEFAULT_VARIANTS
    from hornn_dist.models.triton_scan import unavailable_reason

    if unavailable_reason(torch.device("cuda")) is not None:
        return DEFAULT_VARIANTS
    return f"{DEFAULT_VARIANTS},{TRITON_VARIANTS}"


def build(
    variant: str, shape: Shape, device: torch.device, layers: int = 1, order: int = 3, seed: int = 0
) -> tuple[RecurrentLM, torch.optim.Optimizer]:
    """Return a freshly initialised model of `variant` at `shape` on `device` and the
    trainer's SGD over it."""
    cfg = replace(
        VARIANTS[variant],
        hidden_size=shape.hidden,
        embedding_size=shape.embedding,
        num_layers=layers,
        order=order,
    )
    torch.manual_seed(seed)
    with device:  # parameters are created on the device (fast init of the big config on GPU)
        model = build_model(cfg, shape.vocab)
    return model, build_optimizer(model, OPTIM)


class Runner:
    """One case ready to time: the trainer's TrainStep around a fresh model, and token blocks."""

    def __init__(self, case: Case, shape: Shape, args: argparse.Namespace, device: torch.device):
        how = ALL_REDUCE_MODES.get(case.mode, case.mode)  # eager, graphed or compiled
        if how == "graphed" and device.type != "cuda":
            raise RuntimeError(f"{case.mode} mode needs --device cuda")
        if case.mode in ALL_REDUCE_MODES:
            join_process_group(device)
        cfg = VARIANTS[case.variant]
        if cfg.arch == "hornn" and cfg.engine == "triton":  # an error row, not a failed step later
            from hornn_dist.models.triton_scan import check_available

            check_available(device)
        self.case, self.shape, self.device = case, shape, device
        self.model, self.opt = build(case.variant, shape, device, args.layers, args.order)
        forward: torch.nn.Module = self.model
        if case.mode == "eager-ddp":
            ids = [device.index or 0] if device.type == "cuda" else None
            forward = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
        gen = torch.Generator().manual_seed(1)
        # on the host, as the trainer's batches: TrainStep uploads each (pinned, on CUDA)
        self.data = torch.randint(
            0, shape.vocab, (BLOCKS, shape.bptt + 1, shape.batch), generator=gen
        )  # (BLOCKS, T+1, B)
        dtype = PRECISIONS[case.precision]
        self.train = TrainStep(
            forward,
            self.opt,
            device=device,
            batch_size=shape.batch,
            bptt=shape.bptt,
            optim=OPTIM,
            graph_reason=None if how == "graphed" else f"{case.mode} mode",
            reduce=case.mode in ALL_REDUCE_MODES and case.mode != "eager-ddp",
            autocast=(
                contextlib.nullcontext
                if dtype is None
                else lambda: torch.autocast(device_type=device.type, dtype=dtype)
            ),
        )
        self.graphed = how == "graphed"
        if case.mode == "compiled":
            # Dynamo guards on the optimizer object: every compiled row adds entries for the
            # same code (the step's body, SGD.step); past the default limit of 8 it silently
            # runs them eagerly, so raise the limit to cover every row of the run.
            cfg = torch._dynamo.config
            name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
            setattr(cfg, name, max(getattr(cfg, name), 256))
            compile_parts(self.train)
        self.i = 0

    def step(self) -> None:
        """Run one training step on the next token block (eager, compiled or a graph replay)."""
        block = self.data[self.i % BLOCKS]
        self.i += 1
        self.train.run(block[:-1], block[1:], measure=False)

    def warmup(self, steps: int) -> None:
        """Run `steps` untimed steps; graphed mode at least TrainStep's eager warm-up and the
        capture, so that every timed step replays the graph."""
        if self.case.mode == "compiled":
            steps = max(steps, 3)  # compile; recompile once SGD's momentum buffers exist
        if self.graphed:
            steps = max(steps, WARMUP_STEPS + 1)  # the last captures the step and replays it
        for _ in range(steps):
            self.step()
        if self.graphed and not self.train.graphs:
            raise RuntimeError("the step was not captured in a CUDA graph during the warm-up")

    def run(self, steps: int) -> float:
        """Return the wall-clock seconds of `steps` steps (GPU work included)."""
        sync(self.device)
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        sync(self.device)
        return time.perf_counter() - start


def compile_parts(step: TrainStep) -> None:
    """Run the step's forward+backward and its update through `torch.compile` from now on (the
    compiled mode; Dynamo breaks its graph at the backward, around the optimizer's calls and
    inside the recurrence engines). The product's step has no compiled route: it lives here."""
    step._forward_backward = torch.compile(step._forward_backward)
    step._update = torch.compile(step._update)


def join_process_group(device: torch.device) -> None:
    """Join torch.distributed's default group: the launcher's (RANK, WORLD_SIZE, MASTER_*), else
    a group of this one process; NCCL on CUDA, gloo on CPU."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend)
    else:
        url = f"tcp://127.0.0.1:{free_port()}"
        dist.init_process_group(backend, init_method=url, rank=0, world_size=1)


def sync(device: torch.device) -> None:
    """Wait for queued GPU work so wall-clock timings are honest."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_group(
    cases: list[Case], shape: Shape, args: argparse.Namespace, device: torch.device
) -> list[dict]:
    """Return one row per case of one (config, precision) group, timed in interleaved rounds."""
    runners: dict[Case, Runner] = {}
    rows: dict[Case, dict] = {}
    steps: dict[Case, int] = {}
    for case in cases:
        row = rows[case] = row_head(case, shape)
        try:
            if device.type == "cuda":
                sync(device)
                base = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
            runner = Runner(case, shape, args, device)
            runner.warmup(args.warmup)
            steps[case] = args.steps or auto_steps(runner, args.round_seconds)
            if device.type == "cuda":  # model + grads + momentum + one step's peak (+ graph pool)
                sync(device)
                row["peak_mem_mib"] = (torch.cuda.max_memory_allocated(device) - base) / 2**20
            row["params"] = runner.model.num_parameters()
            runners[case] = runner
        except Exception as exc:  # e.g. a capture error or OOM: report it, keep going
            row["error"] = error_line(exc)
            print(f"  {case.variant} {case.mode}: failed: {row['error']}", flush=True)
    times: dict[Case, list[float]] = {case: [] for case in runners}
    for _ in range(args.rounds):
        for case, runner in list(runners.items()):
            try:
                times[case].append(runner.run(steps[case]))
            except Exception as exc:
                rows[case]["error"] = error_line(exc)
                runners.pop(case)
    if args.profile:
        for case, runner in runners.items():
            rows[case].update(profile_kernels(runner))
    for case in runners:
        tokens = steps[case] * shape.bptt * shape.batch
        med = statistics.median(times[case])
        rows[case].update(
            steps=steps[case],
            round_seconds=times[case],
            steps_per_s=steps[case] / med,
            tokens_per_s=tokens / med,
        )
    lstm = [r for r in rows.values() if r["arch"] == "lstm" and "tokens_per_s" in r]
    baseline = [r for r in lstm if r["mode"] in ("eager", "graphed")] or lstm  # the LSTM
    best_lstm = max((r["tokens_per_s"] for r in baseline), default=None)
    for row in rows.values():
        if best_lstm and "tokens_per_s" in row:
            row["ratio_to_best_lstm"] = row["tokens_per_s"] / best_lstm
    for case, row in rows.items():  # the multi-process path against the one-process step
        alone = rows.get(replace(case, mode=ALL_REDUCE_MODES.get(case.mode, "")), {})
        if "tokens_per_s" in row and "tokens_per_s" in alone:
            row["ratio_to_one_process"] = row["tokens_per_s"] / alone["tokens_per_s"]
    runners.clear()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return [rows[case] for case in cases]


def profile_kernels(runner: Runner, steps: int = 3) -> dict[str, float]:
    """Return kernels (CUDA) or operators (CPU) launched per step and their time per step (ms).

    On CUDA this counts every kernel, memcpy and memset the profiler sees, graph replays
    included; it is how launch-bound a step is.
    """
    from torch.profiler import ProfilerActivity, profile

    cuda = runner.device.type == "cuda"
    activity = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU
    sync(runner.device)
    with profile(activities=[activity]) as prof:
        for _ in range(steps):
            runner.step()
        sync(runner.device)
    if cuda:
        events = prof.key_averages()
        count = sum(e.count for e in events)
        micros = sum(e.device_time_total for e in events)
    else:  # top-level operators only: nested aten calls would be counted twice
        top = [e for e in prof.events() if e.cpu_parent is None]
        count, micros = len(top), sum(e.cpu_time_total for e in top)
    return {"kernels_per_step": count / steps, "kernel_ms_per_step": micros / steps / 1000}


def auto_steps(runner: Runner, round_seconds: float) -> int:
    """Return the steps per round that take about `round_seconds` (2 to 1000)."""
    probe = 2
    seconds = runner.run(probe) / probe
    return max(2, min(1000, math.ceil(round_seconds / max(seconds, 1e-6))))


def row_head(case: Case, shape: Shape) -> dict:
    """Return the identifying fields of a result row."""
    cfg = VARIANTS[case.variant]
    hornn = cfg.arch == "hornn"
    return {
        "variant": case.variant,
        "arch": cfg.arch,
        "pooling": cfg.pooling if hornn else None,
        "engine": cfg.engine if hornn else "torch.nn",
        "config": case.config,
        **asdict(shape),
        "precision": case.precision,
        "mode": case.mode,
        "peak_mem_mib": None,
    }


def print_table(rows: list[dict]) -> None:
    """Print tokens/s, the ratio to the group's best LSTM and the peak memory of each row."""
    width = max([len(r["variant"]) + 2 for r in rows] + [22])
    print(
        f"{'variant':<{width}}{'config':<7}{'prec':<6}{'mode':<10}{'params':>8}{'tokens/s':>11}"
        f"{'vs LSTM':>9}{'peak MiB':>10}{'kernels':>9}{'kern ms':>9}"
    )
    for r in rows:
        head = f"{r['variant']:<{width}}{r['config']:<7}{r['precision']:<6}{r['mode']:<10}"
        if "error" in r:
            print(f"{head}  failed: {r['error']}")
            continue
        ratio = f"{r['ratio_to_best_lstm']:.2f}x" if "ratio_to_best_lstm" in r else "-"
        mem = f"{r['peak_mem_mib']:.0f}" if r["peak_mem_mib"] is not None else "-"
        kernels = f"{r['kernels_per_step']:.0f}" if "kernels_per_step" in r else "-"
        kern_ms = f"{r['kernel_ms_per_step']:.3f}" if "kernel_ms_per_step" in r else "-"
        print(
            f"{head}{r['params'] / 1e6:>7.2f}M{r['tokens_per_s']:>11.0f}{ratio:>9}{mem:>10}"
            f"{kernels:>9}{kern_ms:>9}",
            flush=True,
        )


def print_best(rows: list[dict]) -> None:
    """Print, per config and precision, each variant's fastest mode and its ratio to LSTM."""
    best: dict[tuple[str, str, str], dict] = {}
    for r in rows:
        key = (r["config"], r["precision"], r["variant"])
        if "tokens_per_s" in r and (
            key not in best or r["tokens_per_s"] > best[key]["tokens_per_s"]
        ):
            best[key] = r
    width = max([len(variant) + 2 for _, _, variant in best] + [22])
    print(
        f"{'variant':<{width}}{'config':<7}{'prec':<6}{'best mode':<10}{'tokens/s':>11}"
        f"{'vs LSTM':>9}"
    )
    for (config, precision, variant), r in best.items():
        ratio = f"{r['ratio_to_best_lstm']:.2f}x" if "ratio_to_best_lstm" in r else "-"
        print(
            f"{variant:<{width}}{config:<7}{precision:<6}{r['mode']:<10}{r['tokens_per_s']:>11.0f}"
            f"{ratio:>9}"
        )


def print_all_reduce(rows: list[dict]) -> None:
    """Print each multi-process row's tokens/s as a ratio to the same variant's one-process mode."""
    width = max([len(r["variant"]) + 2 for r in rows] + [22])
    print(f"{'variant':<{width}}{'config':<7}{'prec':<6}{'mode':<12}{'vs one process':>15}")
    for r in rows:
        if "ratio_to_one_process" in r:
            alone = ALL_REDUCE_MODES[r["mode"]]
            print(
                f"{r['variant']:<{width}}{r['config']:<7}{r['precision']:<6}{r['mode']:<12}"
                f"{r['ratio_to_one_process']:>8.3f}x {alone}"
            )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Return the command-line options, with device-dependent defaults filled in."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument(
        "--variants",
        help=f"comma list of {', '.join(VARIANTS)} (default: {DEFAULT_VARIANTS}; cuda with "
        "triton also the -triton ones of the four poolings)",
    )
    p.add_argument(
        "--configs", help=f"comma list of {', '.join(CONFIGS)} (default: cpu paper, cuda both)"
    )
    p.add_argument(
        "--precisions",
        "--precision",
        dest="precisions",
        help="comma list of fp32, bf16, fp16 (autocast; default: cpu fp32, cuda fp32,bf16)",
    )
    p.add_argument(
        "--modes",
        help="comma list of eager, graphed, compiled, eager-ar, graphed-ar, eager-ddp "
        "(default: cpu eager, cuda eager,graphed)",
    )
    p.add_argument("--compile", action="store_true", help="add the compiled mode")
    for name, help_ in (
        ("vocab", "vocabulary size"),
        ("hidden", "hidden size"),
        ("embedding", "embedding size (0 = hidden)"),
        ("batch", "batch size B"),
        ("bptt", "steps per window T"),
    ):
        p.add_argument(f"--{name}", type=int, help=f"{help_}: overrides every config")
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--order", type=int, default=3)
    p.add_argument("--warmup", type=int, help="untimed steps per row (default cpu 2, cuda 5)")
    p.add_argument(
        "--steps", type=int, help="timed steps per row and round (default cpu 6, cuda 0 = auto)"
    )
    p.add_argument(
        "--round-seconds", type=float, default=0.2, help="--steps 0: seconds per round (0.2)"
    )
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; median reported")
    p.add_argument(
        "--profile",
        action="store_true",
        help="add kernels per step and their time (CUDA; CPU: top-level operators)",
    )
    p.add_argument(
        "--triton-tiles",
        default="",
        help="CONFIG=BxHxKxW[xS],...: the triton rows of CONFIG use these tiles (triton_tiles.py"
        "'s notation) instead of the engine's choice (default: the engine's, or "
        "$HORNN_TRITON_TILES)",
    )
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"default {DEFAULT_JSON}")
    args = p.parse_args(argv)
    args.triton_tiles = parse_config_tiles(p, args.triton_tiles)
    cuda = args.device.startswith("cuda")
    args.variants = comma_list(
        p, "--variants", args.variants or default_variants(args.device), VARIANTS
    )
    args.configs = comma_list(
        p, "--configs", args.configs or ("paper,big" if cuda else "paper"), CONFIGS
    )
    args.precisions = comma_list(
        p, "--precisions", args.precisions or ("fp32,bf16" if cuda else "fp32"), PRECISIONS
    )
    args.modes = comma_list(
        p, "--modes", args.modes or ("eager,graphed" if cuda else "eager"), MODES
    )
    if args.compile and "compiled" not in args.modes:
        args.modes.append("compiled")
    if args.warmup is None:
        args.warmup = 5 if cuda else 2
    if args.steps is None:
        args.steps = 0 if cuda else 6
    for flag, value in (("--warmup", args.warmup), ("--steps", args.steps)):
        if value < 0:
            p.error(f"{flag} must be >= 0, got {value}")
    if args.rounds < 1:
        p.error(f"--rounds must be >= 1, got {args.rounds}")
    return args


def parse_config_tiles(p: argparse.ArgumentParser, value: str) -> dict[str, tuple[int, ...]]:
    """Return {config: tiles} of --triton-tiles "paper=32x16x32x4x4,big=64x32x32x8"."""
    from hornn_dist.models.triton_tiles import parse_tiles

    tiles = {}
    for item in (v for v in value.split(",") if v):
        config, _, text = item.partition("=")
        if config not in CONFIGS:
            p.error(f"--triton-tiles: unknown config {config!r} in {item!r}; choose from "
                    f"{', '.join(CONFIGS)}, e.g. paper=32x16x32x4x4")  # fmt: skip
        try:
            tiles[config] = parse_tiles(text, f"--triton-tiles {config}")
        except ValueError as err:
            p.error(str(err))
    return tiles


def shape_of(config: str, args: argparse.Namespace) -> Shape:
    """Return the sizes of a config with the command-line overrides applied."""
    overrides = {
        k: getattr(args, k)
        for k in ("vocab", "hidden", "embedding", "batch", "bptt")
        if getattr(args, k) is not None
    }
    return replace(CONFIGS[config], **overrides)


def main(argv: list[str] | None = None) -> list[dict]:
    """Run every variant × config × precision × mode, print the table, write the JSON."""
    args = parse_args(argv)
    device = torch.device(args.device)
    meta = run_meta(
        "throughput.py",
        argv,
        device,
        args,
        cudnn=torch.backends.cudnn.version() if device.type == "cuda" else None,
        tf32_matmul=torch.backends.cuda.matmul.allow_tf32,  # cuBLAS: HORNN, decoder
        tf32_cudnn=torch.backends.cudnn.allow_tf32,  # cuDNN: the RNN/LSTM baselines
        step="hornn_dist.training.step.TrainStep",
        **{k: getattr(OPTIM, k) for k in STEP_SETTINGS},  # lr, momentum, clip as before
        triton_tiles_env=os.environ.get("HORNN_TRITON_TILES"),
        configs={c: asdict(shape_of(c, args)) for c in args.configs},
        variants={v: asdict(VARIANTS[v]) for v in args.variants},
    )
    print(meta_line(meta), flush=True)
    rows: list[dict] = []
    for config in args.configs:
        shape = shape_of(config, args)
        for precision in args.precisions:
            print(
                f"== {config}: V {shape.vocab}, H {shape.hidden}, B {shape.batch}, "
                f"T {shape.bptt}, {precision}",
                flush=True,
            )
            cases = [
                Case(variant, config, precision, mode)
                for variant in args.variants
                for mode in args.modes
            ]
            group = measure_group_with_tiles(cases, shape, args, device, config)
            print_table(group)
            rows += group
            write_json(args.json, meta, rows)  # after every group: a killed run keeps its rows
    if len(args.configs) * len(args.precisions) > 1:
        print("\n== all groups")
        print_table(rows)
    if len(args.modes) > 1:
        print("\n== best mode of each variant (the ratio the speed issue asks for)")
        print_best([r for r in rows if r["mode"] not in ALL_REDUCE_MODES])
    if any("ratio_to_one_process" in r for r in rows):
        print("\n== the multi-process path (the gradient exchange) vs one process")
        print_all_reduce(rows)
    print(f"wrote {args.json}")
    return rows


def measure_group_with_tiles(
    cases: list[Case], shape: Shape, args: argparse.Namespace, device: torch.device, config: str
) -> list[dict]:
    """measure_group with the triton engine's tiles of --triton-tiles for `config`, if any."""
    if config not in args.triton_tiles:
        return measure_group(cases, shape, args, device)
    with forced_tiles(args.triton_tiles[config]):
        return measure_group(cases, shape, args, device)


if __name__ == "__main__":
    main()
