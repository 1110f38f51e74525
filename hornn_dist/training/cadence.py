"""What follows each training step, and when an epoch and a run end: decided per step here.

The loop asks once per step, before running it, and does what the answer says after it:

    step k (1-based)        end epoch   log   validate (mid-epoch)   checkpoint   stop check
    k % steps_per_epoch     yes         -     (the epoch end's)      (its own)    yes
    k % log.every           -           yes   -                      -            yes
    k % eval_every          -           -     yes, then checkpoint   (by it)      -
    k % checkpoint_every    -           -     -                      yes          -
    k % stop_every          -           -     -                      -            yes
    every step, 1 process   -           -     -                      -            yes

The end of an epoch validates, steps the lr schedule and checkpoints, so the mid-epoch rules
skip it. The run ends after step k when k reaches `train.max_steps` or the last epoch's end
(`end_reason`), whatever else step k does; the schedule may also end it at an epoch end
(converged), and a stop signal after any stop check.

With several processes the stop flag is agreed by an all-reduce that waits for the device, so
it is not done every step: every step until the loop has timed its steps (the first
STOP_WARMUP_STEPS + STOP_TIMED_STEPS of each launch), then every `stop_every` steps, about
STOP_CHECK_S seconds of training (the same number on every rank), and at every log step and
epoch end, where the loop waits for the device anyway. A stop signal is honoured within about
STOP_CHECK_S seconds (at least one step) whatever `log.every` is.
One process reads its own flag every step at no cost.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from hornn_dist.config import RunConfig
from hornn_dist.util.wording import counted

STOP_CHECK_S = 5.0  # the longest a signalled multi-process run trains on (plus one step)
STOP_WARMUP_STEPS = 5  # first steps not timed (CUDA graph capture, allocator warm-up)
STOP_TIMED_STEPS = 10  # then steps timed, each ended by a stop check, to set stop_every


@dataclass(frozen=True)
class AfterStep:
    """What the loop does once step k has run."""

    log: bool  # log the train loss, speed and gradient norms (measured during the step)
    validate: bool  # validate mid-epoch, then checkpoint
    save: bool  # checkpoint without validating
    check_stop: bool  # look for a stop signal (SIGTERM/SIGINT on any rank)
    end_epoch: bool = False  # the epoch's last batch: validate, step the lr schedule, checkpoint
    end_run: bool = False  # train.max_steps or the last epoch reached: the run ends after it


@dataclass(frozen=True)
class Cadence:
    """The every-N-steps settings of a run, its length and the number of processes."""

    log_every: int
    eval_every: int = 0
    checkpoint_every: int = 0
    processes: int = 1
    steps_per_epoch: int = 0  # 0: no epoch ends (a table without epochs)
    epochs: int = 0  # 0 with steps_per_epoch: no limit
    max_steps: int = 0  # 0: no limit
    stop_every: int = 1  # several processes: steps between stop checks (besides log, epoch end)

    @classmethod
    def from_config(cls, cfg: RunConfig, processes: int, steps_per_epoch: int) -> Cadence:
        """Return the cadence of a run config with `processes` processes."""
        train = cfg.train
        return cls(
            cfg.log.every,
            train.eval_every,
            train.checkpoint_every,
            processes,
            steps_per_epoch,
            train.epochs,
            train.max_steps,
        )

    @property
    def total_steps(self) -> int:
        """Return the number of steps the run trains unless it converges or is stopped."""
        total = self.steps_per_epoch * self.epochs
        return min(total, self.max_steps) if self.max_steps else total

    def position(self, step: int) -> tuple[int, int]:
        """Return (epoch, batch) of step `step`, both 1-based: the epoch it trains in and its
        batch there ((1, step) for a run without epochs)."""
        if not self.steps_per_epoch:
            return 1, step
        epoch, batch = divmod(step - 1, self.steps_per_epoch)
        return epoch + 1, batch + 1

    def steps_left(self, step: int) -> tuple[int, int | None]:
        """Return the steps after step `step` to the end of its epoch and to the run's end
        (train.epochs or train.max_steps, whichever comes first; None without either)."""
        run = max(self.total_steps - step, 0) if self.total_steps else None
        epoch = self.steps_per_epoch - self.position(step)[1] if self.steps_per_epoch else 0
        return (epoch if run is None else min(epoch, run)), run

    def end_reason(self, step: int) -> str:
        """Return why the run ends after step `step` (max_steps, then epochs), else ""."""
        if self.max_steps and step >= self.max_steps:
            return f"reached train.max_steps = {self.max_steps}"
        if self.epochs and step >= self.steps_per_epoch * self.epochs:
            return f"trained train.epochs = {counted(self.epochs, 'epoch')}"
        return ""

    def end_code(self, step: int) -> str:
        """Return `end_reason`'s code: "max_steps", "epochs", or "" while the run goes on."""
        if self.max_steps and step >= self.max_steps:
            return "max_steps"
        return "epochs" if self.epochs and step >= self.steps_per_epoch * self.epochs else ""

    def after(self, step: int) -> AfterStep:
        """Return what follows step `step` (1-based)."""
        epoch_end = bool(self.steps_per_epoch) and step % self.steps_per_epoch == 0
        log = step % self.log_every == 0
        validate = bool(self.eval_every) and step % self.eval_every == 0 and not epoch_end
        save = (
            not validate
            and bool(self.checkpoint_every)
            and step % self.checkpoint_every == 0
            and not epoch_end
        )
        check_stop = self.processes == 1 or log or epoch_end or step % self.stop_every == 0
        return AfterStep(log, validate, save, check_stop, epoch_end, bool(self.end_reason(step)))

    def with_step_time(self, seconds_per_step: float) -> Cadence:
        """Return this cadence checking for a stop about every STOP_CHECK_S seconds of steps
        that take `seconds_per_step` (pass the same value on every rank)."""
        if not math.isfinite(seconds_per_step) or seconds_per_step <= 0:
            return self
        return dataclasses.replace(self, stop_every=max(1, int(STOP_CHECK_S / seconds_per_step)))
