"""When the loop logs, validates, checkpoints and looks for a stop signal: decided per step here.

The loop asks once per step, before running it, and does what the answer says after it:

    step k (1-based)   log         validate (mid-epoch)   checkpoint            stop check
    k % log.every      yes         -                      -                     yes (several processes)
    k % eval_every     -           yes, then checkpoint   (by the validation)   -
    k % ckpt_every     -           -                      yes                   -
    every step         -           -                      -                     yes (one process)

The end of an epoch validates and checkpoints on its own (the lr schedule steps there), so the
mid-epoch rules skip the epoch's last step. With several processes the stop flag is agreed by
an all-reduce that waits for the device; it runs at the logging cadence, where the loop waits
for the device anyway (the logged loss), so a stop signal is honoured within `log.every` steps.
One process reads its own flag every step at no cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from hornn_dist.config import RunConfig


@dataclass(frozen=True)
class AfterStep:
    """What the loop does once step k has run."""

    log: bool  # log the train loss, speed and gradient norms (measured during the step)
    validate: bool  # validate mid-epoch, then checkpoint
    save: bool  # checkpoint without validating
    check_stop: bool  # look for a stop signal (SIGTERM/SIGINT on any rank)


@dataclass(frozen=True)
class Cadence:
    """The every-N-steps settings of a run and the number of processes."""

    log_every: int
    eval_every: int = 0
    checkpoint_every: int = 0
    processes: int = 1

    @classmethod
    def from_config(cls, cfg: RunConfig, processes: int) -> Cadence:
        """Return the cadence of a run config with `processes` processes."""
        return cls(cfg.log.every, cfg.train.eval_every, cfg.train.checkpoint_every, processes)

    def after(self, step: int, epoch_end: bool) -> AfterStep:
        """Return what follows step `step` (1-based); `epoch_end`: it is its epoch's last step."""
        log = step % self.log_every == 0
        validate = bool(self.eval_every) and step % self.eval_every == 0 and not epoch_end
        save = (
            not validate
            and bool(self.checkpoint_every)
            and step % self.checkpoint_every == 0
            and not epoch_end
        )
        return AfterStep(log, validate, save, check_stop=self.processes == 1 or log)
