"""The output layer at large vocabularies: plain vs fused vs adaptive (`model.output_layer`).

Two parts, each on the product's own code:

    layer  the output layer alone (`RecurrentLM.output_loss`: what the trainer's step runs after
           the recurrent layers), forward + backward of its mean loss over N = B x T hidden
           states under the step's autocast, beside its three GEMMs alone (logits, d hidden,
           d W in the compute dtype, their inputs cast beforehand): time per call, median of
           --rounds interleaved rounds, and the call's peak memory above what was resident
    step   the trainer's step (`TrainStep`, eager, the trainer's default recipe `OptimConfig()`)
           of a gated HORNN-3 and of torch's nn.LSTM over each output layer: tokens/s and peak
           memory, each (size, model) in a process of its own that builds a model per output
           layer, warms each up, then runs one step of each in turn, --steps rounds (so a burst
           of other load hits every layer); then one more step of each, untimed, for its peak
           memory above what was resident just before it (weights, momentum), the allocator's
           free memory given back first (Linux: /proc/self/status VmHWM, reset through
           /proc/self/clear_refs; glibc's malloc_trim). The step is the trainer's: fused SGD
           on a CPU, tensors of 2 MB and more on huge pages (hornn_dist/__init__.py); with
           --before also the plain layer's step on foreach SGD and 4 KB pages (the trainer's
           step without those two), in a process of its own, and each row's speed against it

Each time is taken twice: wall clock, and the process's CPU time (user + system, page faults
included), which another load on the machine inflates far less; tokens/s are of both. The
words are drawn as text's are (Zipf: id k with probability ∝ 1/(k+1)). Sizes
are V x H (E = H, one layer), at B x T tokens a step (default 20 x 30, text8's); plain and
fused tie the output matrix to the embedding (as the text8 and WikiText-103 configs do), the
adaptive softmax has its own weights (untied). A model the product's memory check refuses
(`training.memory.check_fits`) or that fails keeps its error and the run goes on.

    python benchmarks/output_layer.py                              # every size, both parts
    python benchmarks/output_layer.py --sizes 44000x500 --parts layer
    python benchmarks/output_layer.py --sizes 267735x1024 --steps 2 --models lstm
    python benchmarks/output_layer.py --sizes 44000x500 --parts step --before
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hornn_dist import THP_ENV  # before torch: the trainer's CPU allocator option (its __init__)

# isort: split
import torch

from hornn_dist.config import OptimConfig
from hornn_dist.models import ModelConfig, build_model
from hornn_dist.models.output_layer import OUTPUT_LAYERS, coverage_cutoffs, default_cutoffs
from hornn_dist.models.precision import AUTOCAST_DTYPES
from hornn_dist.training.memory import check_fits
from hornn_dist.training.optim import build_optimizer
from hornn_dist.training.step import TrainStep
from hornn_dist.training.step_setup import uses_fused_sgd

from common import comma_list, error_line, meta_line, run_meta, write_json

DEFAULT_JSON = Path(__file__).parent / "results" / "output_layer.json"
DEFAULT_SIZES = "10000x500,10000x1024,44000x500,44000x1024,267735x500,267735x1024"
MODELS = {  # the recurrent layer under each output layer
    "hornn": dict(arch="hornn", pooling="gated", order=3),
    "lstm": dict(arch="lstm"),
}
PRECISIONS = {"fp32": None, **AUTOCAST_DTYPES}
BLOCKS = 4  # distinct (T+1, B) token blocks cycled through


@dataclass(frozen=True)
class Group:
    """The step part's unit: one model over each output layer at one size, in one process."""

    vocab: int
    hidden: int
    model: str
    layers: tuple[str, ...]
    batch: int
    bptt: int
    precision: str
    steps: int
    warmup: int
    threads: int
    before: bool = False  # foreach SGD and 4 KB pages (module docstring, --before)
    cutoffs: str = "fractions"  # the adaptive softmax's cutoffs (`cutoffs_for`, --cutoffs)


