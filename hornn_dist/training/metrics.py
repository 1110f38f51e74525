"""Training metrics: perplexity, throughput, gradient norms and running loss averages."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

import torch


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
    device tensor)."""

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
