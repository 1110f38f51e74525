"""How the processes average their gradients each step: what each sends, in which form, and when.

Every trainable parameter's `.grad` is a view of one flat buffer, laid out by how its part
travels (one `zero_` clears them all, at addresses a CUDA graph can hold):

    flat = [ late            | early                | rows                    ]
             recurrent layers   output layer W_out,    input embedding (V, E),
             (and the tied      b_out (not a tied      when its rows pay
             matrix)            matrix)                (`rows_pay`)

- early: the softmax is the last layer forward, so the output layer's gradient is complete
  before the backward through time starts. An eager step starts its all-reduce then, from a
  hook on the gradient, and the BPTT backward runs while it travels. A graphed step (CUDA)
  cannot start a collective from inside its graph: it all-reduces early and late together,
  as one all-reduce between its two graphs, the same bytes without that overlap (the overlap
  inside a graphed backward needs a GPU session to build and measure).
- late: every other dense gradient, all-reduced once the backward is done.
- rows: a step's input embedding gradient is zero outside the rows of the tokens it read (at
  most b·T of V rows). Each process sends those rows, sorted, each row once and the rest of
  its b·T slots zero, with the row ids as floats in the same buffer, in one all-gather; every
  process then clears its own rows and adds all of them, rank by rank, into its embedding
  gradient. With tied
  weights the embedding is the output layer's matrix, whose gradient is dense: it goes late.

Arithmetic. Every gradient is scaled by 1/processes first, as DDP's reducer does.
- `reduce_dtype = "fp32"`: with 2 processes the result equals the dense fp32 all-reduce of
  every gradient bit for bit (a sum of two does not depend on its order; a row one process
  left out adds an exact zero; a zero may come back as +0 where the dense sum gives -0). With
  more processes the rows are summed in rank order and each all-reduce in the backend's
  order over its own chunks, so the result equals the dense all-reduce within fp32
  summation-order rounding.
- `reduce_dtype = "bf16"`: the dense parts are cast to bf16, all-reduced in bf16 (NCCL and
  gloo add two bf16 values in fp32 and round the sum to bf16 at each hop) and cast back into
  the fp32 gradients; clipping, momentum and the update stay fp32, and the embedding's rows
  travel in fp32. Nothing is carried from step to step, so a resumed run repeats its steps.

Nothing here waits on the host: sizes are fixed by b·T, so the pieces run the same between
two CUDA graphs as in an eager step, which is what the CPU tests run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn

from hornn_dist.config import REDUCE_DTYPES as REDUCE_DTYPE_NAMES
from hornn_dist.models import RecurrentLM

# torch 2.13 renamed all_gather_into_tensor (deprecated there); torch >= 2.4 has the old name
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
# train.reduce_dtype's choices, as dtypes
REDUCE_DTYPES = dict(zip(REDUCE_DTYPE_NAMES, (torch.float32, torch.bfloat16), strict=True))
ROW_ID_LIMIT = 2**24  # float32 holds every integer up to 2^24 exactly: the row ids travel as floats
ROW_VALUE_BYTES = 4  # the rows travel in fp32 whatever the reduce dtype


def rows_pay(tokens: int, vocab: int, width: int, processes: int, dense_bytes: int) -> bool:
    """Whether all-gathering a step's embedding rows sends fewer bytes than all-reducing the
    dense (vocab, width) gradient: each process's share of a ring, (P-1)·tokens·(width+1)·4
    against 2(P-1)/P·vocab·width·dense_bytes (both 0 at P = 1, where the limit decides)."""
    if vocab > ROW_ID_LIMIT:
        return False
    return processes * tokens * (width + 1) * ROW_VALUE_BYTES < 2 * vocab * width * dense_bytes


@dataclass(frozen=True)
class ExchangePlan:
    """Which parameters travel how (by name), and the sizes each step sends."""

    late: tuple[str, ...]
    early: tuple[str, ...]
    rows: str | None  # the input embedding's weight, when its rows are exchanged
    late_numel: int
    early_numel: int
    row_slots: int  # b·T rows sent per process and step (0 without rows)
    row_width: int  # E
    reduce_dtype: str

    def bytes_per_process(self) -> dict[str, int]:
        """Return each part's payload per process and step: the dense parts' all-reduced
        buffers (in the reduce dtype) and the rows one process contributes to the all-gather."""
        dense = REDUCE_DTYPES[self.reduce_dtype].itemsize
        return {
            "early": self.early_numel * dense,
            "late": self.late_numel * dense,
            "rows": self.row_slots * (self.row_width + 1) * ROW_VALUE_BYTES,
        }


def plan_exchange(
    core: RecurrentLM, tokens: int, processes: int, reduce_dtype: str
) -> ExchangePlan:
    """Return how `core`'s gradients travel for steps of `tokens` (b·T) tokens per process."""
    if reduce_dtype not in REDUCE_DTYPES:
        raise ValueError(f"reduce_dtype must be one of {', '.join(REDUCE_DTYPES)}")
    named = [(n, p) for n, p in core.named_parameters() if p.requires_grad]
    embedding = core.embedding.weight
    # tied (a Linear's matrix, an adaptive head's shortlist rows): the output layer's gradient
    # reaches the embedding's rows of every word it scores, not only the batch's input words
    tied = core.cfg.tie_weights
    vocab, width = embedding.shape
    dense_bytes = REDUCE_DTYPES[reduce_dtype].itemsize
    rows = (
        not tied
        and embedding.requires_grad
        and rows_pay(tokens, vocab, width, processes, dense_bytes)
    )
    output = {id(p) for p in core.decoder.parameters()} - {id(embedding)}
    early = [(n, p) for n, p in named if id(p) in output]
    late = [(n, p) for n, p in named if id(p) not in output and not (rows and p is embedding)]
    return ExchangePlan(
        late=tuple(n for n, _ in late),
        early=tuple(n for n, _ in early),
        rows="embedding.weight" if rows else None,
        late_numel=sum(p.numel() for _, p in late),
        early_numel=sum(p.numel() for _, p in early),
        row_slots=tokens if rows else 0,
        row_width=width,
        reduce_dtype=reduce_dtype,
    )


