"""Training metrics: perplexity, throughput, gradient norms and running loss averages."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

from hornn_dist.util.errors import CheckpointError


def perplexity(loss_sum: float, count: int) -> float:
    """Return exp(mean loss) in float64 (inf when the mean overflows, nan for a nan loss)."""
    if count <= 0:
        raise ValueError(f"perplexity needs at least one token, got count={count}")
    mean = float(loss_sum) / int(count)
    if math.isnan(mean):
        return math.nan
    return math.exp(mean) if mean < 700 else math.inf


def total_grad_norm(parameters: Iterable[torch.nn.Parameter]) -> torch.Tensor:
    """Return the global L2 norm of all gradients (as a 0-d tensor, no host sync)."""
    params = list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros((), device=params[0].device if params else None)
    # one multi-tensor reduction for all the per-gradient norms (one kernel per launch on CUDA)
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


class Throughput:
    """Tokens per second over the interval since the last `rate()` call, in training time only."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        """clock: seconds from a monotonic clock (a test passes its own)."""
        self._clock = clock
        self._start = clock()
        self._tokens = 0

    def add(self, tokens: int) -> None:
        """Count tokens processed since the last rate."""
        self._tokens += tokens

    def exclude(self, seconds: float) -> None:
        """Leave `seconds` (a validation, a checkpoint) out of the current interval."""
        self._start += seconds

    def rate(self) -> float:
        """Return tokens/s since the last call and start a new interval."""
        now = self._clock()
        value = self._tokens / max(now - self._start, 1e-9)
        self._start, self._tokens = now, 0
        return value


class RunningLoss:
    """Mean of per-step losses accumulated on the device (no host sync: `take()` returns a
    device tensor), over the window since the last `take()`.

    The window survives a restart (a per-rank checkpoint part): a log line after a resume
    averages the same steps as the uninterrupted run's. Each rank sums its own losses and the
    log averages the ranks' means, so a resume onto another number of processes starts every
    rank from the mean of the saved sums (`reshard`): the average the log takes is the same.
    """

    def __init__(self) -> None:
        self._sum: torch.Tensor | None = None
        self._count = 0

    def add(self, loss: torch.Tensor) -> None:
        """Accumulate one step's mean loss."""
        value = loss.detach().float()
        # clone: `loss` may be a buffer that the next step overwrites in place
        self._sum = value.clone() if self._sum is None else self._sum + value
        self._count += 1

    def take(self) -> torch.Tensor:
        """Return the mean since the last call as a device tensor (nan when empty) and reset."""
        if self._sum is None:
            return torch.tensor(math.nan)
        value = self._sum / self._count
        self._sum, self._count = None, 0
        return value

    def state_dict(self) -> dict[str, Any]:
        """Return the window so far: its sum (float32, on the CPU; None when empty) and steps."""
        total = None if self._sum is None else self._sum.detach().cpu()
        return {"sum": total, "count": self._count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a window from `state_dict()` (the sum moves to the device at the next add)."""
        total, count = state.get("sum"), state.get("count")
        empty = total is None and count == 0
        whole = isinstance(count, int) and not isinstance(count, bool) and count > 0
        if not empty and not (whole and isinstance(total, torch.Tensor) and total.numel() == 1):
            raise CheckpointError(
                f"the saved loss window holds sum {total!r} over {count!r} steps, not a loss "
                "sum and a step count: resume from an older checkpoint"
            )
        self._sum = None if total is None else total.reshape(()).float().clone()
        self._count = count

    @staticmethod
    def reshard(states: list[dict[str, Any]], rank: int, world_size: int) -> dict[str, Any]:
        """Return rank `rank` of `world_size`'s window from every saving rank's `state_dict()`:
        the mean of their sums on every rank (the ranks took the same steps)."""
        sums = [s.get("sum") for s in states]
        if any(total is None for total in sums):
            return {"sum": None, "count": 0}
        mean = torch.stack([t.reshape(()).double() for t in sums]).mean()
        return {"sum": mean.float(), "count": states[0].get("count")}
