"""Optimiser pieces of §4: SGD with momentum and weight decay, gradient clipping, and the lr schedules."""

from __future__ import annotations

from dataclasses import asdict, dataclass

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
