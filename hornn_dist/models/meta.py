"""The model built on PyTorch's meta device: shapes and parameter counts, nothing allocated.

The memory check (training/memory.py) and the sweep's parameter counts (sweeps/params.py)
both count a model this way, before any weight exists.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from hornn_dist.models.config import ModelConfig
from hornn_dist.models.lm import RecurrentLM, build_model


class _NoMetaWrites(TorchFunctionMode):
    """Skip in-place writes (the initialisers) to meta tensors, which hold no values: PyTorch's
    meta `normal_` would import torch._dynamo, seconds of every run's, sweep's and report's
    start."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: D105
        target = args[0] if args else (kwargs or {}).get("tensor")  # torch.nn.init's keyword
        name = getattr(func, "__name__", "")
        if name.endswith("_") and not name.endswith("__") and getattr(target, "is_meta", False):
            return target
        return func(*args, **(kwargs or {}))


def build_on_meta(cfg: ModelConfig, vocab_size: int) -> RecurrentLM:
    """Return model `cfg` on the meta device (raises torch's RuntimeError, TypeError or
    OverflowError for sizes past what it can index)."""
    with torch.device("meta"), _NoMetaWrites():
        return build_model(cfg, vocab_size)
