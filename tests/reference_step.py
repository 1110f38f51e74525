"""The plain training step: the reference the trainer's step is checked against.

One TBPTT window as PyTorch's word_language_model trains it, with this project's clip and
column norm: forward, mean cross-entropy, backward, gradient norms, clip, SGD, zero the
gradients, max-norm. `step.TrainStep`, which the trainer runs, computes exactly this
(tests/test_train_step.py: bit for bit in one process; tests/step_ranks.py: with two ranks,
against this step on a DistributedDataParallel model) and adds only what makes it fast:
static buffers, CUDA graphs captured from its parts, the ranks' flat gradient exchange in
place of DDP (step.py says how; step_setup.py chooses, once per run).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from hornn_dist.config import OptimConfig
from hornn_dist.models import column_normalize_
from hornn_dist.training.metrics import total_grad_norm
from hornn_dist.training.optim import clip_gradients, resolve_clip


class ReferenceResult(NamedTuple):
    loss: Tensor  # the window's mean cross-entropy
    state: tuple[Tensor, ...]  # the carried state for the next window (detached)
    norms: list[float] | None  # with measure: [total, each feedback path], before the clip


def reference_step(
    model: torch.nn.Module,
    optimizer: Any,
    x: Tensor,
    y: Tensor,
    state: tuple[Tensor, ...],
    optim: OptimConfig,
    measure: bool = False,
) -> ReferenceResult:
    """Train `model` (a RecurrentLM, or DDP around one) on one window x, y (T, b) from the
    carried `state`; return the loss, the next state and, with `measure`, the gradient norms."""
    core = getattr(model, "module", model)
    logits, new_state = model(x, state)
    loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
    loss.backward()
    params = [p for p in core.parameters() if p.requires_grad]
    norms = None
    if measure:
        norms = [float(total_grad_norm(params)), *map(float, core.path_grad_norms().values())]
    clip_gradients(params, resolve_clip(core.cfg, optim))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    column_normalize_(core, optim.max_col_norm)
    return ReferenceResult(loss.detach(), core.detach_state(new_state), norms)