class GradientExchange:
    """The flat gradient buffer of one model and the exchange that averages it every step.

    A step calls, in order: `arm()` before its backward, `pack(tokens)` after it, then
    `communicate()` (the collectives; between the two graphs of a graphed step) and `unpack()`
    before reading the gradients. overlap: start the output layer's all-reduce from a hook
    during the backward (eager steps only: a graph cannot hold it).
    """

    def __init__(self, core: RecurrentLM, plan: ExchangePlan, *, overlap: bool) -> None:
        self.plan = plan
        self.processes, self.rank = dist.get_world_size(), dist.get_rank()
        self.overlap = overlap and bool(plan.early)
        params = dict(core.named_parameters())
        late = [params[n] for n in plan.late]
        early = [params[n] for n in plan.early]
        row_param = params[plan.rows] if plan.rows else None
        kinds = {(p.dtype, p.device) for p in params.values() if p.requires_grad}
        if len(kinds) != 1:
            raise ValueError(
                f"the parameters must share one dtype and device, not {sorted(map(str, kinds))}"
            )
        dtype, device = kinds.pop()
        dense = plan.late_numel + plan.early_numel
        rows_numel = row_param.numel() if row_param is not None else 0
        self.flat = torch.zeros(dense + rows_numel, dtype=dtype, device=device)
        offset = 0
        for p in [*late, *early] + ([row_param] if row_param is not None else []):
            p.grad = self.flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        self.dense = self.flat[:dense]  # late | early, contiguous: one all-reduce when graphed
        self.late = self.flat[: plan.late_numel]
        self.early = self.flat[plan.late_numel : dense]
        wire = REDUCE_DTYPES[plan.reduce_dtype]
        self._cast = wire != dtype  # the dense all-reduces run on a bf16 copy, else in place
        self.wire = torch.zeros(dense, dtype=wire, device=device) if self._cast else self.dense
        self.wire_late = self.wire[: plan.late_numel]
        self.wire_early = self.wire[plan.late_numel :]
        self.rows_grad = row_param.grad if row_param is not None else None
        if self.rows_grad is not None:
            n, width = plan.row_slots, plan.row_width
            self._send = torch.zeros(n * (width + 1), dtype=dtype, device=device)
            self._send_rows = self._send[: n * width].view(n, width)  # (n, E)
            self._send_ids = self._send[n * width :]  # (n,) row ids as floats
            self._received = torch.zeros(
                self.processes, n * (width + 1), dtype=dtype, device=device
            )
            self._ids = torch.zeros(self.processes, n, dtype=torch.int64, device=device)
        self._work: list[dist.Work] = []
        self._early_started = False
        self._armed = False
        self._ready = 0
        self._hooks = (
            [p.register_post_accumulate_grad_hook(self._on_early_grad) for p in early]
            if self.overlap
            else []
        )

    def describe(self) -> str:
        """Return one line saying what each step exchanges and when."""
        plan, mb = self.plan, 1e6
        sizes = plan.bytes_per_process()
        parts = []
        if self.overlap:
            parts.append(
                f"the output layer's {sizes['early'] / mb:.2f} MB all-reduced during the backward"
            )
            parts.append(f"the other {sizes['late'] / mb:.2f} MB after it ({plan.reduce_dtype})")
        else:
            dense = (sizes["early"] + sizes["late"]) / mb
            parts.append(f"{dense:.2f} MB all-reduced after the backward ({plan.reduce_dtype})")
        if plan.rows:
            parts.append(
                f"the embedding's rows of the step's tokens ({plan.row_slots} slots, "
                f"{sizes['rows'] / mb:.2f} MB fp32) all-gathered"
            )
        return f"gradients averaged over {self.processes} processes: " + ", ".join(parts)

    # ------------------------------------------------------------------ the step's calls

    def arm(self) -> None:
        """Before the backward: let the output layer's all-reduce start when its gradient is ready."""
        self._armed, self._ready, self._early_started = self.overlap, 0, False

    def _on_early_grad(self, _: nn.Parameter) -> None:
        """Hook after each early gradient's accumulation: the last one starts their all-reduce."""
        self._ready += 1
        if self._armed and self._ready == len(self.plan.early):
            self._armed = False
            self._prepare(self.early, self.wire_early)
            self._start(self.wire_early)
            self._early_started = True

    def pack(self, tokens: Tensor) -> None:
        """After the backward: scale (and cast) what has not started; gather the rows that
        the step's `tokens` (T, b) read into the send buffer."""
        if self._early_started:
            self._prepare(self.late, self.wire_late)
        else:
            self._prepare(self.dense, self.wire)
        if self.rows_grad is not None:
            self._pack_rows(tokens.reshape(-1))

    def communicate(self) -> None:
        """Run the collectives not yet started and wait for every one."""
        self._armed = False
        self._start(self.wire_late if self._early_started else self.wire)
        if self.rows_grad is not None:
            self._work.append(_all_gather(self._received.view(-1), self._send, async_op=True))
        for work in self._work:
            work.wait()
        self._work = []

    def unpack(self) -> None:
        """Before the gradients are read: the dense sums back in fp32, the rows added in."""
        if self._cast:
            self.dense.copy_(self.wire)
        if self.rows_grad is not None:
            self._unpack_rows()

    # ------------------------------------------------------------------ parts

    def _prepare(self, grads: Tensor, wire: Tensor) -> None:
        grads.mul_(1.0 / self.processes)
        if self._cast:
            wire.copy_(grads)  # fp32 -> bf16, rounded to nearest even

    def _start(self, wire: Tensor) -> None:
        if wire.numel():
            self._work.append(dist.all_reduce(wire, async_op=True))

    def _pack_rows(self, ids: Tensor) -> None:
        ids = torch.sort(ids).values  # (n,)
        repeat = torch.zeros_like(ids, dtype=torch.bool)
        repeat[1:] = ids[1:] == ids[:-1]
        torch.index_select(self.rows_grad, 0, ids, out=self._send_rows)
        self._send_rows.mul_(1.0 / self.processes)
        self._send_rows.masked_fill_(repeat.unsqueeze(1), 0.0)  # each row once; never NaN
        self._send_ids.copy_(ids)

    def _unpack_rows(self) -> None:
        n, width = self.plan.row_slots, self.plan.row_width
        self._ids.copy_(self._received[:, n * width :])
        # this process's gradient is zero outside the rows it sent: clear those, not all V
        self.rows_grad.index_fill_(0, self._ids[self.rank], 0.0)
        for rank in range(self.processes):  # rank order: the same sum on every process
            rows = self._received[rank, : n * width].view(n, width)
            self.rows_grad.index_add_(0, self._ids[rank], rows)