def zipf_tokens(vocab: int, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Return word ids drawn with probability ∝ 1 / (id + 1): text's word frequencies (Zipf),
    its ids ordered by count as a prepared corpus orders them. What falls in each of the
    adaptive softmax's clusters follows (uniform ids would put 80% of the words in its last)."""
    weights = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    flat = torch.multinomial(weights, int(torch.tensor(shape).prod()), True, generator=gen)
    return flat.view(shape)


def cutoffs_for(rule: str, vocab: int) -> list[int]:
    """Return the adaptive softmax's cutoffs at `vocab` words: `fractions`, 5% and 20% of V (the
    rule before the counts, `default_cutoffs`); `coverage`, the product's default rule
    (`coverage_cutoffs`) on the Zipf counts `zipf_tokens` draws from (a heavier tail than real
    text's, so a larger head: benchmarks/README.md, "Output layer")."""
    if rule == "coverage":
        return coverage_cutoffs([round(1e12 / (k + 1)) for k in range(vocab)])
    return default_cutoffs(vocab)


def model_config(
    model: str, layer: str, hidden: int, vocab: int = 0, cutoffs: str = "fractions"
) -> ModelConfig:
    """Return the [model] section of a measured model: tied but for the adaptive softmax (its
    cutoffs by `cutoffs_for`)."""
    adaptive = layer == "adaptive"
    return ModelConfig(
        **MODELS[model],
        hidden_size=hidden,
        output_layer=layer,
        tie_weights=not adaptive,
        adaptive_cutoffs=cutoffs_for(cutoffs, vocab) if adaptive else [],
    )


def autocast(precision: str):
    """Return the context the step's forward runs in (the trainer's: Accelerate's autocast)."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext
    return lambda: torch.autocast("cpu", dtype=dtype)


def proc_status() -> dict[str, int]:
    """Return VmRSS and VmHWM of this process in bytes (Linux)."""
    out = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    return out


def reset_peak() -> None:
    """Set VmHWM back to the current resident size (Linux's clear_refs, value 5)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
        refs.write("5")


def trim() -> None:
    """Give the allocator's free memory back to the system (glibc's malloc_trim), so that what
    stays resident is what lives, and a step's peak above it is its own."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def run_group(group: Group) -> list[dict]:
    """Return one row per output layer of a group: build each layer's model and the trainer's
    step, warm each up, then time one step of each in turn, --steps rounds (wall and CPU
    time), each step's peak memory taken above what was resident just before it."""
    torch.set_num_threads(group.threads)
    optim = OptimConfig()
    steps, params = {}, {}
    mixed = "no" if group.precision == "fp32" else group.precision
    fused_sgd = uses_fused_sgd(mixed, torch.device("cpu")) and not group.before
    for layer in group.layers:
        cfg = model_config(group.model, layer, group.hidden, group.vocab, group.cutoffs)
        check_fits(cfg, group.vocab, torch.device("cpu"), group.batch, group.bptt)
        torch.manual_seed(0)
        model = build_model(cfg, group.vocab)
        params[layer] = model.num_parameters()
        steps[layer] = TrainStep(
            model,
            build_optimizer(model, optim, fused=fused_sgd),
            device=torch.device("cpu"),
            batch_size=group.batch,
            bptt=group.bptt,
            optim=optim,
            graph_reason="eager",
            autocast=autocast(group.precision),
        )
    gen = torch.Generator().manual_seed(1)
    data = zipf_tokens(group.vocab, (BLOCKS, group.bptt + 1, group.batch), gen)
    for i in range(group.warmup):
        for step in steps.values():
            block = data[i % BLOCKS]
            step.run(block[:-1], block[1:], measure=False)
    wall = {layer: [] for layer in steps}
    cpu = {layer: [] for layer in steps}
    loss = {}
    for i in range(group.steps):
        block = data[(group.warmup + i) % BLOCKS]
        for layer, step in steps.items():
            w0, c0 = time.perf_counter(), time.process_time()
            loss[layer] = float(step.run(block[:-1], block[1:], measure=False))  # as a log line
            wall[layer].append(time.perf_counter() - w0)
            cpu[layer].append(time.process_time() - c0)
    trim()
    resident = proc_status()["VmRSS"]  # every layer's weights and momentum
    peak = {}
    for layer, step in steps.items():  # one more step each, untimed, from a trimmed heap
        trim()
        before = proc_status()["VmRSS"]
        reset_peak()
        step.run(block[:-1], block[1:], measure=False)
        peak[layer] = proc_status()["VmHWM"] - before
    tokens = group.batch * group.bptt
    return [
        {
            "layer": layer,
            "fused_sgd": fused_sgd,
            "huge_pages": os.environ.get(THP_ENV) == "1",  # torch read it at its start
            "params": params[layer],
            "loss": loss[layer],
            "step_seconds": wall[layer],
            "step_cpu_seconds": cpu[layer],
            "tokens_per_s": tokens / statistics.median(wall[layer]),
            "tokens_per_cpu_s": tokens / statistics.median(cpu[layer]),
            "resident_mib": resident / 2**20,
            "step_peak_mib": peak[layer] / 2**20,
        }
        for layer in steps
    ]


def measure_group(group: Group) -> list[dict]:
    """Return the rows of one group, run in a fresh process (its own memory)."""
    head = {"part": "step", **{k: v for k, v in asdict(group).items() if k != "layers"}}
    env = {**os.environ, **({THP_ENV: "0"} if group.before else {})}
    proc = subprocess.run(
        [sys.executable, __file__, "--cell", json.dumps(asdict(group))],
        capture_output=True,
        text=True,
        env=env,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        error = f"exit {proc.returncode}: {tail}"[:300]
        return [{**head, "layer": layer, "error": error} for layer in group.layers]
    return [{**head, **row} for row in json.loads(lines[-1])]


def layer_rows(vocab: int, hidden: int, args: argparse.Namespace) -> list[dict]:
    """Return the layer part's rows of one size: the three GEMMs, then each output layer's
    forward + backward (`RecurrentLM.output_loss` of a model built with it), interleaved."""
    tokens = args.batch * args.bptt
    gen = torch.Generator().manual_seed(0)
    hidden_states = torch.randn(args.bptt, args.batch, hidden, generator=gen).requires_grad_()
    targets = zipf_tokens(vocab, (args.bptt, args.batch), gen)
    dtype = PRECISIONS[args.precision] or torch.float32
    torch.manual_seed(0)
    weight = torch.randn(vocab, hidden) * 0.1
    h, w = hidden_states.detach().flatten(0, 1).to(dtype), weight.to(dtype)

    def gemms() -> None:
        logits = h @ w.t()  # (N, V)
        _ = logits @ w  # d hidden (N, H)
        _ = logits.t() @ h  # d W (V, H)

    calls = {"gemms": gemms}
    models = {}
    for layer in args.layers:
        # the recurrent layer plays no part here
        cfg = model_config("lstm", layer, hidden, vocab, args.cutoffs)
        models[layer] = model = build_model(cfg, vocab)

        def call(model=model) -> None:
            with autocast(args.precision)():
                loss = model.output_loss(hidden_states, targets)
            loss.backward()
            hidden_states.grad = None
            model.zero_grad(set_to_none=True)

        calls[layer] = call
    for call in calls.values():
        call()  # warm-up
    wall: dict[str, list[float]] = {name: [] for name in calls}
    cpu: dict[str, list[float]] = {name: [] for name in calls}
    peak = dict.fromkeys(calls, 0)
    for _ in range(args.rounds):
        for name, call in calls.items():
            before = proc_status()["VmRSS"]
            reset_peak()
            w0, c0 = time.perf_counter(), time.process_time()
            call()
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
            peak[name] = max(peak[name], proc_status()["VmHWM"] - before)
    rows = []
    for name in calls:
        row = {
            "part": "layer",
            "vocab": vocab,
            "hidden": hidden,
            "layer": name,
            "tokens": tokens,
            "precision": args.precision,
            "ms": statistics.median(wall[name]) * 1e3,
            "cpu_ms": statistics.median(cpu[name]) * 1e3,
            "round_seconds": wall[name],
            "round_cpu_seconds": cpu[name],
            "peak_mib": peak[name] / 2**20,  # above the resident memory before the call
        }
        if name in models:
            row["params"] = sum(p.numel() for p in models[name].decoder.parameters())
        rows.append(row)
    base = rows[0]["cpu_ms"]
    for row in rows:
        row["cpu_vs_gemms"] = row["cpu_ms"] / base
    return rows


def add_ratios(rows: list[dict]) -> None:
    """Give each step row its tokens/s and peak memory as ratios to the plain layer's row of the
    same size and model."""
    plain = {
        (r["vocab"], r["hidden"], r["model"], r.get("before", False)): r
        for r in rows
        if r["part"] == "step" and r["layer"] == "plain" and "tokens_per_s" in r
    }
    for r in rows:
        if r["part"] != "step" or "tokens_per_s" not in r:
            continue
        key = (r["vocab"], r["hidden"], r["model"])
        ref, old = plain.get((*key, r.get("before", False))), plain.get((*key, True))
        if ref is not None:
            r["cpu_speed_vs_plain"] = r["tokens_per_cpu_s"] / ref["tokens_per_cpu_s"]
            if ref["step_peak_mib"] > 0:
                r["peak_vs_plain"] = r["step_peak_mib"] / ref["step_peak_mib"]
        if old is not None and not r.get("before", False):
            r["cpu_speed_vs_plain_before"] = r["tokens_per_cpu_s"] / old["tokens_per_cpu_s"]


def print_layer_table(rows: list[dict]) -> None:
    print(
        f"{'V':>8}{'H':>6}{'layer':>10}{'ms':>10}{'CPU ms':>10}{'x GEMMs':>9}{'peak MiB':>10}"
        f"{'params':>10}"
    )
    for r in rows:
        params = f"{r['params'] / 1e6:.2f}M" if "params" in r else "-"
        print(
            f"{r['vocab']:>8}{r['hidden']:>6}{r['layer']:>10}{r['ms']:>10.1f}{r['cpu_ms']:>10.1f}"
            f"{r['cpu_vs_gemms']:>8.2f}x{r['peak_mib']:>10.0f}{params:>10}",
            flush=True,
        )


def print_step_table(rows: list[dict], header: bool = True) -> None:
    if header:
        print(
            f"{'V':>8}{'H':>6}{'model':>7}{'layer':>14}{'params':>9}{'tok/s':>9}{'tok/CPU s':>11}"
            f"{'x plain':>9}{'x before':>9}{'peak MiB':>10}{'x plain':>9}{'resident':>10}"
        )
    for r in rows:
        layer = r["layer"] + (" before" if r.get("before") else "")
        head = f"{r['vocab']:>8}{r['hidden']:>6}{r['model']:>7}{layer:>14}"
        if "error" in r:
            print(f"{head}  failed: {r['error']}", flush=True)
            continue
        speed = f"{r['cpu_speed_vs_plain']:.2f}x" if "cpu_speed_vs_plain" in r else "-"
        peak = f"{r['peak_vs_plain']:.2f}x" if "peak_vs_plain" in r else "-"
        old = r.get("cpu_speed_vs_plain_before")
        old = "-" if old is None else f"{old:.2f}x"
        print(
            f"{head}{r['params'] / 1e6:>8.1f}M{r['tokens_per_s']:>9.0f}"
            f"{r['tokens_per_cpu_s']:>11.0f}{speed:>9}{old:>9}{r['step_peak_mib']:>10.0f}{peak:>9}"
            f"{r['resident_mib']:>10.0f}",
            flush=True,
        )


def parse_sizes(p: argparse.ArgumentParser, text: str) -> list[tuple[int, int]]:
    """Return [(V, H), ...] of "10000x500,44000x1024"."""
    sizes = []
    for item in (t for t in text.split(",") if t):
        try:
            vocab, hidden = (int(v) for v in item.split("x"))
        except ValueError:
            p.error(f"--sizes: {item!r} is not VxH, e.g. 44000x500")
        if vocab < 2 or hidden < 1:
            p.error(f"--sizes: {item!r} needs V >= 2 and H >= 1")
        sizes.append((vocab, hidden))
    return sizes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"VxH list (default {DEFAULT_SIZES})")
    p.add_argument("--layers", default=",".join(OUTPUT_LAYERS), help="plain,fused,adaptive")
    p.add_argument("--models", default=",".join(MODELS), help="hornn,lstm (the step part)")
    p.add_argument("--parts", default="layer,step", help="layer,step")
    p.add_argument("--batch", type=int, default=20, help="streams B (default 20)")
    p.add_argument("--bptt", type=int, default=30, help="steps per window T (default 30)")
    p.add_argument("--precision", default="bf16", help="fp32 or bf16 autocast (default bf16)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--rounds", type=int, default=5, help="layer part: rounds (default 5)")
    p.add_argument("--steps", type=int, default=3, help="step part: timed steps (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="step part: untimed steps (default 1)")
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"default {DEFAULT_JSON}")
    p.add_argument(
        "--before",
        action="store_true",
        help="step part: also the plain layer's step on foreach SGD and 4 KB pages (the "
        "trainer's step without those two), in a process of its own",
    )
    p.add_argument(
        "--cutoffs",
        choices=("fractions", "coverage"),
        default="fractions",
        help="the adaptive softmax's cutoffs: 5%% and 20%% of V (default), or where the Zipf "
        "counts the words are drawn from cover 90%% and 98%% (a run's default rule)",
    )
    p.add_argument("--cell", help=argparse.SUPPRESS)  # one step group, in its own process
    args = p.parse_args(argv)
    if args.cell:
        return args
    args.sizes = parse_sizes(p, args.sizes)
    args.layers = comma_list(p, "--layers", args.layers, OUTPUT_LAYERS)
    args.models = comma_list(p, "--models", args.models, MODELS)
    args.parts = comma_list(p, "--parts", args.parts, ("layer", "step"))
    args.precision = comma_list(p, "--precision", args.precision, ("fp32", "bf16"))[0]
    for flag in ("batch", "bptt", "threads", "rounds", "steps"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if args.warmup < 1:
        p.error(f"--warmup must be >= 1 (the momentum buffers), got {args.warmup}")
    return args


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the parts over every size, print the tables, write the JSON; return the rows."""
    args = parse_args(argv)
    if args.cell:  # a child: one group of the step part, its rows as one JSON line
        fields = json.loads(args.cell)
        group = Group(**{**fields, "layers": tuple(fields["layers"])})
        print(json.dumps(run_group(group)), flush=True)
        return []
    torch.set_num_threads(args.threads)
    with open("/proc/loadavg", encoding="ascii") as loadavg:
        load = loadavg.read().split()[:3]
    meta = run_meta("output_layer.py", argv, torch.device("cpu"), args, load_at_start=load)
    print(meta_line(meta) + f"\nload average {' '.join(load)}", flush=True)
    rows: list[dict] = []
    if "layer" in args.parts:
        print("\n== the output layer alone: forward + backward of its loss, one call")
        for vocab, hidden in args.sizes:
            try:
                group = layer_rows(vocab, hidden, args)
            except Exception as exc:  # e.g. out of memory: say so, go on
                print(f"{vocab:>8}{hidden:>6}  failed: {error_line(exc)}", flush=True)
                rows.append({"part": "layer", "vocab": vocab, "hidden": hidden,
                             "error": error_line(exc)})  # fmt: skip
                continue
            print_layer_table(group)
            rows += group
            write_json(args.json, meta, rows)
    if "step" in args.parts:
        print("\n== the training step: tokens/s and peak memory above the warm state")
        print_step_table([])
        for vocab, hidden in args.sizes:
            for model in args.models:
                group = Group(vocab, hidden, model, tuple(args.layers), args.batch, args.bptt,
                              args.precision, args.steps, args.warmup, args.threads,
                              cutoffs=args.cutoffs)  # fmt: skip
                group_rows = measure_group(group)
                if args.before:
                    old = replace(group, layers=("plain",), before=True)
                    group_rows = measure_group(old) + group_rows
                rows += group_rows
                add_ratios(rows)
                print_step_table(group_rows, header=False)
                write_json(args.json, meta, rows)
    with open("/proc/loadavg", encoding="ascii") as loadavg:
        meta["load_at_end"] = loadavg.read().split()[:3]
    add_ratios(rows)
    write_json(args.json, meta, rows)
    print(f"load average at the end {' '.join(meta['load_at_end'])}\nwrote {args.json}")
    return rows


if __name__ == "__main__":
    main()
