"""The precision rule: which dtype a HORNN layer's recurrence runs in, in one place.

`layer_dtype` decides from model.recurrence_precision and the autocast in force; the engines
call it at run time with the live autocast state (`low_precision_dtype`), `LayerPlan.describe`
with the run's mixed precision. This module imports no other model module, so every one of
them can import it.
"""

from __future__ import annotations

import torch
from torch import Tensor

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}  # train.mixed_precision
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}  # the log's words for them


def layer_dtype(
    precision: str, device_type: str, autocast_dtype: torch.dtype | None
) -> torch.dtype | None:
    """Return the dtype a float32 HORNN layer runs its recurrence in, or None for float32.

    precision is model.recurrence_precision, autocast_dtype the autocast in force on
    `device_type` (None: none). "fp32" and no autocast: float32; "autocast": autocast's dtype;
    "fp16": float16 under CUDA autocast whatever its dtype (as cuDNN runs its RNNs), on other
    devices autocast's dtype (no native fp16 on CPUs: much slower there; measured:
    docs/performance.md, "Why the layers run in fp16 under autocast").
    """
    if precision == "fp32" or autocast_dtype is None:
        return None
    if precision == "fp16" and device_type == "cuda":
        return torch.float16
    return autocast_dtype


def recurrence_dtype(*tensors: Tensor) -> torch.dtype:
    """Return the dtype the recurrence runs in: float64 if any input is float64, else float32."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def low_precision_dtype(precision: str, dtype: torch.dtype, device: str) -> torch.dtype | None:
    """Return the dtype the recurrence runs in under the autocast now in force on `device`
    (float32 inputs only; `layer_dtype`'s rule); None when it runs in `dtype`."""
    if dtype != torch.float32 or not torch.is_autocast_enabled(device):
        return None
    return layer_dtype(precision, device, torch.get_autocast_dtype(device))
