"""How the trainer sets up its training step from the run's config and Accelerator.

`TrainStep` (step.py) knows nothing of the config or of Accelerate; this module decides, once
per run, what the step is handed: Accelerate's backward (with fp16's loss scaling) and
unscaling, the forward's autocast, whether to average over the processes (and in which dtype
the dense gradients travel, `train.reduce_dtype`), and whether the step may be CUDA graphs.
"""

from __future__ import annotations

from typing import Any

import torch

from hornn_dist.config import RunConfig
from hornn_dist.models import RecurrentLM
from hornn_dist.training.step import TrainStep


def graph_unavailable_reason(cfg: RunConfig, accelerator: Any) -> str | None:
    """Return why the step cannot be CUDA graphs in this run, or None when it can."""
    if not cfg.train.cuda_graph:
        return "train.cuda_graph = false"
    if accelerator.device.type != "cuda":
        return "not on CUDA"
    return cfg.model.graph_unavailable_reason()


def uses_fused_sgd(mixed_precision: str, device: torch.device) -> bool:
    """Whether the run's SGD is fused: under fp16 it must be (Accelerate's GradScaler skips an
    overflowing step on the device only for an optimizer that takes its overflow flag; with any
    other it reads the flag on the host, which a CUDA graph cannot hold); on a CPU it is the
    same arithmetic bit for bit in one pass over each parameter instead of foreach's four
    (tests/test_optim.py; the speed: benchmarks/README.md, "Output layer")."""
    return mixed_precision == "fp16" or device.type == "cpu"


def step_for_accelerator(
    cfg: RunConfig,
    accelerator: Any,
    model: RecurrentLM,
    optimizer: Any,
    batch_size: int,
) -> TrainStep:
    """Return the trainer's step: `model` (on the accelerator's device) forward under
    Accelerate's autocast, its backward (and fp16's unscaling) around the prepared optimizer,
    averaging over the processes, graphs where `graph_unavailable_reason` allows."""
    fp16 = accelerator.mixed_precision == "fp16"
    return TrainStep(
        model,
        optimizer,
        device=accelerator.device,
        batch_size=batch_size,
        bptt=cfg.train.bptt,
        optim=cfg.optim,
        graph_reason=graph_unavailable_reason(cfg, accelerator),
        reduce=accelerator.num_processes > 1,
        reduce_dtype=cfg.train.reduce_dtype,
        backward=accelerator.backward,
        unscale=accelerator.unscale_gradients if fp16 else None,
        autocast=accelerator.autocast,
    )
