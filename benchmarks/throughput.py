"""Training throughput (steps/s, tokens/s of a full step) of HORNN poolings vs torch.nn RNN/LSTM.

One step = embedding -> recurrence -> softmax cross-entropy -> backward -> clip -> SGD, with
the state carried (detached) from step to step as in truncated BPTT. Default: the paper's
PTB setting, V = 10k, H = E = 400, B = 20, T = 30, one layer, order 3.

    python benchmarks/throughput.py                      # CPU, all default variants
    python benchmarks/throughput.py --device cuda --steps 200 --warmup 20
    python benchmarks/throughput.py --variants hornn-fofe,hornn-fofe-loop,lstm

A variant is a name, a ModelConfig and a precision; add one to VARIANTS (or a new precision to
PRECISIONS) and it shows up in the table and the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from hornn_dist.models import ModelConfig, build_model

DEFAULT_JSON = Path(__file__).parent / "results" / "throughput.json"


@dataclass(frozen=True)
class Variant:
    """One row of the table: a model configuration run at one precision."""

    name: str
    model: ModelConfig
    precision: str = "fp32"


def _hornn(pooling: str, engine: str = "fused") -> ModelConfig:
    return ModelConfig(arch="hornn", pooling=pooling, order=3, engine=engine)


VARIANTS: dict[str, ModelConfig] = {
    "hornn-sum": _hornn("sum"),
    "hornn-max": _hornn("max"),
    "hornn-fofe": _hornn("fofe"),
    "hornn-gated": _hornn("gated"),
    "rnn": ModelConfig(arch="rnn"),
    "lstm": ModelConfig(arch="lstm"),
    "gru": ModelConfig(arch="gru"),
    "hornn-fofe-loop": _hornn("fofe", engine="loop"),
}
DEFAULT_VARIANTS = "hornn-sum,hornn-max,hornn-fofe,hornn-gated,rnn,lstm"
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # autocast dtype


def autocast_for(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Return the autocast context for a precision (a null context for fp32)."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def sync(device: torch.device) -> None:
    """Wait for queued GPU work so wall-clock timings are honest."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Runner:
    """A built model, optimizer, data and carried state for one variant; `run(k)` times k steps."""

    def __init__(self, variant: Variant, args: argparse.Namespace, device: torch.device) -> None:
        self.variant, self.args, self.device = variant, args, device
        self.cfg = replace(
            variant.model,
            hidden_size=args.hidden,
            embedding_size=args.embedding,
            num_layers=args.layers,
            order=args.order,
        )
        torch.manual_seed(0)
        self.model = build_model(self.cfg, args.vocab).to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.5)
        self.data = torch.randint(0, args.vocab, (64, args.bptt + 1, args.batch), device=device)
        self.state = self.model.init_state(args.batch, device)
        self.i = 0

    def step(self) -> None:
        """One full training step on the next (T+1, B) block of tokens."""
        tokens = self.data[self.i % len(self.data)]  # (T+1, B)
        self.i += 1
        vocab = self.args.vocab
        with autocast_for(self.variant.precision, self.device):
            state = self.model.detach_state(self.state)
            logits, self.state = self.model(tokens[:-1], state)  # (T, B, V)
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, vocab).float(), tokens[1:].reshape(-1)
            )
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 5.0)
        self.opt.step()

    def run(self, steps: int) -> float:
        """Return the wall-clock seconds of `steps` steps (GPU work included)."""
        sync(self.device)
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        sync(self.device)
        return time.perf_counter() - start


