"""CPU: the fused engine's step GEMM through oneDNN (`hornn_dist/models/step_gemm.py`) vs BLAS.

    python benchmarks/step_gemm.py                      # paper sizes: B 20, H 400, T 30, N 3
    python benchmarks/step_gemm.py --poolings gated --rounds 15

Two tables, each from interleaved rounds (a burst of other load hits one round of every row;
the median round is reported):

* product: one step's (B, H) @ (H, K·H) (forward) and (B, K·H) @ (K·H, H) (backward) with
  torch.mm, and with oneDNN's linear given its weight as the transposed view of a contiguous
  matrix (the form the engine uses forward; backward would need a transposed copy of W first);
* layer: one HORNN layer's forward + backward (x @ W_ih, the fused recurrence, a sum loss)
  as the engine runs it (oneDNN steps where `onednn_pays`, as the row says), and with oneDNN
  off (`torch.backends.mkldnn.flags(enabled=False)`: mm steps).

Then the rows as JSON (`--json`, default benchmarks/results/step_gemm.json).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from hornn_dist.models.poolings import PAPER_POOLINGS
from hornn_dist.models.recurrence import fused_scan
from hornn_dist.models.step_gemm import onednn_linear_works, onednn_mm, onednn_pays

from common import comma_list, run_meta, write_json

# torch.backends.mkldnn.flags() also sets oneDNN's TF32 switch, and says that only Intel GPUs
# have it: noise for a CPU A/B
warnings.filterwarnings("ignore", message="TF32 acceleration on top of oneDNN")


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """Return the fastest of `repeats` calls of fn, in milliseconds (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def product_cases(batch: int, hidden: int, order: int, pooling: str) -> dict[str, Callable]:
    """Return the step products of one pooling, by name."""
    blocks = 2 * order if pooling == "gated" else order
    w = torch.randn(hidden, blocks * hidden)  # the engine's internal W, contiguous
    w_t = w.t().contiguous()  # what backward's fast form would need: a copy of W^T
    h = torch.randn(batch, hidden)
    du = torch.randn(batch, blocks * hidden)
    return {
        f"{pooling} forward mm": lambda: torch.mm(h, w),
        f"{pooling} forward oneDNN": lambda: onednn_mm(h, w),
        f"{pooling} backward mm": lambda: torch.mm(du, w.t()),
        f"{pooling} backward oneDNN (given W^T)": lambda: onednn_mm(du, w_t),
        f"{pooling} backward: the copy of W^T": lambda: w.t().contiguous(),
    }


def layer_cases(batch: int, hidden: int, order: int, bptt: int, pooling: str) -> dict:
    """Return one layer's forward + backward with the oneDNN step on and off, by name."""
    blocks = 2 * order if pooling == "gated" else order
    x = torch.randn(bptt, batch, hidden)
    w_ih = torch.randn(hidden, (order + 1 if pooling == "gated" else 1) * hidden) * 0.05
    w_ih.requires_grad_()
    w_hh = (torch.randn(hidden, blocks * hidden) * 0.05).requires_grad_()
    history = torch.zeros(order, batch, hidden)

    def step() -> None:
        out = fused_scan(x @ w_ih, history, w_hh, pooling, 0.6, "sigmoid")
        out.sum().backward()

    def without_onednn() -> None:
        with torch.backends.mkldnn.flags(enabled=False):
            step()

    engine = "oneDNN" if onednn_pays(batch, w_hh) else "mm: too small for oneDNN"
    return {f"{pooling} layer, engine ({engine})": step, f"{pooling} layer, mm": without_onednn}


def measure(cases: dict[str, Callable], rounds: int, repeats: int) -> dict[str, float]:
    """Return each case's median over `rounds` interleaved rounds of its best-of-`repeats` ms."""
    runs: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            runs[name].append(best_of(fn, repeats))
    return {name: statistics.median(values) for name, values in runs.items()}


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the two tables; print them and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--poolings", default=",".join(PAPER_POOLINGS), help="comma list")
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--hidden", type=int, default=400)
    p.add_argument("--order", type=int, default=3)
    p.add_argument("--bptt", type=int, default=30)
    p.add_argument("--rounds", type=int, default=9, help="interleaved rounds (median reported)")
    p.add_argument("--repeats", type=int, default=5, help="calls per round (best reported)")
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/step_gemm.json"))
    args = p.parse_args(argv)
    for flag in ("rounds", "repeats", "batch", "hidden", "order", "bptt"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if not onednn_linear_works():
        p.error("this torch build has no working oneDNN linear: nothing to compare")
    torch.manual_seed(0)
    poolings = comma_list(p, "--poolings", args.poolings, PAPER_POOLINGS)
    rows = []
    for table, make in (
        ("product", lambda pool: product_cases(args.batch, args.hidden, args.order, pool)),
        ("layer", lambda pool: layer_cases(args.batch, args.hidden, args.order, args.bptt, pool)),
    ):
        print(f"== {table}: B {args.batch}, H {args.hidden}, N {args.order}, T {args.bptt}")
        for pooling in poolings:
            for name, ms in measure(make(pooling), args.rounds, args.repeats).items():
                rows.append({"table": table, "case": name, "ms": ms})
                print(
                    f"{name:42s} {ms * 1e3:10.1f} µs"
                    if table == "product"
                    else f"{name:42s} {ms:10.2f} ms"
                )
    meta = run_meta("step_gemm.py", argv, torch.device("cpu"), args)
    write_json(args.json, meta, rows)
    print(f"wrote {args.json}")
    return rows


if __name__ == "__main__":
    main()
