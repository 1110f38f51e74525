"""The poolings of the feedback paths (paper Table 2): one `Pooling` entry each, the one place that
says what a pooling is. Nothing else names a pooling by its string.

A pooling combines the N path terms P_n = W_hn h_{t-n} of step t into the feedback of
h_t = f(W_in x_t + b + pool(P_1 .. P_N)) in three moves, each a field of its entry, which every
engine (models/recurrence.py's fused and loop engines, models/triton_scan.py) computes:

    coefficient   P_n <- k_n P_n with a fixed k_n (fofe: α^n, eq. 5); none: k_n = 1
    gated         P_n <- r_n ⊙ P_n, r_n = σ(W1n x_t + W2n h_{t-n} + c_n) (eq. 6-7): the layer
                  then has the gate weights W1n, W2n and biases c_n
    reduce        "sum" (eq. 3) or "max" (eq. 4, element-wise, ties to the lowest n)

A new pooling that is such a combination is one `register_pooling` call: the layer, its
parameters and init, every engine, the memory estimate, the clip, the report and the plots read
it from here. One that is not needs a kernel of its own besides: its entry's `engines` lists the
engines that compute it, and a config that names another fails when it is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

REDUCTIONS = ("sum", "max")
ENGINE_KERNELS = ("fused", "loop", "triton")  # model.engine's choices that run a HORNN layer


@dataclass(frozen=True)
class Pooling:
    """One pooling of the feedback paths: its words, its algebra and what follows from it."""

    name: str  # model.pooling
    label: str  # the report's model name, e.g. "Gated HORNN"
    equation: str  # where the paper defines it, e.g. "eq. 6-7"
    reduce: str = "sum"  # how the path terms combine: sum | max (REDUCTIONS)
    # k_n, path n's fixed factor, from (n, order, alpha), n an int or a tensor of path numbers;
    # None: every k_n = 1
    coefficient: Callable[[Any, int, float], Any] | None = None
    gated: bool = False  # a learned gate r_n on each path (eq. 7)
    uses_alpha: bool = False  # model.alpha changes it (report: Figure 4's sweep, its plot)
    color: str = "C0"  # its colour in the report's plots
    engines: tuple[str, ...] = ENGINE_KERNELS  # the engines with a kernel that computes it

    def coefficients(self, order: int, alpha: float) -> list[float] | None:
        """Return k_1 .. k_N, or None where every k_n is 1."""
        if self.coefficient is None:
            return None
        return [self.coefficient(n, order, alpha) for n in range(1, order + 1)]

    def coefficient_tensor(self, n: Tensor, order: int, alpha: float) -> Tensor:
        """Return k_n for a tensor of path numbers `n` (its dtype and device), as the engines
        use them: computed on the tensor, so FOFE's α^n is one tensor power."""
        if self.coefficient is None:
            return torch.ones_like(n)
        k = self.coefficient(n, order, alpha)
        return torch.as_tensor(k, dtype=n.dtype, device=n.device).expand(n.shape).clone()

    def init_weights(self, order: int, alpha: float) -> list[float]:
        """Return each path's weight in the pool at initialisation: k_n, times σ(0) = ½ for a
        gate (zero gate biases)."""
        ks = self.coefficients(order, alpha) or [1.0] * order
        return [k * (0.5 if self.gated else 1.0) for k in ks]

    def weight_blocks(self, order: int) -> tuple[int, int]:
        """Return the H-wide column blocks of weight_ih and weight_hh: (1 [+ N gates], N [+ N])."""
        return (1 + order, 2 * order) if self.gated else (1, order)

    @property
    def per_path_factors(self) -> bool:
        """Whether the backward keeps a factor per path and step (a max's winners, a gate's
        values) rather than one per step: the memory estimate counts it."""
        return self.gated or self.reduce == "max"

    @property
    def summed(self) -> bool:
        """Whether the paths add up unweighted, the clip class that needs a lower global norm
        at order >= 2 (training/optim.py, resolve_clip)."""
        return self.reduce == "sum" and self.coefficient is None and not self.gated

    @property
    def triton_code(self) -> int | None:
        """Return the Triton kernels' POOL constant for this algebra (0 sum, 1 sum with
        coefficients, 2 max, 3 gated sum), None where they have no such code."""
        codes = {("sum", False, False): 0, ("sum", True, False): 1, ("max", False, False): 2}
        codes[("sum", False, True)] = 3
        return codes.get((self.reduce, self.coefficient is not None, self.gated))


def _fofe(n: Any, order: int, alpha: float) -> Any:
    return alpha**n


_REGISTRY: dict[str, Pooling] = {}


def register_pooling(pooling: Pooling) -> Pooling:
    """Add a pooling (model.pooling = its name) and return it; raise ValueError for a name taken
    or an entry no engine computes."""
    if pooling.name in _REGISTRY:
        raise ValueError(f"pooling {pooling.name!r} is registered already")
    if pooling.reduce not in REDUCTIONS:
        raise ValueError(f"Pooling.reduce must be one of {', '.join(REDUCTIONS)}")
    if pooling.gated and (pooling.reduce != "sum" or pooling.coefficient is not None):
        raise ValueError("a gated pooling sums its gated paths, without coefficients")
    engines = tuple(e for e in pooling.engines if e != "triton" or pooling.triton_code is not None)
    if not engines or any(e not in ENGINE_KERNELS for e in engines):
        raise ValueError(f"Pooling.engines must be some of {', '.join(ENGINE_KERNELS)}")
    _REGISTRY[pooling.name] = Pooling(**{**pooling.__dict__, "engines": engines})
    return _REGISTRY[pooling.name]


def unregister_pooling(name: str) -> None:
    """Remove a pooling registered by `register_pooling` (a test's own)."""
    if name in PAPER_POOLINGS:
        raise ValueError(f"pooling {name!r} is one of the paper's")
    _REGISTRY.pop(name, None)


def pooling_names() -> tuple[str, ...]:
    """Return every registered pooling's name, the paper's first."""
    return tuple(_REGISTRY)


def get_pooling(name: str) -> Pooling:
    """Return the entry of pooling `name`; raise ValueError naming the choices."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"pooling must be one of {', '.join(_REGISTRY)}; got {name!r}") from None


for _entry in (
    Pooling("sum", "HORNN", "eq. 3", color="C0"),
    Pooling("max", "Max HORNN", "eq. 4", reduce="max", color="C1"),
    Pooling("fofe", "FOFE HORNN", "eq. 5", coefficient=_fofe, uses_alpha=True, color="C2"),
    Pooling("gated", "Gated HORNN", "eq. 6-7", gated=True, color="C3"),
):
    register_pooling(_entry)
PAPER_POOLINGS = pooling_names()  # the paper's four, in its order
DEFAULT = PAPER_POOLINGS[2]  # model.pooling's default: FOFE, the paper's §4.1 model
