"""Optimiser pieces of §4: SGD with momentum and weight decay, gradient clipping, and the lr schedules."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

import torch

from hornn_dist.config import MAX_LR, OptimConfig
from hornn_dist.models.config import ModelConfig
from hornn_dist.models.poolings import get_pooling
from hornn_dist.run.on_resume import SCHEDULE, keys_of
from hornn_dist.util.wording import counted

# clip_mode "auto": the recipe's clip, the gradient's global norm, chosen by validation on the
# bundled corpus and checked at H 400 (docs/training.md, "The default recipe"). 1 leaves the usual step
# (norms 0.4-0.9) whole and bounds the spikes that made the paper's element-wise 5 diverge at
# H 400; an unweighted sum of several feedback paths (`sum` pooling, order >= 2) went above the
# vocabulary's perplexity at H 400 under 1 and trained there under 0.5 (better than 0.25)
AUTO_CLIP_NORM = {"summed paths": 0.5, "other": 1.0}
CONVERGED = "converged"  # how a stop reason of the stopping rule begins (its stop code too)


def resolve_clip(model: ModelConfig, cfg: OptimConfig) -> OptimConfig:
    """Return cfg with clip_mode "auto" resolved to the recipe's clip for `model`; else cfg."""
    if cfg.clip_mode != "auto":
        return cfg
    summed = model.arch == "hornn" and get_pooling(model.pooling).summed and model.order > 1
    return replace(
        cfg, clip_mode="norm", clip=AUTO_CLIP_NORM["summed paths" if summed else "other"]
    )


def build_optimizer(
    model: torch.nn.Module, cfg: OptimConfig, fused: bool = False
) -> torch.optim.SGD:
    """Return SGD with the configured lr, momentum and weight decay over all model parameters.

    fused: torch's fused SGD, one kernel that also takes a GradScaler's overflow flag as a
    tensor and skips an overflowing step on the device (no host sync, so a CUDA graph can hold
    it). Its momentum buffers start at zero, which gives the same first step as SGD's copy of
    the gradient and leaves nothing uninitialised when that first step is skipped.
    """
    sgd = torch.optim.SGD(
        model.parameters(),
        lr=cfg.lr,
        momentum=cfg.momentum,
        weight_decay=cfg.weight_decay,
        fused=fused or None,
    )
    if fused and cfg.momentum:
        for group in sgd.param_groups:
            for param in group["params"]:
                sgd.state[param]["momentum_buffer"] = torch.zeros_like(param)
    return sgd


def build_optimization(
    model: torch.nn.Module, cfg: OptimConfig, fused: bool = False
) -> tuple[torch.optim.SGD, LrSchedule]:
    """Return the run's SGD (`build_optimizer`) and the lr schedule that drives its lr: the one
    owner of the lr, built with the optimizer from one config."""
    optimizer = build_optimizer(model, cfg, fused)
    return optimizer, LrSchedule.from_config(cfg).drive(optimizer)


def keep_fused(optimizer: torch.optim.Optimizer, fused: bool) -> None:
    """Set every parameter group's `fused` to the run's choice after a checkpoint's state was
    loaded (a state dict carries the saving run's; fp16 needs fused SGD, other runs not)."""
    for group in optimizer.param_groups:
        group["fused"] = fused or None


def clip_gradients(parameters: list[torch.nn.Parameter], cfg: OptimConfig) -> None:
    """Clip gradients in place: element-wise hard clipping (`value`, §4) or by global L2 norm
    (cfg resolved by `resolve_clip`)."""
    if cfg.clip_mode == "auto":
        raise ValueError('clip_mode "auto" must be resolved first: training.optim.resolve_clip')
    if cfg.clip <= 0:
        return
    if cfg.clip_mode == "value":
        torch.nn.utils.clip_grad_value_(parameters, cfg.clip)
    else:
        torch.nn.utils.clip_grad_norm_(parameters, cfg.clip)


