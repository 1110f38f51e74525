"""The fused engine's forward step GEMM h_t @ W on CPU through oneDNN instead of BLAS.

A HORNN step multiplies a small batch (B rows, 20 at the paper's size) by the same weight
W (H, K·H) every step. `torch.mm` sends it to BLAS (MKL), which at these sizes runs well below
its large-GEMM rate. oneDNN's linear (`torch.ops.mkldnn._linear_pointwise`, the op inductor's
CPU path emits), given the linear's (out, in) weight as the transposed view of the contiguous
W, does the same product faster once it is large enough to repay oneDNN's larger cost per
call (`onednn_pays`), with no set-up cost; at the demo's H 128 it is slower, and mm runs.
oneDNN is also where `torch.nn.LSTM`, the CPU baseline, gets its speed (it runs oneDNN's RNN).
Measured: docs/performance.md, "The CPU step" and "Numbers behind the code's choices".

Only the forward uses it: backward's dU_t @ W^T takes oneDNN's fast form only from a
transposed copy of W, and that copy cost what the faster steps saved (docs/performance.md, "The CPU step").

Only a contiguous float32 W on CPU, in a product that large, takes this path; float64 (the
tests' reference precision), bf16/fp16, CUDA, a graph that torch.compile traces (inductor's
lowering of the op expects a packed weight), oneDNN turned off
(`torch.backends.mkldnn.flags(enabled=False)`) and a torch build without oneDNN use
`torch.mm`, as does any CPU but x86-64 (not measured elsewhere). Both are float32 GEMMs;
they differ only in the order of their rounding. The op is private to torch: it is looked up
by name and tried on a small product once (`onednn_linear_works`); if it is missing, fails
or multiplies wrongly, mm runs.
"""

from __future__ import annotations

import functools
import platform

import torch
from torch import Tensor

# oneDNN's linear costs more per call than BLAS, which pays off from here: from H 256 at every
# batch measured, and for smaller H from 4M multiply-adds a step (measured: docs/performance.md,
# "The CPU step" and "Numbers behind the code's choices").
ONEDNN_MIN_HIDDEN = 256
ONEDNN_MIN_MACS = 4_000_000


ONEDNN_LINEAR = ("mkldnn", "_linear_pointwise")  # torch.ops namespace and name: private


@functools.cache
def onednn_linear_works() -> bool:
    """Return True on an x86-64 CPU whose torch build has oneDNN's linear, multiplying correctly.

    Measured on x86-64 only: elsewhere (e.g. arm64, where torch's mm may use Apple's or Arm's
    own BLAS) mm keeps the step. Anything the private op does wrong here (missing, another
    signature, an error, a wrong product) also keeps mm."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    if not torch.backends.mkldnn.is_available():
        return False
    x = torch.arange(6.0).view(2, 3)
    w = torch.arange(12.0).view(3, 4)
    try:
        return bool(torch.equal(onednn_mm(x, w), x @ w))
    except Exception:  # a private op: whatever it raises, mm runs instead
        return False


def onednn_mm(x: Tensor, w: Tensor) -> Tensor:
    """Return x @ w by oneDNN's linear, whose (out, in) weight is the transposed view of w.

    Fast when w (K, N) is contiguous (no copy); always float32 CPU tensors. Call only where
    `onednn_linear_works()`."""
    namespace, name = ONEDNN_LINEAR
    linear = getattr(getattr(torch.ops, namespace), name)
    return linear(x, w.t(), None, "none", [], "")


def onednn_pays(rows: int, w: Tensor) -> bool:
    """Return True if x (rows, K) @ w (K, N) is large enough for oneDNN to beat BLAS."""
    return w.shape[0] >= ONEDNN_MIN_HIDDEN or rows * w.numel() >= ONEDNN_MIN_MACS


class StepGemm:
    """x @ w for many x of `rows` rows and one w (K, N): oneDNN where it is faster, else mm."""

    def __init__(self, w: Tensor, rows: int) -> None:
        self.w = w
        self.onednn = (
            w.device.type == "cpu"
            and w.dtype == torch.float32
            and onednn_pays(rows, w)
            and w.is_contiguous()
            and torch.backends.mkldnn.enabled  # a user's torch.backends.mkldnn.flags(enabled=False)
            and not torch.compiler.is_compiling()  # inductor lowers this op for packed weights only
            and onednn_linear_works()
        )

    def __call__(self, x: Tensor) -> Tensor:
        """Return x @ w as a new tensor."""
        return onednn_mm(x, self.w) if self.onednn else x @ self.w

    def add_to(self, out: Tensor, x: Tensor) -> None:
        """out += x @ w, in place (out may be a strided view)."""
        if self.onednn:
            out.add_(self(x))
        else:
            out.addmm_(x, self.w)

    def write_to(self, out: Tensor, x: Tensor) -> None:
        """out = x @ w, in place (out may be a strided view)."""
        if self.onednn:
            out.copy_(self(x))
        else:
            torch.mm(x, self.w, out=out)