def measure(variants: list[Variant], args: argparse.Namespace, device: torch.device) -> list[dict]:
    """Return one result row per variant: the median over `args.rounds` interleaved rounds.

    Rounds interleave the variants so that a burst of other load on a shared machine hits
    one round of every variant rather than all rounds of one.
    """
    runners: dict[str, Runner] = {}
    rows: dict[str, dict] = {}
    for v in variants:
        key = f"{v.name}/{v.precision}"
        try:
            runners[key] = Runner(v, args, device)
            runners[key].run(args.warmup)
        except RuntimeError as exc:  # e.g. bf16 LSTM on CPU: report it, keep going
            runners.pop(key, None)
            rows[key] = {
                "name": v.name,
                "precision": v.precision,
                "error": str(exc).splitlines()[0],
            }
    times: dict[str, list[float]] = {key: [] for key in runners}
    for _ in range(args.rounds):
        for key, runner in runners.items():
            times[key].append(runner.run(args.steps))
    tokens = args.steps * args.bptt * args.batch
    for key, runner in runners.items():
        cfg = runner.cfg
        med = statistics.median(times[key])
        rows[key] = {
            "name": runner.variant.name,
            "arch": cfg.arch,
            "pooling": cfg.pooling if cfg.arch == "hornn" else None,
            "engine": cfg.engine if cfg.arch == "hornn" else "torch.nn",
            "precision": runner.variant.precision,
            "params": runner.model.num_parameters(),
            "round_seconds": times[key],
            "steps_per_s": args.steps / med,
            "tokens_per_s": tokens / med,
        }
    return [rows[f"{v.name}/{v.precision}"] for v in variants]


def print_table(rows: list[dict]) -> None:
    """Print tokens/s and the ratio to LSTM (same precision) for each row."""
    lstm = {
        r["precision"]: r["tokens_per_s"] for r in rows if r["arch"] == "lstm" and "error" not in r
    }
    print(f"{'variant':<18}{'prec':<6}{'params':>10}{'steps/s':>10}{'tokens/s':>11}{'vs LSTM':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['name']:<18}{r['precision']:<6}  failed: {r['error']}")
            continue
        base = lstm.get(r["precision"])
        r["ratio_to_lstm"] = r["tokens_per_s"] / base if base else None
        ratio = f"{r['ratio_to_lstm']:.2f}x" if base else "-"
        print(
            f"{r['name']:<18}{r['precision']:<6}{r['params'] / 1e6:>9.2f}M"
            f"{r['steps_per_s']:>10.2f}{r['tokens_per_s']:>11.0f}{ratio:>9}"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Return the command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument(
        "--variants", default=DEFAULT_VARIANTS, help=f"comma list of {', '.join(VARIANTS)}"
    )
    p.add_argument("--precision", default="fp32", help="comma list of fp32, bf16, fp16 (autocast)")
    p.add_argument("--vocab", type=int, default=10_000)
    p.add_argument("--hidden", type=int, default=400)
    p.add_argument("--embedding", type=int, default=0, help="0 = hidden")
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--order", type=int, default=3)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--bptt", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per variant")
    p.add_argument("--steps", type=int, default=6, help="timed steps per variant and round")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; median reported")
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"default {DEFAULT_JSON}")
    args = p.parse_args(argv)
    for name in args.variants.split(","):
        if name not in VARIANTS:
            p.error(f"--variants: unknown {name!r}; choose from {', '.join(VARIANTS)}")
    for prec in args.precision.split(","):
        if prec not in PRECISIONS:
            p.error(f"--precision: unknown {prec!r}; choose from {', '.join(PRECISIONS)}")
    return args


def main(argv: list[str] | None = None) -> list[dict]:
    """Run every variant at every precision, print the table, write the JSON; return the rows."""
    args = parse_args(argv)
    device = torch.device(args.device)
    variants = [
        Variant(name, VARIANTS[name], prec)
        for prec in args.precision.split(",")
        for name in args.variants.split(",")
    ]
    print(
        f"device={device} torch={torch.__version__} threads={torch.get_num_threads()} "
        f"V={args.vocab} H={args.hidden} L={args.layers} N={args.order} B={args.batch} "
        f"T={args.bptt} warmup={args.warmup} steps={args.steps} rounds={args.rounds}"
    )
    rows = measure(variants, args, device)
    print_table(rows)
    meta = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    meta.update(
        torch=torch.__version__,
        device_name=torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or platform.machine(),
        threads=torch.get_num_threads(),
        variants={v.name: asdict(v.model) for v in variants},
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"config": meta, "results": rows}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return rows


if __name__ == "__main__":
    main()
