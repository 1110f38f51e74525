"""Compile the triton engine's kernels for a CUDA target without a GPU (run as a script).

    python tests/triton_aot.py 90 sum,max,fofe,gated [20x400 [SPLIT]]

Arguments: compute capability, poolings, batch x hidden (default 20x400), which pick the
engine's default tiles and warps, and the K split (default: the engine's choice).

Triton's interpreter (what the CPU tests run) does not check what only the compiler checks:
types, layouts, tl.dot's shapes and dtypes. This compiles the forward and both backward kernels
(step and history) of each pooling, fp32 (TF32) and bf16 weights, down to a cubin for the given
compute capability, and prints one line per kernel. TRITON_INTERPRET must be unset.
"""

from __future__ import annotations

import os
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from hornn_dist.models import triton_scan as ts

POINTERS_FWD = (
    "state_ptr",
    "w_ptr",
    "xin_ptr",
    "win_ptr",
    "gate_ptr",
    "path_ptr",
    "part_ptr",
    "coef_ptr",
)
POINTERS_BWD = (
    "ops_ptr",
    "gops_ptr",
    "dz_ptr",
    "win_ptr",
    "gate_ptr",
    "path_ptr",
    "state_ptr",
    "w_ptr",
    "grad_ptr",
    "part_ptr",
    "coef_ptr",
)


def signature(fn, pointers: tuple[str, ...], weight: str, constants: dict) -> dict[str, str]:
    """Return the argument types of `fn`: fp32 buffers, uint8 winners, int32 arrivals and
    scalars."""
    sig = {}
    for name in fn.arg_names:
        if name in constants:
            sig[name] = "constexpr"
        elif name == "w_ptr":
            sig[name] = f"*{weight}"
        elif name == "win_ptr":
            sig[name] = "*u8"
        elif name == "count_ptr":
            sig[name] = "*i32"
        elif name in pointers:
            sig[name] = "*fp32"
        else:
            sig[name] = "i32"
    return sig


def main() -> int:
    """Compile every kernel variant named on the command line; return 0 if all compile."""
    assert os.environ.get("TRITON_INTERPRET", "0") != "1", "unset TRITON_INTERPRET"
    capability = int(sys.argv[1])
    poolings = sys.argv[2].split(",")
    batch, hidden = (int(v) for v in (sys.argv[3] if len(sys.argv) > 3 else "20x400").split("x"))
    split = int(sys.argv[4]) if len(sys.argv) > 4 else None
    target = GPUTarget("cuda", capability, 32)
    cpu = torch.device("cpu")  # no GPU here: the engine's tiles for an H100's 132 SMs
    for pooling in poolings:
        for weight, precision in (("fp32", "tf32"), ("bf16", "tf32")):
            meta = ts._meta(
                pooling, "tanh", 3, torch.float32, torch.float32, True, batch, hidden, cpu
            )
            warps = meta.pop("num_warps")
            meta["PRECISION"] = precision
            if split is not None:
                meta["SPLIT"] = split
            for fn, pointers, extra in (
                (ts._forward_step, POINTERS_FWD, {}),
                (ts._backward_step, POINTERS_BWD, {"HISTORY": False}),
                (ts._backward_step, POINTERS_BWD, {"HISTORY": True}),
            ):
                constants = {**meta, **extra}
                src = ASTSource(fn, signature(fn, pointers, weight, constants), constants)
                kernel = triton.compile(src, target=target, options={"num_warps": warps})
                assert kernel.asm.get("cubin"), "no cubin"
                tiles = f"{meta['BLOCK_B']}x{meta['BLOCK_H']}x{meta['BLOCK_K']}x{warps}"
                tiles += f" split {meta['SPLIT']}"
                print(f"ok sm_{capability} {pooling} {weight} {fn.__name__} {extra} {tiles}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
