"""The Triton engine's tile sizes: chosen per step shape, or forced by $HORNN_TRITON_TILES.

A choice is (BLOCK_B, BLOCK_H, BLOCK_K, warps, K split) for the kernels of `triton_scan.py`;
`benchmarks/triton_tiles.py` measures them. Nothing here needs the triton package, so a
malformed variable is one config error line even where triton is missing.
"""

from __future__ import annotations

import functools
import os

import torch

TILES_ENV = "HORNN_TRITON_TILES"


def parse_tiles(text: str, source: str = TILES_ENV) -> tuple[int, ...]:
    """Return (BLOCK_B, BLOCK_H, BLOCK_K, warps, split) of "BxHxKxW[xS]", e.g. "32x16x32x4x4";
    a one-line ValueError naming `source` if it is not that."""
    try:
        values = tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        values = ()
    powers = all(v >= 1 and v & (v - 1) == 0 for v in values[:4])
    if (
        len(values) not in (4, 5)
        or not powers
        or values[0] < 16
        or values[1] < 16
        or (values[2] < 16 or values[-1] < 1)
    ):
        raise ValueError(
            f"{source}={text!r}: expected BLOCK_BxBLOCK_HxBLOCK_Kxwarps[xsplit] with powers of "
            "2, blocks >= 16 and split >= 1, e.g. 32x16x32x4x4 (benchmarks/triton_tiles.py "
            "measures them)"
        )
    return values if len(values) == 5 else (*values, 1)


def tiles_error() -> str | None:
    """Return the one-line error of a malformed $HORNN_TRITON_TILES, or None."""
    try:
        _forced_tiles()
    except ValueError as err:
        return str(err)
    return None


def _forced_tiles() -> tuple[int, ...] | None:
    """Return the tiles of $HORNN_TRITON_TILES, else None (the engine chooses)."""
    text = os.environ.get(TILES_ENV, "")
    return parse_tiles(text) if text else None


def choose_tiles(batch: int, hidden: int, sms: int = 132) -> dict[str, int]:
    """Return the tile sizes, warps and K split for a step of B x H outputs on `sms`
    multiprocessors ($HORNN_TRITON_TILES wins).

    From the tile sweep on one H100 (bf16, fofe and gated): 16 or 32 batch
    rows, 16 hidden columns up to H 512 (32 above), BLOCK_K 32, 4 warps, and K split over 2-8
    programs per tile, as many as keep about 4 programs per multiprocessor and 3+ BLOCK_K chunks
    per program: B 20 x H 400 gets 32x16x32x4x4, B 128 x H 1024 32x32x32x4x4, the fastest or
    near it at each size (measured: docs/performance.md, "Numbers behind the code's
    choices"; the fused engine stays the faster at the larger size)."""
    forced = _forced_tiles()
    if forced is not None:
        block_b, block_h, block_k, warps, split = forced
    else:
        block_b = 16 if batch <= 16 else 32
        block_h, block_k, warps = (16 if hidden <= 512 else 32), 32, 4
        tiles = _cdiv(batch, block_b) * _cdiv(hidden, block_h)
        chunks = _cdiv(hidden, block_k)
        split = 1
        while split < 8 and tiles * split * 2 <= 4 * sms and split * 2 * 3 <= chunks:
            split *= 2
    return {
        "BLOCK_B": block_b,
        "BLOCK_H": block_h,
        "BLOCK_K": block_k,
        "SPLIT": split,
        "num_warps": warps,
    }


@functools.cache
def multiprocessors(device: torch.device) -> int:
    """Return the device's streaming multiprocessors (the interpreter: an H100's 132)."""
    if device.type != "cuda":
        return 132
    return torch.cuda.get_device_properties(device).multi_processor_count


def _cdiv(a: int, b: int) -> int:
    """Return a / b rounded up."""
    return -(-a // b)
