"""Optimiser pieces of §4: SGD with momentum and weight decay, gradient clipping, and the lr schedules."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch

from hornn_dist.config import OptimConfig


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.SGD:
    """Return SGD with the configured lr, momentum and weight decay over all model parameters."""
    return torch.optim.SGD(
        model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
    )


def clip_gradients(parameters: list[torch.nn.Parameter], cfg: OptimConfig) -> None:
    """Clip gradients in place: element-wise hard clipping (`value`, §4) or by global L2 norm."""
    if cfg.clip <= 0:
        return
    if cfg.clip_mode == "value":
        torch.nn.utils.clip_grad_value_(parameters, cfg.clip)
    else:
        torch.nn.utils.clip_grad_norm_(parameters, cfg.clip)


@dataclass
class LrSchedule:
    """The two lr recipes of §4, stepped once per epoch with that epoch's validation loss.

    plateau: halve the lr whenever the validation loss did not decrease from the
    previous epoch's (PTB).
    fixed_then_halve: keep the lr for `halve_after` epochs, then halve it after every epoch (text8).
    The lr never goes below `min_lr`.
    """

    lr: float
    schedule: str
    halve_after: int
    min_lr: float
    previous_valid: float = float("inf")
    epochs_done: int = 0

    @classmethod
    def from_config(cls, cfg: OptimConfig) -> LrSchedule:
        """Return the schedule at its initial lr."""
        return cls(lr=cfg.lr, schedule=cfg.schedule, halve_after=cfg.halve_after, min_lr=cfg.min_lr)

    def end_epoch(self, valid_loss: float) -> float:
        """Record one finished epoch and its validation loss; return the lr for the next epoch."""
        self.epochs_done += 1
        if self.schedule == "plateau":
            halve = valid_loss >= self.previous_valid
        else:
            halve = self.epochs_done >= self.halve_after
        self.previous_valid = valid_loss
        if halve:  # never below min_lr, and never raised to it when the lr started lower
            self.lr = max(self.lr / 2, min(self.min_lr, self.lr))
        return self.lr

    def apply(self, optimizer: torch.optim.Optimizer) -> None:
        """Set the current lr on every parameter group."""
        for group in optimizer.param_groups:
            group["lr"] = self.lr

    def state_dict(self) -> dict:
        """Return the schedule's state as plain values."""
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        """Restore the schedule's state."""
        for key, value in state.items():
            setattr(self, key, value)


# How a resume applies an [optim] key the config changed since the checkpoint (besides `lr`):
SCHEDULE_KEYS = ("min_lr", "schedule", "halve_after")  # into the restored schedule
OPTIMIZER_KEYS = ("momentum", "weight_decay")  # into the optimizer's parameter groups
STEP_KEYS = ("clip", "clip_mode", "max_col_norm")  # read from the config at every step


def apply_changed_settings(
    saved: OptimConfig, cfg: OptimConfig, schedule: LrSchedule, optimizer: torch.optim.Optimizer
) -> list[str]:
    """Apply the [optim] keys where this run's config differs from a checkpoint's (`saved`) to
    the restored schedule and optimizer; return one "optim.key old -> new" note per change.

    A resume restores the lr schedule and the optimizer's settings from the checkpoint; a key
    the config changed since then wins, as nanoGPT takes its lr from the command line on
    resume: `lr` becomes the current lr (the schedule halves on from it), the schedule keeps
    its epochs done and last validation loss. A resume with the same config changes nothing,
    so it stays bit-identical to an uninterrupted run. Call `schedule.apply` afterwards.
    """
    notes = []
    restored_lr = schedule.lr
    for key in (f.name for f in fields(OptimConfig)):
        old, new = getattr(saved, key), getattr(cfg, key)
        if old == new:
            continue
        note = f"optim.{key} {old!r} -> {new!r}"
        if key == "lr":
            schedule.lr = new
            if restored_lr != old:
                note += f" (the schedule had reached {restored_lr:.4g})"
        elif key in SCHEDULE_KEYS:
            setattr(schedule, key, new)
        elif key in OPTIMIZER_KEYS:
            for group in optimizer.param_groups:
                group[key] = new
        notes.append(note)
    return notes
