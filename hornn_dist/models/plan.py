"""How a HORNN layer runs, decided once: the engine and the precision rule, and their log label.

`plan_for(cfg, device, batch, mixed_precision)` resolves `model.engine` for a device, a batch per
process and the run's mixed precision into a frozen `LayerPlan`, which every HornnLayer of the
model holds and its forward reads; the trainer logs `plan.describe()`. So the engine that runs
and the one the start-up line names are the same object.

The precision rule the plan's label applies lives in `precision.py` (`layer_dtype`), which the
engines call at run time with the live autocast state.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import torch

from hornn_dist.models.config import ENGINES, RECURRENCE_PRECISIONS, ModelConfig
from hornn_dist.models.poolings import get_pooling
from hornn_dist.models.precision import AUTOCAST_DTYPES, DTYPE_NAMES, layer_dtype
from hornn_dist.util.checks import check_choice
from hornn_dist.util.errors import ConfigError

# engine "auto" runs "triton" up to this many outputs per step (B·H): on one H100 under bf16 it
# beat "fused" at the paper's B 20 x H 400 and lost at B 128 x H 1024; between them a guess.
# measured: docs/performance.md, "Numbers behind the code's choices" (the speed issue's table;
# one H200 agrees for every pooling)
AUTO_TRITON_MAX_OUTPUTS = 2**15

RUNNING_ENGINES = tuple(e for e in ENGINES if e != "auto")  # what "auto" resolves among


def auto_engine(device_type: str, autocast: bool, batch: int, hidden: int) -> str:
    """Return what engine "auto" runs where the triton engine can run: "triton" on CUDA under
    autocast at B·H <= AUTO_TRITON_MAX_OUTPUTS (where it was the faster one), else "fused"."""
    if device_type == "cuda" and autocast and batch * hidden <= AUTO_TRITON_MAX_OUTPUTS:
        return "triton"
    return "fused"


@dataclass(frozen=True)
class LayerPlan:
    """How every HORNN layer of a model runs, resolved once (`resolve_plan`, `plan_for`)."""

    engine: str = "fused"  # what runs: fused | triton | loop
    configured: str = "auto"  # model.engine as set: auto | fused | triton | loop
    precision: str = "fp16"  # model.recurrence_precision
    device_type: str = "cpu"  # the device the plan is for
    autocast_dtype: torch.dtype | None = None  # the run's mixed precision there

    def __post_init__(self) -> None:
        check_choice("LayerPlan.engine", self.engine, RUNNING_ENGINES)
        check_choice("LayerPlan.configured", self.configured, ENGINES)
        check_choice("LayerPlan.precision", self.precision, RECURRENCE_PRECISIONS)

    def describe(self) -> str:
        """Return the start-up log's words: "auto engine: triton, layers in fp16"."""
        return f"{self.engine_words()}, {self.precision_words()}"

    def engine_words(self) -> str:
        """Return "auto engine: fused" for engine "auto", else "fused engine" and the like."""
        if self.configured == "auto":
            return f"auto engine: {self.engine}"
        return f"{self.engine} engine"

    def precision_words(self) -> str:
        """Return what the layers run in under the run's mixed precision: "layers in fp16",
        "recurrence in fp32" (the input GEMM in autocast's dtype), "layers in fp32"."""
        if self.autocast_dtype is None:
            return "layers in fp32"
        low = layer_dtype(self.precision, self.device_type, self.autocast_dtype)
        return "recurrence in fp32" if low is None else f"layers in {DTYPE_NAMES[low]}"


def resolve_plan(
    engine: str = "auto",
    precision: str = "fp16",
    hidden: int = 1,
    device: torch.device | str | None = None,
    batch: int = 1,
    mixed_precision: str = "no",
    *,
    strict: bool = True,
    keys: tuple[str, str] = ("engine", "precision"),
) -> LayerPlan:
    """Return the plan of layers of `hidden` units for engine and precision on `device`, at
    `batch` streams per process under `mixed_precision` (no | bf16 | fp16, as resolved for the run).

    device None: the plan without a device check, as for a CPU without mixed precision ("auto"
    is "fused") but a named engine kept as it is (a model built here and moved to a GPU later).
    Where "triton" cannot run on `device` (or $HORNN_TRITON_TILES is malformed): strict, a
    ConfigError naming model.engine; not strict (evaluate or generate a triton-trained model
    on a CPU), the fused engine with one warning. `keys` name the two settings in errors.
    """
    check_choice(keys[0], engine, ENGINES)
    check_choice(keys[1], precision, RECURRENCE_PRECISIONS)
    device_type = "cpu" if device is None else torch.device(device).type
    autocast_dtype = AUTOCAST_DTYPES.get(mixed_precision)
    runs = engine
    if engine == "auto":
        runs = "fused"
        if device_type == "cuda":  # elsewhere the triton package is not even imported
            from hornn_dist.models import triton_scan
            from hornn_dist.models.triton_tiles import tiles_error

            tiles = tiles_error()
            if tiles is not None and strict:
                raise ConfigError(tiles)
            runs = auto_engine(device_type, autocast_dtype is not None, batch, hidden)
            if runs == "triton" and triton_scan.unavailable_reason(device) is not None:
                runs = "fused"
    elif engine == "triton" and device is not None:
        from hornn_dist.models import triton_scan

        reason = triton_scan.unavailable_reason(device)
        if reason is not None and strict:
            raise ConfigError(reason)
        if reason is not None:  # the same function: e.g. a model trained on a GPU, run on a CPU
            warnings.warn(f"{reason}; running engine 'fused' instead", stacklevel=2)
            runs = "fused"
    return LayerPlan(runs, engine, precision, device_type, autocast_dtype)


def plan_for(
    cfg: ModelConfig,
    device: torch.device | str | None = None,
    batch: int = 1,
    mixed_precision: str = "no",
    *,
    strict: bool = True,
) -> LayerPlan:
    """Return the plan of cfg's HORNN layers (see `resolve_plan`); for the torch.nn baselines,
    which have no such layer, the plan without a device check. Engine "auto" runs only an engine
    with a kernel for cfg's pooling (the fused one, else the first it lists)."""
    plan = resolve_plan(
        cfg.engine,
        cfg.recurrence_precision,
        cfg.hidden_size,
        device if cfg.arch == "hornn" else None,
        batch,
        mixed_precision,
        strict=strict,
        keys=("model.engine", "model.recurrence_precision"),
    )
    kernels = get_pooling(cfg.pooling).engines
    if cfg.arch == "hornn" and plan.engine not in kernels:
        plan = replace(plan, engine="fused" if "fused" in kernels else kernels[0])
    return plan


def checked_plan(cfg: ModelConfig, plan: LayerPlan | None = None) -> LayerPlan:
    """Return `plan`, refused (ValueError) unless it is for cfg's engine and precision; None:
    cfg's plan without a device check (`plan_for`)."""
    if plan is None:
        return plan_for(cfg)
    if (plan.configured, plan.precision) != (cfg.engine, cfg.recurrence_precision):
        raise ValueError(
            f"the plan is for engine {plan.configured!r}, precision {plan.precision!r}; "
            f"the config has {cfg.engine!r}, {cfg.recurrence_precision!r}"
        )
    return plan
