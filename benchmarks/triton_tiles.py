"""Tile sizes of the triton engine: one HORNN layer's forward+backward per tile choice (CUDA).

CUDA only. For each config, precision and pooling it times one HornnLayer (order 3, input size
= H) forward and backward, `out, hist = layer(x, hist0); out.backward(grad)`, captured in a
CUDA graph (3 warm-up iterations on a side stream, then the capture, as in PyTorch's "whole
network capture" example) and replayed: once with engine "fused" (the baseline), then with
engine "triton" for every tile choice of the grid, set through $HORNN_TRITON_TILES (`common.forced_tiles`):

    BLOCK_B in 16, 32, 64 (only <= the batch rounded up to a power of 2, at least 16)
    BLOCK_H in 16, 32, 64 (only <= H)   BLOCK_K in 32, 64   num_warps in 2, 4
    split in 1, 4 (programs that share an output tile, each over 1/split of the K axis)

Configs: paper (B 20, H 400, T 30), big (B 128, H 1024, T 30); --batch/--hidden/--bptt
override every config. Precisions: fp32 (no autocast), bf16 (bf16 autocast, the recurrence
in fp32 with TF32 GEMMs: model.recurrence_precision = "fp32", the default), bf16-amp (bf16
autocast, the recurrence GEMMs in bf16: "autocast"; on request).

    python benchmarks/triton_tiles.py                          # the whole grid (~1-2 min)
    python benchmarks/triton_tiles.py --configs paper --poolings fofe \
        --tiles 32x16x32x4,16x16x32x4x4

ms/iter is the median over --rounds of the mean of --iters replays, timed with CUDA events;
`/fused` is ms over the fused row's ms (below 1: faster than fused); `diff` is the largest
absolute difference of the forward outputs from the fused engine's (same weights, eager). The
fastest triton row of each (config, precision, pooling) is marked `*` (JSON: "best"), the one
with the engine's default tiles (`choose_tiles`) `d` ("default"); each group ends with
a line `-> config precision pooling: fused ...; best ...; default ...`, and a last table
repeats the fused, best and default rows. A row that fails (compile error, out of
resources, capture error) keeps its error and the run goes on; the JSON (--json) is rewritten
after every row, so a run stopped early keeps what it measured. Without CUDA (or without
triton) it exits with a one-line error and code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import Tensor

from hornn_dist.models import HornnLayer
from hornn_dist.models.poolings import PAPER_POOLINGS

from common import comma_list, error_line, forced_tiles, meta_line, run_meta, write_json

ORDER = 3
WARMUP = 3  # eager iterations on the side stream before the capture


@dataclass(frozen=True)
class Size:
    """Sizes of one config: batch, hidden (= input size), steps T."""

    batch: int
    hidden: int
    bptt: int


CONFIGS: dict[str, Size] = {
    "paper": Size(batch=20, hidden=400, bptt=30),
    "big": Size(batch=128, hidden=1024, bptt=30),
}
# precision -> (autocast dtype or None, the layer's recurrence precision)
PRECISIONS: dict[str, tuple[torch.dtype | None, str]] = {
    "fp32": (None, "fp32"),
    "bf16": (torch.bfloat16, "fp32"),
    "bf16-amp": (torch.bfloat16, "autocast"),
}
GRID = tuple(
    itertools.product((16, 32, 64), (16, 32, 64), (32, 64), (2, 4), (1, 4))
)  # B, H, K, warps, split


def autocast_for(dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """Return CUDA autocast to `dtype` (cast cache off: needed under capture), or a null one."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda", dtype=dtype, cache_enabled=False)


def make_case(size: Size, pooling: str, engine: str, precision: str) -> tuple:
    """Return (layer, x, hist0, grad) on CUDA, seeded: every engine gets the same values."""
    torch.manual_seed(0)
    B, H, T = size.batch, size.hidden, size.bptt
    with torch.device("cuda"):
        layer = HornnLayer(
            H, H, order=ORDER, pooling=pooling, engine=engine, precision=PRECISIONS[precision][1]
        )
        x = torch.randn(T, B, H, requires_grad=True)
        hist0 = torch.randn(ORDER, B, H).tanh()  # detached, as the carried state of TBPTT
        grad = torch.randn(T, B, H)
    return layer, x, hist0, grad


def forward_out(layer: HornnLayer, x: Tensor, hist0: Tensor, precision: str) -> Tensor:
    """Return the layer's forward outputs (T, B, H) as float32, eagerly, without autograd."""
    with torch.no_grad(), autocast_for(PRECISIONS[precision][0]):
        out, _ = layer(x, hist0)
    return out.float()