# LrSchedule's fields that are not its state: its config, its optimizer, the warmup's share
NOT_STATE = ("cfg", "optimizer", "warmup")


@dataclass
class LrSchedule:
    """The lr recipes of §4 and rnnlm's, stepped once per epoch with that epoch's validation loss,
    and the rule that says when such a run has converged.

    plateau: halve the lr whenever the validation loss did not decrease from the
    previous epoch's (PTB), or with `halve_below` > 0 whenever it decreased by less than that
    fraction; with `halve_patience` k > 1, only once k epochs in a row did so (then the count
    starts again).
    fixed_then_halve: keep the lr for `halve_after` epochs, then halve it after every epoch (text8).
    newbob: as plateau until the first halving, then halve after every epoch (Mikolov's rnnlm,
    the "NewBob" rule of speech recognition): the fixed phase ends when validation says so.
    The lr never goes below `min_lr`.
    The schedule owns the lr: bound to an optimizer (`build_optimization`, or `drive`), every
    change of its lr (an epoch's end, a restored state, a resume's new optim.lr) is set on that
    optimizer's parameter groups at once, so no caller copies it over.
    Convergence (`stop_improvement` > 0): once the lr has been halved, `stop_patience` epochs
    in a row that each lower the validation loss by less than that fraction end the run, as
    does a halving due at `min_lr` (the stopping rule of Mikolov's rnnlm, which the paper's PTB
    and text8 recipes come from, is patience 1). With `halve_before_stop`, such a streak ends
    the run only when the lr was halved during it: a streak all at one lr halves the lr instead
    and goes on, so a run stops when a lower lr no longer helps.
    """

    # the [optim] section it follows: its keys of way `schedule` (on_resume.py), cfg.lr the lr
    # it starts at; a resume's changed keys are `follow`ed
    cfg: OptimConfig
    lr: float  # the current lr
    previous_valid: float = float("inf")
    epochs_done: int = 0
    halvings: int = 0
    plateau_epochs: int = 0  # epochs in a row that failed plateau's test, since the last halving
    small_epochs: int = 0  # epochs in a row, after a halving, under stop_improvement
    epoch_lr: float = 0.0  # the lr the last finished epoch trained at
    streak_lr: float = 0.0  # the lr the first of those `small_epochs` trained at (0: none)
    stopped: str = ""  # why the run converged; empty while it trains
    # the warmup's share of `lr` at the step about to train (`start_step`): derived from the
    # step, so not state
    warmup: float = field(default=1.0, repr=False, compare=False)
    # the optimizer whose lr this schedule sets (`drive`); not state: the state dict holds numbers
    optimizer: torch.optim.Optimizer | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_config(cls, cfg: OptimConfig) -> LrSchedule:
        """Return the schedule of cfg at its initial lr."""
        return cls(cfg, cfg.lr)

    def drive(self, optimizer: torch.optim.Optimizer) -> LrSchedule:
        """Own `optimizer`'s lr from now on (set to this schedule's at once); return self."""
        self.optimizer = optimizer
        self._push()
        return self

    def set_lr(self, lr: float) -> None:
        """Set the current lr (a resume's changed optim.lr): the schedule halves on from it."""
        self.lr = lr
        self._push()

    @property
    def step_lr(self) -> float:
        """Return the lr the optimizer steps at: the schedule's lr times the warmup's share."""
        return self.lr * self.warmup

    def start_step(self, step: int) -> None:
        """Set the optimizer's lr for training step `step` (1-based): during the first
        `warmup_steps` steps the lr rises linearly, lr * step / warmup_steps, then it is `lr`."""
        warmup = self.cfg.warmup_steps
        share = min(1.0, step / warmup) if warmup > 0 else 1.0
        if share != self.warmup:
            self.warmup = share
            self._push()

    def _push(self) -> None:
        """Set the lr on every parameter group of the optimizer this schedule drives."""
        for group in self.optimizer.param_groups if self.optimizer is not None else ():
            group["lr"] = self.step_lr

    def end_epoch(self, valid_loss: float) -> float:
        """Record one finished epoch and its validation loss; return the lr for the next epoch
        (`stopped` says why when the run has converged)."""
        self.epochs_done += 1
        self.epoch_lr = self.lr
        improvement = relative_improvement(self.previous_valid, valid_loss)
        cfg = self.cfg
        if cfg.schedule == "newbob" and self.halvings > 0:
            halve = True
        elif cfg.schedule == "fixed_then_halve":
            halve = self.epochs_done >= cfg.halve_after
        else:  # plateau, or newbob before its first halving
            if cfg.halve_below > 0:
                failed = improvement < cfg.halve_below
            else:
                failed = valid_loss >= self.previous_valid
            self.plateau_epochs = self.plateau_epochs + 1 if failed else 0
            halve = self.plateau_epochs >= cfg.halve_patience
            if halve:
                self.plateau_epochs = 0
        self.previous_valid = valid_loss
        if cfg.stop_improvement > 0:
            halve = self._judge_convergence(improvement, halve)
        if halve:  # also at a stop, so that a resume under a longer patience goes on as it would
            self._halve()
        self._push()
        return self.lr

    def _halve(self) -> None:
        """Halve the lr: never below min_lr, nor raised to it from a lower lr."""
        self.lr = max(self.lr / 2, min(self.cfg.min_lr, self.lr))
        self.halvings += 1

    def _judge_convergence(self, improvement: float, halve: bool) -> bool:
        """Set `stopped` to why the run has converged after this epoch ("" when it goes on);
        return whether to halve the lr (`halve_before_stop` turns a stop into a halving)."""
        cfg = self.cfg
        small = self.halvings > 0 and improvement < cfg.stop_improvement
        self.small_epochs = self.small_epochs + 1 if small else 0
        if not small:
            self.streak_lr = 0.0
        elif self.small_epochs == 1:
            self.streak_lr = self.epoch_lr
        self.stopped = ""
        if small and self.small_epochs >= cfg.stop_patience:
            if not cfg.halve_before_stop or self._streak_was_halved():
                self.stopped = (
                    f"{CONVERGED}: epoch {self.epochs_done} lowered the validation loss by "
                    f"{improvement:.3%}, under optim.stop_improvement = "
                    f"{cfg.stop_improvement:g} ({counted(self.small_epochs, 'epoch')} in a row, "
                    f"optim.stop_patience = {cfg.stop_patience}), after "
                    f"{self.halvings} lr halving(s)"
                )
                return halve
            halve = True  # halve_before_stop: a lower lr gets its try before the run ends
        if halve and self.lr <= cfg.min_lr:
            self.stopped = (
                f"{CONVERGED}: epoch {self.epochs_done} called for halving an lr already at "
                f"optim.min_lr = {cfg.min_lr:g}"
            )
        return halve

    def _streak_was_halved(self) -> bool:
        """Whether an epoch of the current streak of small improvements trained at a lower lr
        than its first one."""
        return self.epoch_lr < self.streak_lr

    def state_dict(self) -> dict:
        """Return the schedule's state as plain values: the lr, the [optim] keys it follows (of
        way `schedule`) and its record of the epochs (the optimizer it drives is not state)."""
        record = [f.name for f in fields(self) if f.name not in NOT_STATE]
        followed = keys_of(self.cfg, SCHEDULE)
        return {
            "lr": self.lr,
            **{key: getattr(self.cfg, key) for key in followed},
            **{name: getattr(self, name) for name in record if name != "lr"},
        }

    @classmethod
    def state_problem(cls, state: dict, epochs: int) -> tuple[str, str] | None:
        """Return what is wrong with a saved schedule state (`state_dict()`'s values) of a run
        that finished `epochs` epochs, as (its key, what is wrong), or None when it can be
        loaded: every value of the record there, of its type and in its range, and the [optim]
        keys it follows as `optim` would take them."""
        if not state:
            return "", "is missing or empty: the checkpoint has no lr schedule"
        whole = {
            "epochs_done": epochs,  # one per epoch end
            "plateau_epochs": epochs,
            "small_epochs": epochs,
            "halvings": 2 * epochs,  # an epoch's own, and one a resume's stop rule may add
        }
        for key, most in whole.items():
            value = state.get(key)
            if not _is_whole(value) or not 0 <= value <= most:
                return (
                    key,
                    f"must be a whole number from 0 to {most} ({epochs} epochs done), got {value!r}",
                )
        lrs = {"lr": "a number > 0", "epoch_lr": "a number >= 0", "streak_lr": "a number >= 0"}
        for key, what in lrs.items():
            value = state.get(key)
            low_ok = _is_real(value) and (value > 0 if key == "lr" else value >= 0)
            if not low_ok or value > MAX_LR:
                return (
                    key,
                    f"must be {what} and at most {MAX_LR:g} (optim.lr's range), got {value!r}",
                )
        previous = state.get("previous_valid")
        if not _is_real(previous, infinite=True) or previous < 0:
            return "previous_valid", f"must be a loss >= 0 (or Infinity), got {previous!r}"
        if not isinstance(state.get("stopped"), str):
            return "stopped", f"must be a string, got {state.get('stopped')!r}"
        defaults = OptimConfig()
        followed = {key: state[key] for key in keys_of(defaults, SCHEDULE) if key in state}
        for key, value in followed.items():
            default = getattr(defaults, key)
            if isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, int):
                ok = _is_whole(value)
            elif isinstance(default, float):
                ok = _is_real(value)
            else:
                ok = isinstance(value, type(default))
            if not ok:
                return key, f"must be a {type(default).__name__}, as optim.{key} is, got {value!r}"
        try:
            replace(defaults, **followed).validate()
        except ValueError as err:  # ConfigError, naming the optim key
            return "", f"holds an [optim] setting out of range: {err}"
        return None

    def load_state_dict(self, state: dict) -> None:
        """Restore the schedule's state from `state_dict()`'s values (a key it lacks stays)."""
        followed = keys_of(self.cfg, SCHEDULE)
        self.cfg = replace(self.cfg, **{key: state[key] for key in followed if key in state})
        for f in fields(self):  # the optimizer it drives stays
            if f.name not in NOT_STATE and f.name in state:
                setattr(self, f.name, state[f.name])
        self._push()

    def follow(self, cfg: OptimConfig) -> None:
        """Follow cfg's keys from now on (a resume's changed [optim]): the lr and the record of
        the epochs stay, the stop is judged again (afresh under another stop_improvement)."""
        if cfg.stop_improvement != self.cfg.stop_improvement:
            self.stopped = ""
        self.cfg = cfg
        self.judge_stop_again()

    def judge_stop_again(self) -> None:
        """Clear `stopped` when it was a small-improvement stop that this rule no longer
        reaches: `stop_patience` is longer, or `halve_before_stop` wants a lower lr tried first
        (halved here, as the epoch would have); a min_lr stop stands."""
        if not self.stopped or self.lr <= self.cfg.min_lr:
            return
        if self.small_epochs < self.cfg.stop_patience:
            self.stopped = ""
        elif self.cfg.halve_before_stop and not self._streak_was_halved():
            self.stopped = ""
            if self.lr >= self.epoch_lr:  # the stop epoch did not halve on its own
                self._halve()
                self._push()


def _is_whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object, infinite: bool = False) -> bool:
    """Return whether `value` is a JSON number (not a bool) that is finite, or infinite where
    `infinite` allows; never NaN."""
    if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
        return False
    return infinite or math.isfinite(value)


def relative_improvement(previous: float, current: float) -> float:
    """Return the fraction by which `current` lowers `previous` (inf after the first epoch)."""
    if not math.isfinite(previous):
        return math.inf
    return (previous - current) / abs(previous) if previous else 0.0
