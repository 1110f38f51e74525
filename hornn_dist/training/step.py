"""One training step (a TBPTT window), called eagerly or replayed from a CUDA graph.

`TrainStep.run(x, y)` copies the batch into static buffers and runs the whole step:

    forward -> cross-entropy -> backward -> (fp16: unscale) -> gradient norms -> clip
    -> SGD -> zero_grad -> max-norm (column normalisation) -> carry the state

Everything the step reads or writes between calls lives in tensors allocated once: the
batch, the carried state (HORNN histories / RNN states), the loss, the gradient norms, the
device step counter and the first non-finite step. So the same `_body` can be captured in a
CUDA graph and replayed with no host work but one graph launch and one batch upload; the
step then waits for nothing on the host (no `.item()`), as PyTorch's whole-network capture
recipe asks (https://pytorch.org/docs/stable/notes/cuda.html#whole-network-capture).

When the graph applies (CUDA, one process, `train.mixed_precision` no or bf16 and
`train.cuda_graph = true`), the first `WARMUP_STEPS` steps of a run (and of a resumed run)
run eagerly on a side stream (they create SGD's momentum buffers and warm up cuBLAS/cuDNN),
then the step is captured and replayed. A change of the learning rate (the schedule halves
it at an epoch end) re-captures it, since the graph holds the lr as a constant. Elsewhere
(CPU, several processes with DDP's all-reduce, fp16's GradScaler, which reads its overflow
flag on the host) the same `_body` runs eagerly, so CPU runs exercise the code path that
the GPU replays.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

from hornn_dist.config import RunConfig
from hornn_dist.models import RecurrentLM, column_normalize_
from hornn_dist.training.metrics import total_grad_norm
from hornn_dist.training.optim import clip_gradients

logger = logging.getLogger("hornn_dist")

WARMUP_STEPS = 3  # eager steps before capture (momentum buffers, cuBLAS/cuDNN handles)


def graph_unavailable_reason(cfg: RunConfig, accelerator: Any) -> str | None:
    """Return why the step cannot be a CUDA graph in this run, or None when it can."""
    if not cfg.train.cuda_graph:
        return "train.cuda_graph = false"
    if accelerator.device.type != "cuda":
        return "not on CUDA"
    if accelerator.num_processes > 1:
        return f"{accelerator.num_processes} processes (DDP's all-reduce runs eagerly)"
    if accelerator.mixed_precision == "fp16":
        return "fp16's gradient scaler checks for overflow on the host"
    return None


class TrainStep:
    """The training step with static buffers; `run` calls it eagerly or replays its graph."""

    def __init__(
        self,
        cfg: RunConfig,
        accelerator: Any,
        model: torch.nn.Module,
        core: RecurrentLM,
        optimizer: Any,
        batch_size: int,
    ) -> None:
        self.cfg, self.accelerator = cfg, accelerator
        self.model, self.core, self.optimizer = model, core, optimizer
        self.params = [p for p in core.parameters() if p.requires_grad]
        device = accelerator.device
        T = cfg.train.bptt
        self.xy = torch.zeros(2, T, batch_size, dtype=torch.int64, device=device)  # (2, T, b)
        self.state = core.init_state(batch_size, device)  # carried state, copied in place
        self.loss = torch.zeros((), device=device)  # the last step's mean loss
        self.norm_names = ["grad_norm/total"] + [
            f"grad_norm/{key}" for key in core.feedback_path_slices()
        ]
        self.norms = torch.zeros(len(self.norm_names), device=device)
        self.step_id = torch.zeros((), dtype=torch.int64, device=device)  # steps taken
        self.bad_step = torch.zeros((), dtype=torch.int64, device=device)  # first non-finite
        self.graph_reason = graph_unavailable_reason(cfg, accelerator)
        self.use_graph = self.graph_reason is None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.graph_lr: float | None = None
        self.eager_steps = 0  # eager steps since the set-up (warm-up before capture)
        self.captures = 0
        self._pinned = device.type == "cuda"  # graph or not: uploads never wait for the GPU
        if self.use_graph:
            self._side = torch.cuda.Stream(device)
        if self._pinned:
            # Two pinned staging buffers: the upload of one batch overlaps the step before it.
            self._staging = [torch.empty(2, T, batch_size, dtype=torch.int64).pin_memory()]
            self._staging.append(torch.empty_like(self._staging[0]).pin_memory())
            self._uploaded = [torch.cuda.Event(), torch.cuda.Event()]
            self._slot = 0

    # ------------------------------------------------------------------ state

    def describe(self) -> str:
        """Return one line saying how the step runs."""
        if self.use_graph:
            return f"CUDA graph (captured after {WARMUP_STEPS} eager warm-up steps)"
        return f"eager ({self.graph_reason})"

    def reset_state(self) -> None:
        """Zero the carried state (a new epoch starts from a zero history)."""
        for buf in self.state:
            buf.zero_()

    def load_state(self, state: tuple[torch.Tensor, ...], step: int) -> None:
        """Copy a carried state (e.g. from a checkpoint) into the buffers; set the step count."""
        if len(state) != len(self.state):
            raise ValueError(f"expected {len(self.state)} state tensors, got {len(state)}")
        for buf, value in zip(self.state, state, strict=True):
            buf.copy_(value)
        self.step_id.fill_(step)
        self.forget_graph()  # a restore replaces the optimizer's momentum tensors

    def forget_graph(self) -> None:
        """Drop the captured graph: the next steps warm up and capture again."""
        self.graph, self.graph_lr, self.eager_steps = None, None, 0

    def grad_norms(self) -> dict[str, float]:
        """Return the last measured gradient norms by TensorBoard tag (one host sync)."""
        return dict(zip(self.norm_names, self.norms.tolist(), strict=True))

    # ------------------------------------------------------------------ running

    def run(self, x: torch.Tensor, y: torch.Tensor, measure: bool) -> torch.Tensor:
        """Train on one batch x, y (T, b); return the loss buffer (valid until the next run).

        measure: compute the gradient norms into `norms` (a graph always computes them).
        """
        self._upload(x, y)
        if not self.use_graph:
            self._body(measure)
            return self.loss
        lr = self.optimizer.param_groups[0]["lr"]
        if self.graph is not None and lr != self.graph_lr:
            self.forget_graph()
            self.eager_steps = WARMUP_STEPS  # warm already: capture again at once
        if self.graph is None and self.eager_steps < WARMUP_STEPS:
            current = torch.cuda.current_stream(self.xy.device)
            self._side.wait_stream(current)
            with torch.cuda.stream(self._side):
                self._body(measure=True)
            current.wait_stream(self._side)
            self.eager_steps += 1
            return self.loss
        if self.graph is None:
            self._capture(lr)
        assert self.graph is not None
        self.graph.replay()
        return self.loss

    def _upload(self, x: torch.Tensor, y: torch.Tensor) -> None:
        if not self._pinned:
            self.xy[0].copy_(x)
            self.xy[1].copy_(y)
            return
        slot = self._slot
        self._slot ^= 1
        self._uploaded[slot].synchronize()  # the upload from this buffer two steps ago is done
        staging = self._staging[slot]
        staging[0].copy_(x)
        staging[1].copy_(y)
        self.xy.copy_(staging, non_blocking=True)
        self._uploaded[slot].record()

    def _capture(self, lr: float) -> None:
        self.optimizer.zero_grad(set_to_none=True)  # backward allocates grads in the graph pool
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # records the step; it does not run it
            self._body(measure=True)
        self.graph, self.graph_lr = graph, lr
        self.captures += 1
        logger.info("captured the training step in a CUDA graph (lr %.4g)", lr)

    def _body(self, measure: bool) -> None:
        """The whole step on the static buffers; nothing here waits for the device."""
        acc, cfg = self.accelerator, self.cfg
        x, y = self.xy[0], self.xy[1]
        logits, new_state = self.model(x, self.state)  # (T, b, V)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        acc.backward(loss)
        with torch.no_grad():
            self.step_id.add_(1)
            first_bad = (self.bad_step == 0) & ~torch.isfinite(loss)
            self.bad_step.copy_(torch.where(first_bad, self.step_id, self.bad_step))
            self.loss.copy_(loss)
            for buf, new in zip(self.state, new_state, strict=True):
                buf.copy_(new)  # after backward: the old state was saved for it
        if acc.mixed_precision == "fp16":
            acc.unscale_gradients()
        if measure:
            with torch.no_grad():
                total = total_grad_norm(self.params).reshape(1)
                self.norms.copy_(torch.cat([total, self.core.path_grad_norm_vector()]))
        clip_gradients(self.params, cfg.optim)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        column_normalize_(self.core, cfg.optim.max_col_norm)