def capture(
    layer: HornnLayer, x: Tensor, hist0: Tensor, grad: Tensor, precision: str
) -> torch.cuda.CUDAGraph:
    """Return a CUDA graph of one forward+backward, after WARMUP eager ones on a side stream."""
    dtype = PRECISIONS[precision][0]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(WARMUP):
            with autocast_for(dtype):
                out, _ = layer(x, hist0)
            out.backward(grad)
    torch.cuda.current_stream().wait_stream(stream)
    layer.zero_grad(set_to_none=False)  # static .grad tensors: backward accumulates in-graph
    x.grad.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        with autocast_for(dtype):
            out, hist = layer(x, hist0)
        out.backward(grad)
    return graph


def replay_ms(graph: torch.cuda.CUDAGraph, rounds: int, iters: int) -> tuple[float, list[float]]:
    """Return the median over rounds of the mean ms per replay, and every round's mean."""
    graph.replay()  # untimed
    times = []
    for _ in range(rounds):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return statistics.median(times), times


def measure(
    size: Size,
    pooling: str,
    engine: str,
    precision: str,
    args: argparse.Namespace,
    ref: Tensor | None = None,
) -> tuple[dict, Tensor]:
    """Return the timing fields of one row and the forward outputs (for the diff to fused)."""
    layer, x, hist0, grad = make_case(size, pooling, engine, precision)
    out = forward_out(layer, x, hist0, precision)  # also compiles the triton kernels
    graph = capture(layer, x, hist0, grad, precision)
    ms, rounds = replay_ms(graph, args.rounds, args.iters)
    row = {"ms_per_iter": ms, "round_ms": rounds}
    if ref is not None:
        row["max_abs_diff"] = (out - ref).abs().max().item()
    del graph
    return row, out


def run_group(
    config: str,
    size: Size,
    precision: str,
    pooling: str,
    args: argparse.Namespace,
    emit: Callable[[dict], None],
) -> list[dict]:
    """Return the rows of one (config, precision, pooling): fused, then triton per tile choice."""
    from hornn_dist.models import triton_tiles

    head = {"config": config, **asdict(size), "precision": precision, "pooling": pooling}
    sms = triton_tiles.multiprocessors(torch.device("cuda", torch.cuda.current_device()))
    with forced_tiles(None):  # the engine's own choice, whatever $HORNN_TRITON_TILES says
        default = triton_tiles.choose_tiles(size.batch, size.hidden, sms)
    default = tuple(default[k] for k in ("BLOCK_B", "BLOCK_H", "BLOCK_K", "num_warps", "SPLIT"))
    rows: list[dict] = []
    ref: Tensor | None = None
    fused_ms: float | None = None
    batch_tile = max(16, 1 << (size.batch - 1).bit_length())  # the batch, rounded up
    tiles_list = [t for t in args.tiles if t[0] <= batch_tile and t[1] <= size.hidden]
    for engine, tiles in [("fused", None), *[("triton", t) for t in tiles_list]]:
        row = {**head, "engine": engine, "tiles": list(tiles) if tiles else None}
        if tiles:
            row["default"] = tiles == default
        try:
            with forced_tiles(tiles):
                fields, out = measure(size, pooling, engine, precision, args, ref)
            row.update(fields)
            if engine == "fused":
                ref, fused_ms = out, fields["ms_per_iter"]
            elif fused_ms is not None:
                row["ratio_to_fused"] = row["ms_per_iter"] / fused_ms
        except Exception as exc:  # e.g. out of resources, a capture error: record, go on
            row["error"] = error_line(exc)
        rows.append(row)
        emit(row)
    timed = [r for r in rows if r["engine"] == "triton" and "ms_per_iter" in r]
    if timed:
        min(timed, key=lambda r: r["ms_per_iter"])["best"] = True
    print(f"  -> {group_summary(rows)}", flush=True)
    gc.collect()
    torch.cuda.empty_cache()
    return rows


def group_summary(rows: list[dict]) -> str:
    """Return one line naming a group, its fused time, best tiles and default tiles."""
    parts = [f"{rows[0]['config']} {rows[0]['precision']} {rows[0]['pooling']}: "]
    for label, pick in (
        ("fused", lambda r: r["engine"] == "fused"),
        ("best", lambda r: r.get("best")),
        ("default", lambda r: r.get("default")),
    ):
        row = next((r for r in rows if pick(r) and "ms_per_iter" in r), None)
        if row is None:
            parts.append(f"{label} -")
            continue
        ratio = f" ({row['ratio_to_fused']:.2f} of fused)" if "ratio_to_fused" in row else ""
        tiles = f" {tiles_text(row)}" if row["tiles"] else ""
        parts.append(f"{label}{tiles} {row['ms_per_iter']:.3f} ms{ratio}")
    return parts[0] + "; ".join(parts[1:])


def tiles_text(row: dict) -> str:
    """Return the tiles of a row as BLOCK_BxBLOCK_HxBLOCK_Kxwarpsxsplit, or '-' (fused)."""
    return "x".join(str(v) for v in row["tiles"]) if row["tiles"] else "-"


