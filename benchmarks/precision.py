"""Rounding error of a HORNN layer under mixed precision, against a float64 reference.

    python benchmarks/precision.py                  # CPU: bf16 autocast, fused engine
    python benchmarks/precision.py --device cuda    # bf16 and fp16; fused and triton engines

For each pooling and seed, one layer at the paper's sizes (E = H 400, B 20, T 30, order 3)
runs forward and backward (loss: sum of squared outputs plus the new history's sum) in
float64 on the CPU with the fused engine (the reference, itself checked against the plain
eq. 3-7 loop in tests/test_models_hornn.py), then on --device under autocast, once per
`model.recurrence_precision` (fp32: the recurrence in fp32, TF32 GEMMs on CUDA; autocast: the
layer in autocast's dtype; fp16, the default: in fp16 on CUDA, as autocast's dtype on a CPU)
and engine, and the torch.nn.LSTM peer the same way. Each row reports the largest relative error
‖a - ref‖ / ‖ref‖ over the seeds, of the outputs and of the worst parameter gradient; the
speed issue asks for <= 1e-2. Max pooling sends each gradient to one winning path, so a
winner flipped by rounding moves a few per cent of a gradient whatever the precision
(tests/test_models_hornn.py). Rows then go to JSON (--json, default
benchmarks/results/precision.json).
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import hornn_dist  # noqa: F401  before torch: the trainer's CPU allocator option (its __init__)

# isort: split
import torch
from torch import Tensor, nn

from hornn_dist.models import HornnLayer
from hornn_dist.models.config import RECURRENCE_PRECISIONS
from hornn_dist.models.poolings import PAPER_POOLINGS
from hornn_dist.models.precision import AUTOCAST_DTYPES

from common import comma_list, error_line, run_meta, write_json

DTYPES = AUTOCAST_DTYPES  # --dtypes: the autocast dtypes of train.mixed_precision


def rel_err(a: Tensor, ref: Tensor) -> float:
    """Return ‖a - ref‖ / ‖ref‖ in float64."""
    ref = ref.double().cpu()
    return ((a.double().cpu() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def run_once(module: nn.Module, x: Tensor, autocast: torch.dtype | None) -> list[Tensor]:
    """Return [outputs, last state, *parameter gradients] of one forward + backward of a
    HornnLayer (state: the new history) or an nn.LSTM (state: h_T)."""
    module.zero_grad(set_to_none=True)
    device = x.device.type
    with torch.autocast(device, dtype=autocast or torch.float32, enabled=autocast is not None):
        out, state = module(x)
    last = state[0] if isinstance(state, tuple) else state  # LSTM: (h, c)
    (out.float().pow(2).sum() + last.float().sum()).backward()
    return [out.detach(), last.detach(), *(p.grad for p in module.parameters())]


def measure(args: argparse.Namespace, pooling: str, dtype: str, engine: str, precision: str):
    """Return the largest output and gradient errors of one row over the seeds (pooling
    "lstm": the torch.nn.LSTM peer, cuDNN's on CUDA, at its own default init)."""
    out_err = grad_err = 0.0
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        x = torch.randn(args.bptt, args.batch, args.hidden, dtype=torch.float64)
        if pooling == "lstm":
            layer = nn.LSTM(args.hidden, args.hidden)
            ref = run_once(copy.deepcopy(layer).double(), x, None)
        else:
            kwargs = {"order": args.order, "pooling": pooling, "init_std": args.init_std}
            ref_layer = HornnLayer(args.hidden, args.hidden, engine="fused", **kwargs).double()
            ref = run_once(ref_layer, x, None)
            layer = HornnLayer(
                args.hidden, args.hidden, engine=engine, precision=precision, **kwargs
            )
            layer.load_state_dict(ref_layer.state_dict())
        got = run_once(layer.to(args.device), x.float().to(args.device), DTYPES[dtype])
        out_err = max(out_err, rel_err(got[0], ref[0]))
        grad_err = max(grad_err, *(rel_err(g, r) for g, r in zip(got[2:], ref[2:], strict=True)))
    return out_err, grad_err


def main(argv: list[str] | None = None) -> list[dict]:
    """Measure every pooling × dtype × engine × recurrence precision; print and write JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--poolings", default=",".join(PAPER_POOLINGS), help="comma list")
    p.add_argument("--dtypes", default=None, help="comma list of bf16, fp16 (CPU: bf16)")
    p.add_argument("--engines", default=None, help="comma list (CPU: fused; CUDA: fused,triton)")
    p.add_argument("--hidden", type=int, default=400)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--bptt", type=int, default=30)
    p.add_argument("--order", type=int, default=3)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--init-std", type=float, default=0.04, help="weights ~ N(0, this)")
    p.add_argument("--no-lstm", action="store_true", help="skip the torch.nn.LSTM peer rows")
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/precision.json"))
    args = p.parse_args(argv)
    for flag in ("hidden", "batch", "bptt", "order", "seeds"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if not args.init_std > 0:
        p.error(f"--init-std must be > 0, got {args.init_std}")
    if args.device not in ("cpu", "cuda") or (
        args.device == "cuda" and not torch.cuda.is_available()
    ):
        p.error(f"--device {args.device!r}: choose cpu, or cuda on a machine with a CUDA GPU")
    on_cuda = args.device == "cuda"
    poolings = comma_list(p, "--poolings", args.poolings, PAPER_POOLINGS)
    dtypes = comma_list(p, "--dtypes", args.dtypes or ("bf16,fp16" if on_cuda else "bf16"), DTYPES)
    engines = comma_list(
        p,
        "--engines",
        args.engines or ("fused,triton" if on_cuda else "fused"),
        ("fused", "triton"),
    )
    print(
        f"{'pooling':8s} {'dtype':5s} {'engine':7s} {'recurrence':10s} {'output':>9s} {'grad':>9s}"
    )
    rows = []
    cases = [
        (pooling, dtype, engine, precision)
        for pooling in poolings
        for dtype in dtypes
        for engine in engines
        for precision in RECURRENCE_PRECISIONS
    ]
    if not args.no_lstm:
        cases += [("lstm", dtype, "torch.nn", "-") for dtype in dtypes]
    for pooling, dtype, engine, precision in cases:
        row = {"pooling": pooling, "dtype": dtype, "engine": engine}
        row["recurrence_precision"] = precision
        try:
            row["output_err"], row["grad_err"] = measure(args, pooling, dtype, engine, precision)
            errs = f"{row['output_err']:9.1e} {row['grad_err']:9.1e}"
        except Exception as exc:  # a row that cannot run keeps its reason
            row["error"] = errs = error_line(exc)
        rows.append(row)
        print(f"{pooling:8s} {dtype:5s} {engine:7s} {precision:10s} {errs}")
    meta = run_meta("precision.py", argv, torch.device(args.device), args)
    write_json(args.json, meta, rows)
    print(f"wrote {args.json}")
    return rows


if __name__ == "__main__":
    main()
