"""How a resume treats a config key changed since the checkpoint: metadata on the key's field.

A config dataclass says it where it declares the key (`lr: float = on_resume(LR, 0.5)`) and
run/resume.py reads it (`keys_of`, `ways_of`), so a new key is its field alone, its way included:

    match      must equal the checkpoint's, or the resume is refused (train.batch_size); every
               [model] key not declared otherwise is one: it shapes the weights
    execution  the same parameters computed another way (model.engine): applied and named
    lr         becomes the lr schedule's current lr, which halves on from it
    schedule   into the restored lr schedule, which holds it (training/optim.py, LrSchedule)
    optimizer  into the optimizer's parameter groups
    step       read from the config at every step: it applies as it is
    start      used where a run starts (train.seed): a change is named and has no effect

Keys without a way (most of [train], [data], [log]) apply as they are, unnamed.
"""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any

MATCH, EXECUTION, LR, SCHEDULE, OPTIMIZER, STEP, START = (
    "match",
    "execution",
    "lr",
    "schedule",
    "optimizer",
    "step",
    "start",
)
WAYS = (MATCH, EXECUTION, LR, SCHEDULE, OPTIMIZER, STEP, START)
KEY = "on_resume"  # the name in a field's metadata


def on_resume(way: str, default: Any) -> Any:
    """Return a dataclass field of `default` that a resume treats `way` (one of WAYS)."""
    if way not in WAYS:
        raise ValueError(f"on_resume way must be one of {', '.join(WAYS)}, got {way!r}")
    return field(default=default, metadata={KEY: way})


def ways_of(cls: Any) -> dict[str, str]:
    """Return each field of dataclass `cls` (or of its instance) and how a resume treats it
    ("" where it declares no way), in field order."""
    return {f.name: f.metadata.get(KEY, "") for f in fields(cls)}


def keys_of(cls: Any, way: str) -> tuple[str, ...]:
    """Return the fields of dataclass `cls` (or of its instance) that a resume treats `way`."""
    return tuple(f.name for f in fields(cls) if f.metadata.get(KEY) == way)
