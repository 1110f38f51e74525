"""One training step (a TBPTT window), called eagerly or replayed from CUDA graphs.

What it computes is the plain step of `tests/reference_step.py` (checked bit for bit in one process,
and against that step on a DDP model with two); what it adds is how it runs fast.

`TrainStep.run(x, y)` copies the batch into static buffers and runs the whole step in three
parts:

    forward_backward: forward -> cross-entropy (the model's output layer) -> backward
                      -> carry the state
    reduce:           (several processes) average the gradients (exchange.py: the output
                      layer's all-reduce, started during an eager backward; the rest; the
                      embedding's touched rows, all-gathered)
    update:           (fp16: unscale) -> gradient norms -> clip -> SGD -> zero the gradients
                      -> max-norm (column normalisation)

Everything the step reads or writes between calls lives in tensors allocated once: the
batch, the carried state (HORNN histories / RNN states), the loss, the gradient norms, the
device step counter and the first non-finite step (with several processes also every
parameter's gradient, as views of one flat buffer). So the parts can be captured in CUDA
graphs and replayed with no host work but the graph launches and one batch upload; the step
then waits for nothing on the host (no `.item()`), as PyTorch's whole-network capture recipe
asks (https://pytorch.org/docs/stable/notes/cuda.html#whole-network-capture).

Several processes average their gradients here, not in DDP: the trainer does not wrap the
model in DistributedDataParallel. The gradients of all parameters are views of one flat
buffer, which `exchange.GradientExchange` averages (scaled first by 1/processes as DDP's
reducer does): in fp32, two ranks step exactly as DDP's two ranks would. With a graph, one
process captures its whole step in one graph; several capture `forward_backward` (ending with
the exchange's `pack`) and `update` (starting with its `unpack`) as two graphs sharing one
memory pool and run the exchange's collectives eagerly between them (any backend: NCCL, or
gloo over CUDA tensors); docs/performance.md ("Graphed multi-process step") says why this
route. Only an eager step starts the output layer's all-reduce during its backward.

When a graph applies (CUDA and `train.cuda_graph = true`),
the first `WARMUP_STEPS` steps of a run (and of a resumed run) run eagerly on a side stream
(they create SGD's momentum buffers, warm up cuBLAS/cuDNN and start NCCL's communicator),
then the step is captured and replayed. A change of the learning rate (the schedule halves it
at an epoch end) re-captures it, since the graph holds the lr as a constant. On CPU the same
parts run eagerly, so CPU runs, with one process or several, exercise the code path that the
GPU replays. Under fp16 the trainer's SGD is fused (`step_setup.uses_fused_sgd`): Accelerate's
GradScaler then unscales, checks for overflow, skips an overflowing step and updates its scale
all on the device, so the fp16 step is graphed too.

The step knows nothing of the run's config or of Accelerate: it takes the model, the
optimizer, the sizes, the `OptimConfig` (clip, max-norm) and what a launcher adds as plain
callables (`backward`: Accelerate's, with fp16's loss scaling; `unscale`: fp16's unscaling;
`autocast`: the forward's autocast where the model does not autocast itself), whether to
average over the processes of `torch.distributed`'s default group (and in which dtype the
dense gradients travel), and the graph decision.
`step_setup.step_for_accelerator` builds the trainer's step from its config and Accelerator, and
`benchmarks/throughput.py` builds the same step around a bare model, so the benchmark times
what the trainer runs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from hornn_dist.config import OptimConfig
from hornn_dist.models import RecurrentLM, column_normalize_
from hornn_dist.training.exchange import GradientExchange, plan_exchange
from hornn_dist.training.metrics import total_grad_norm
from hornn_dist.training.optim import clip_gradients, resolve_clip
from hornn_dist.util.errors import CheckpointError

logger = logging.getLogger("hornn_dist")

WARMUP_STEPS = 3  # eager steps before capture (momentum buffers, cuBLAS/cuDNN handles, NCCL)


class TrainStep:
    """The training step with static buffers; `run` calls it eagerly or replays its graphs.

    model: the RecurrentLM the forward calls (the trainer's, under Accelerate's autocast), or
        a wrapper that holds it as `.module` (DistributedDataParallel, the peer
        benchmarks/throughput.py's eager-ddp times it against); `core` is the bare
        RecurrentLM (state, gradient norms, max-norm);
        optimizer: its SGD (or Accelerate's wrapper of it).
    device, batch_size, bptt: where and what the static buffers hold (batch_size per process).
    optim: the clip (`clip`, `clip_mode`; "auto" resolved for core's model) and max-norm
        (`max_col_norm`) settings.
    graph_reason: why the step is not CUDA graphs, or None to capture and replay them (CUDA
        only); the trainer's comes from `step_setup.graph_unavailable_reason`.
    reduce: average the gradients over the processes of torch.distributed's default group
        (which must be initialised); the processes start from rank 0's weights.
    reduce_dtype: with `reduce`, the dtype the dense gradients travel in ("fp32" or "bf16",
        `train.reduce_dtype`; exchange.py).
    backward: runs the backward of the loss (default `Tensor.backward`).
    unscale: called after the gradients are averaged, before they are read (fp16's unscaling).
    autocast: returns the context the forward runs in (default none).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: Any,
        *,
        device: torch.device,
        batch_size: int,
        bptt: int,
        optim: OptimConfig,
        graph_reason: str | None,
        reduce: bool = False,
        reduce_dtype: str = "fp32",
        backward: Callable[[Tensor], Any] = Tensor.backward,
        unscale: Callable[[], Any] | None = None,
        autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ) -> None:
        if graph_reason is None and device.type != "cuda":
            raise ValueError(f"a CUDA graph needs a CUDA device, not {device}")
        core: RecurrentLM = getattr(model, "module", model)  # under a DDP wrapper, the model
        self.model, self.core, self.optimizer = model, core, optimizer
        self.optim = resolve_clip(core.cfg, optim)  # clip_mode "auto" chosen for this model
        self._backward, self._unscale, self._autocast = backward, unscale, autocast
        self.params = [p for p in core.parameters() if p.requires_grad]
        T = bptt
        self.graph_reason = graph_reason
        self.use_graph = self.graph_reason is None
        # One process: no flat buffer, so the backward hands its outputs over as the gradients
        # (set to None after each step) instead of adding them into a buffer.
        self.exchange: GradientExchange | None = None
        self.processes = dist.get_world_size() if reduce else 1
        if reduce:
            plan = plan_exchange(core, batch_size * T, self.processes, reduce_dtype)
            # a graph cannot start a collective from inside its backward: eager steps only
            self.exchange = GradientExchange(core, plan, overlap=not self.use_graph)
            self._start_from_rank_0()
        self.flat_grad = self.exchange.flat if self.exchange is not None else None
        self.xy = torch.zeros(2, T, batch_size, dtype=torch.int64, device=device)  # (2, T, b)
        self.state = core.init_state(batch_size, device)  # carried state, copied in place
        self.loss = torch.zeros((), device=device)  # the last step's mean loss
        self.norm_names = ["grad_norm/total"] + [
            f"grad_norm/{key}" for key in core.feedback_path_slices()
        ]
        self.norms = torch.zeros(len(self.norm_names), device=device)
        self.step_id = torch.zeros((), dtype=torch.int64, device=device)  # steps taken
        self.bad_step = torch.zeros((), dtype=torch.int64, device=device)  # first non-finite
        self.graphs: list[torch.cuda.CUDAGraph] = []  # replayed in order, all-reduce between
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

    @property
    def reduce(self) -> bool:
        """Whether the step averages its gradients over the processes."""
        return self.exchange is not None

    def describe(self) -> str:
        """Return one line saying how the step runs."""
        if self.use_graph:
            graphs = "CUDA graphs" if self.reduce else "CUDA graph"
            how = f"{graphs} (captured after {WARMUP_STEPS} eager warm-up steps)"
        else:
            how = f"eager ({self.graph_reason})"
        if self.exchange is None:
            return how
        return f"{how}, {self.exchange.describe()}"

    def reset_state(self) -> None:
        """Zero the carried state (a new epoch starts from a zero history)."""
        for buf in self.state:
            buf.zero_()

    def state_dict(self) -> dict[str, Any]:
        """Return what survives a restart: the carried history (on the CPU) and the step count."""
        return {
            "history": tuple(h.detach().cpu() for h in self.state),
            "steps": int(self.step_id.item()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Copy a carried history and step count from `state_dict()` into the buffers."""
        history = state.get("history")
        if not isinstance(history, tuple | list) or len(history) != len(self.state):
            got = len(history) if isinstance(history, tuple | list) else type(history).__name__
            raise CheckpointError(
                f"the step's saved history holds {got} state tensors, this model carries "
                f"{len(self.state)}: the checkpoint is of another model; use one of this run"
            )
        for buf, value in zip(self.state, history, strict=True):
            if value.shape != buf.shape:
                raise CheckpointError(
                    f"the step's saved history has shape {tuple(value.shape)}, this run carries "
                    f"{tuple(buf.shape)}: resume with the checkpoint's train.batch_size"
                )
            buf.copy_(value)
        self.step_id.fill_(int(state.get("steps", 0)))
        self.forget_graph()  # a restore replaces the optimizer's momentum tensors

    @staticmethod
    def reshard(states: list[dict[str, Any]], rank: int, world_size: int) -> dict[str, Any]:
        """Return rank `rank` of `world_size`'s state from every saving rank's `state_dict()`
        (elastic resume): the histories joined along the batch, in rank order, and this rank's
        streams sliced out, exact because every process count sees the same data order."""
        layers = zip(*(s["history"] for s in states), strict=True)
        joined = [torch.cat(parts, dim=1) for parts in layers]  # each (..., B, H), batch at dim 1
        batch = joined[0].shape[1] if joined else 0
        if batch % world_size:
            raise CheckpointError(
                f"the checkpoint holds {batch} streams, which {world_size} processes cannot "
                f"share; resume with a number of processes that divides {batch}"
            )
        width = batch // world_size
        history = tuple(h[:, rank * width : (rank + 1) * width].clone() for h in joined)
        return {"history": history, "steps": states[0]["steps"]}

    def forget_graph(self) -> None:
        """Drop the captured graphs: the next steps warm up and capture again."""
        self.graphs, self.graph_lr, self.eager_steps = [], None, 0

    def grad_norms(self) -> dict[str, float]:
        """Return the last measured gradient norms by TensorBoard tag (one host sync)."""
        return dict(zip(self.norm_names, self.norms.tolist(), strict=True))

    def _start_from_rank_0(self) -> None:
        """Copy rank 0's parameters and buffers to every process (what DDP does at its start)."""
        with torch.no_grad():
            for tensor in [*self.core.parameters(), *self.core.buffers()]:
                dist.broadcast(tensor, src=0)

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
        if self.graphs and lr != self.graph_lr:
            self.forget_graph()
            self.eager_steps = WARMUP_STEPS  # warm already: capture again at once
        if not self.graphs and self.eager_steps < WARMUP_STEPS:
            current = torch.cuda.current_stream(self.xy.device)
            self._side.wait_stream(current)
            with torch.cuda.stream(self._side):
                self._body(measure=True)
            current.wait_stream(self._side)
            self.eager_steps += 1
            return self.loss
        if not self.graphs:
            self._capture(lr)
        first, *rest = self.graphs
        first.replay()
        for graph in rest:
            self._reduce()
            graph.replay()
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
        self._zero_grad()  # one process: the backward allocates the gradients in the graph pool
        if self.reduce:
            before = torch.cuda.CUDAGraph()
            with torch.cuda.graph(before):  # records the part; it does not run it
                self._forward_backward()
            after = torch.cuda.CUDAGraph()
            with torch.cuda.graph(after, pool=before.pool()):  # replayed in capture order
                self._update(measure=True)
            self.graphs = [before, after]
        else:
            whole = torch.cuda.CUDAGraph()
            with torch.cuda.graph(whole):
                self._body(measure=True)
            self.graphs = [whole]
        self.graph_lr = lr
        self.captures += 1
        logger.info(
            "captured the training step in %d CUDA graph(s) (lr %.4g)", len(self.graphs), lr
        )

    def _body(self, measure: bool) -> None:
        """The whole step on the static buffers; nothing here waits for the device."""
        self._forward_backward()
        self._reduce()
        self._update(measure)

    def _forward_backward(self) -> None:
        """Forward, loss and backward (into the flat gradients with several processes); count
        the step; carry the state."""
        x, y = self.xy[0], self.xy[1]
        with self._autocast():  # the model's output layer gives the mean loss (model.output_layer)
            loss, new_state = self.model(x, self.state, targets=y)
        if self.exchange is not None:
            self.exchange.arm()
        self._backward(loss)
        if self.exchange is not None:
            self.exchange.pack(x)
        with torch.no_grad():
            self.step_id.add_(1)
            first_bad = (self.bad_step == 0) & ~torch.isfinite(loss)
            self.bad_step.copy_(torch.where(first_bad, self.step_id, self.bad_step))
            self.loss.copy_(loss)
            for buf, new in zip(self.state, new_state, strict=True):
                buf.copy_(new)  # after backward: the old state was saved for it

    def _reduce(self) -> None:
        """Run the exchange's collectives (between the two graphs of a graphed step)."""
        if self.exchange is not None:
            self.exchange.communicate()

    def _update(self, measure: bool) -> None:
        """(Several processes: the averaged gradients in place), unscale (fp16), measure, clip,
        SGD, zero the gradients, max-norm."""
        if self.exchange is not None:
            self.exchange.unpack()
        if self._unscale is not None:
            self._unscale()
        if measure:
            with torch.no_grad():
                total = total_grad_norm(self.params).reshape(1)
                self.norms.copy_(torch.cat([total, self.core.path_grad_norm_vector()]))
        clip_gradients(self.params, self.optim)
        self.optimizer.step()
        self._zero_grad()
        column_normalize_(self.core, self.optim.max_col_norm)

    def _zero_grad(self) -> None:
        if self.exchange is not None:
            self.exchange.flat.zero_()
        else:
            self.optimizer.zero_grad(set_to_none=True)
