"""The precision rule: which dtype a HORNN layer's recurrence runs in, in one place.

`layer_dtype` decides from model.recurrence_precision and the autocast in force; the engines
call it at run time with the live autocast state (`low_precision_dtype`), `LayerPlan.describe`
with the run's mixed precision. This module imports no other model module, so every one of
them can import it.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    "fp16": float16 under CUDA autocast whatever its dtype (as cuDNN runs its RNNs); on other
    devices autocast's dtype (no native fp16 on CPUs; bf16 there measured 1.16x faster than an
    fp32 recurrence with the same validation: docs/performance.md, "bf16 on a CPU").
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


# what Linux's /proc/cpuinfo names for bf16 matrix products in hardware (AVX-512 BF16, AMX)
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# the architectures whose whole CPU training step measured faster under bf16 autocast than in
# fp32 on a CPU with those flags, at the paper size (docs/performance.md, "bf16 on a CPU")
CPU_BF16_FASTER = frozenset({"hornn", "rnn", "lstm", "gru"})


def cpu_bf16_flags(cpuinfo: str | None = None) -> tuple[str, ...]:
    """Return the bf16 instruction flags this CPU reports (Linux's /proc/cpuinfo; none elsewhere)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
                cpuinfo = handle.read(1 << 20)
        except OSError:
            return ()
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
            break  # every core reports the same flags
    return tuple(flag for flag in CPU_BF16_FLAGS if flag in flags)


@dataclass(frozen=True)
class MixedPrecision:
    """The mixed precision a run uses (Accelerate's no | bf16 | fp16) and why, for its log."""

    name: str
    reason: str

    def describe(self) -> str:
        """Return the start-up line's words: "bf16 (train.mixed_precision = ...: why)"."""
        return f"{'fp32' if self.name == 'no' else self.name} ({self.reason})"


def resolve_mixed_precision(
    requested: str,
    arch: str,
    on_cuda: bool | None = None,
    cpu_flags: tuple[str, ...] | None = None,
) -> MixedPrecision:
    """Return the mixed precision a run of `arch` uses for train.mixed_precision = `requested`
    (no | bf16 | fp16 | auto): on CUDA as asked ("auto": bf16 where the GPU has it); on a CPU
    bf16 only where its flags show bf16 instructions and `arch` measured faster, fp32 otherwise."""
    key = f'train.mixed_precision = "{requested}"'
    if on_cuda is None:
        on_cuda = torch.cuda.is_available()
    if on_cuda:
        if requested != "auto":
            return MixedPrecision(requested, key)
        if torch.cuda.is_bf16_supported():
            return MixedPrecision("bf16", f"{key}: this GPU has bf16")
        return MixedPrecision("no", f"{key}: this GPU has no bf16")
    if requested == "no":
        return MixedPrecision("no", key)
    if requested == "fp16":
        return MixedPrecision("no", f"{key} applies on CUDA only (CPUs have no fp16 products)")
    flags = cpu_bf16_flags() if cpu_flags is None else cpu_flags
    if not flags:
        return MixedPrecision(
            "no", f"{key}: this CPU has no bf16 instructions ({' or '.join(CPU_BF16_FLAGS)})"
        )
    if arch not in CPU_BF16_FASTER:
        return MixedPrecision("no", f"{key}: bf16 was not measured faster for {arch} on a CPU")
    return MixedPrecision("bf16", f"{key}: this CPU has {', '.join(flags)}")
