"""Refuse a model that cannot fit before allocating it: its weights, gradients and momentum.

The parameters are counted by building the model on PyTorch's meta device (shapes only, no
memory), so the count is the real model's, whatever its architecture. Activations come on
top, so a model that passes may still not fit; one that fails surely does not.
"""

from __future__ import annotations

import os

import torch

from hornn_dist.errors import ConfigError
from hornn_dist.models import ModelConfig, build_model

BYTES_PER_PARAMETER = 12  # a float32 weight, its gradient and SGD's momentum buffer


def parameter_count(cfg: ModelConfig, vocab_size: int) -> int:
    """Return the number of trainable parameters of the model of `cfg`, allocating nothing."""
    try:
        with torch.device("meta"):
            return build_model(cfg, vocab_size).num_parameters()
    except (RuntimeError, TypeError, OverflowError) as err:  # sizes past what torch can index
        raise ConfigError(
            f"the model is too large to build (model.hidden_size = {cfg.hidden_size}, "
            f"model.embedding_size = {cfg.embedding_size}, vocabulary {vocab_size}: "
            f"{type(err).__name__}); lower model.hidden_size"
        ) from None


def available_bytes(device: torch.device) -> int:
    """Return the memory free for new tensors on `device` (a CPU: MemAvailable of the machine)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_fits(cfg: ModelConfig, vocab_size: int, device: torch.device) -> int:
    """Raise ConfigError when the model's weights, gradients and momentum cannot fit on `device`
    (on a CPU, once per process of this machine); return the parameter count."""
    count = parameter_count(cfg, vocab_size)
    sharing = 1 if device.type == "cuda" else int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    need = count * BYTES_PER_PARAMETER * sharing
    free = available_bytes(device)
    if need > free:
        on = f"{device}" + (f" ({sharing} processes)" if sharing > 1 else "")
        raise ConfigError(
            f"the model has {count:,} parameters, whose weights, gradients and momentum need "
            f"{need / 2**30:.1f} GiB, but {on} has {free / 2**30:.1f} GiB available; lower "
            "model.hidden_size or model.embedding_size, or the vocabulary (data.max_vocab)"
        )
    return count