def row_line(row: dict) -> str:
    """Return one table line of a row."""
    mark = ("*" if row.get("best") else " ") + ("d" if row.get("default") else " ")
    head = (
        f"{row['config']:<7}{row['precision']:<10}{row['pooling']:<7}{row['engine']:<8}"
        f"{tiles_text(row):<13}{mark:<3}"
    )
    if "error" in row:
        return f"{head}failed: {row['error']}"
    ratio = f"{row['ratio_to_fused']:.2f}" if "ratio_to_fused" in row else "-"
    diff = f"{row['max_abs_diff']:.1e}" if "max_abs_diff" in row else "-"
    return f"{head}{row['ms_per_iter']:>9.3f}{ratio:>8}{diff:>10}"


HEADER = (
    f"{'config':<7}{'prec':<10}{'pool':<7}{'engine':<8}{'tiles':<13}{'':<3}"
    f"{'ms/iter':>9}{'/fused':>8}{'diff':>10}"
)


def parse_tiles(p: argparse.ArgumentParser, value: str) -> list[tuple[int, ...]]:
    """Return the tile choices of a comma list of BLOCK_BxBLOCK_HxBLOCK_Kxwarps[xsplit]."""
    from hornn_dist.models.triton_tiles import parse_tiles as parse_one

    try:
        return [parse_one(item, "--tiles") for item in value.split(",") if item]
    except ValueError as err:
        p.error(str(err))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Return the command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="paper,big", help=f"comma list of {', '.join(CONFIGS)}")
    p.add_argument(
        "--precisions",
        default="bf16,fp32",
        help=f"comma list of {', '.join(PRECISIONS)} (default bf16,fp32)",
    )
    p.add_argument(
        "--poolings",
        default="fofe,max",
        help=f"comma list of {', '.join(PAPER_POOLINGS)} (fofe,max)",
    )
    p.add_argument(
        "--tiles",
        default=",".join("x".join(map(str, t)) for t in GRID),
        help="comma list of BLOCK_BxBLOCK_HxBLOCK_Kxwarps[xsplit] (default: the whole grid)",
    )
    for name in ("batch", "hidden", "bptt"):
        p.add_argument(f"--{name}", type=int, help=f"{name}: overrides every config")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds; median reported (5)")
    p.add_argument("--iters", type=int, default=20, help="graph replays per round (20)")
    p.add_argument("--json", type=Path, help="write the rows here (default: none)")
    args = p.parse_args(argv)
    args.configs = comma_list(p, "--configs", args.configs, CONFIGS)
    args.precisions = comma_list(p, "--precisions", args.precisions, PRECISIONS)
    args.poolings = comma_list(p, "--poolings", args.poolings, PAPER_POOLINGS)
    args.tiles = parse_tiles(p, args.tiles)
    for flag in ("rounds", "iters", "batch", "hidden", "bptt"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            p.error(f"--{flag} must be >= 1, got {value}")
    return args


def unavailable() -> str | None:
    """Return why this benchmark cannot run here (no CUDA, no triton), or None."""
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (torch.cuda.is_available() is False)"
    from hornn_dist.models.triton_scan import unavailable_reason

    return unavailable_reason(torch.device("cuda"))


def main(argv: list[str] | None = None) -> int:
    """Time every config × precision × pooling × engine/tiles; print the table, write the JSON."""
    args = parse_args(argv)
    reason = unavailable()
    if reason is not None:
        print(f"triton_tiles.py: {reason}", file=sys.stderr)
        return 2
    from hornn_dist.models import triton_scan

    meta = run_meta(
        "triton_tiles.py",
        argv,
        torch.device("cuda"),
        args,
        triton=getattr(triton_scan.triton, "__version__", None),
        order=ORDER,
    )
    print(meta_line(meta), flush=True)
    print(HEADER, flush=True)
    rows: list[dict] = []

    def emit(row: dict) -> None:
        """Print a finished row and rewrite the JSON with every row so far."""
        print(row_line(row), flush=True)
        rows.append(row)
        if args.json is not None:
            write_json(args.json, meta, rows)

    groups: list[list[dict]] = []
    for config in args.configs:
        overrides = {k: getattr(args, k) for k in ("batch", "hidden", "bptt")}
        size = replace(CONFIGS[config], **{k: v for k, v in overrides.items() if v})
        for precision in args.precisions:
            for pooling in args.poolings:
                groups.append(run_group(config, size, precision, pooling, args, emit))
                if args.json is not None:
                    write_json(args.json, meta, rows)  # with the group's best mark
    print("\n== fused, best and default tiles of each (config, precision, pooling)")
    print(HEADER)
    for group in groups:
        for row in group:
            if row["engine"] == "fused" or row.get("best") or row.get("default"):
                print(row_line(row))
    if args.json is not None:
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
