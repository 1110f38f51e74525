"""Where a run starts: its output folder locked, the checkpoint to resume from, or a finished run.

Each decision is made on the main process (it reads and verifies the files) and handed to every
rank, so all ranks resume from the same checkpoint or stop with the same error.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from hornn_dist import checkpoint as ckpt
from hornn_dist.config import RunConfig
from hornn_dist.data.shards import Corpus
from hornn_dist.errors import CheckpointError, ConfigError
from hornn_dist.training.metrics import perplexity
from hornn_dist.training.optim import stop_stands
from hornn_dist.training.run_lock import RunLock
from hornn_dist.training.scoring import EvalResult
from hornn_dist.wording import counted

logger = logging.getLogger("hornn_dist.train")


def from_main(accelerator: Any, value: Any) -> Any:
    """Return the main process's `value` on every rank."""
    if accelerator.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value], from_process=0)[0]


def take_run_folder(accelerator: Any, lock: RunLock, out: Path) -> None:
    """Lock output_dir for this run (main process) and clear a killed save's leftovers; raise
    the same ConfigError on every rank when another run holds the folder."""
    error = ""
    if accelerator.is_main_process:
        try:
            lock.acquire()
        except ConfigError as err:
            error = str(err)
        else:
            for stale in ckpt.remove_partial_saves(out):
                logger.info("removed %s, left by a save that did not finish", stale)
    error = from_main(accelerator, error)
    if error:
        raise ConfigError(error)


def find_resume_point(accelerator: Any, out: Path, resume_from: str | None) -> Path | None:
    """Return the checkpoint to resume from: the one given (it must verify), else the newest
    of `out` that verifies, else None; the same on every rank."""
    found, error = "", ""
    if accelerator.is_main_process:
        try:
            if resume_from is not None:
                folder = ckpt.resolve_checkpoint(resume_from)
                ckpt.verify(folder)
            else:
                folder = ckpt.newest_verified(out)
            found = str(folder) if folder is not None else ""
        except CheckpointError as err:
            error = str(err)
    found, error = from_main(accelerator, (found, error))
    if error:
        raise CheckpointError(error)
    return Path(found) if found else None


def completion(state: dict[str, Any], cfg: RunConfig) -> dict[str, Any]:
    """Return the config keys whose end a checkpoint's trainer state reached with its test
    result stored ({"train.epochs": 15}, ...); empty when the run has training left to do."""
    train = cfg.train
    try:
        EvalResult.from_record(state.get("test") or {})
        step, epoch = int(state["step"]), int(state["epoch"])
    except (KeyError, TypeError, ValueError):  # no result stored (stopped, or older)
        return {}
    done: dict[str, Any] = {"train.epochs": train.epochs} if epoch >= train.epochs else {}
    if train.max_steps and step >= train.max_steps:
        done["train.max_steps"] = train.max_steps
    schedule = state.get("schedule")
    converged = stop_stands(schedule, cfg.optim, state.get("valid_history")) if schedule else False
    if converged and cfg.optim.stop_improvement > 0:
        done["optim.stop_improvement"] = cfg.optim.stop_improvement
    return done


def test_source(state: dict[str, Any]) -> str:
    """Return which weights a trainer state's `test` result scored, in words."""
    name = state.get("test_checkpoint")
    if name:
        return f"the best checkpoint by validation ({name})"
    return "the last weights (a run recorded before the best checkpoint was scored)"


def stored_result(folder: Path, cfg: RunConfig, corpus: Corpus) -> EvalResult | None:
    """Return the test result stored in `folder` when its run is complete under `cfg` (epochs
    or max_steps done), after saying so; None when there is training left to do."""
    state = ckpt.read_trainer_state(folder)
    done = completion(state, cfg)
    if not done:
        return None
    result = EvalResult.from_record(state["test"])
    step = int(state["step"])
    train = cfg.train
    ckpt.check_compatible(folder, cfg, corpus.vocab_hash, corpus.content_hash)  # same data
    best = float(state.get("best_valid", math.inf))
    logger.info(
        "the run in %s is complete at step %d (%s): %s",
        train.output_dir,
        step,
        folder,
        state.get("stop_reason")
        or " and ".join(f"{key} = {value} reached" for key, value in done.items()),
    )
    logger.info(
        "test: %s predicted tokens, loss %.4f, ppl %.2f on %s%s",
        f"{result.tokens:,}",
        result.loss,
        result.ppl,
        test_source(state),
        f"; best valid loss {best:.4f}, ppl {perplexity(best, 1):.2f} "
        f"({state.get('best_checkpoint', '')})"
        if math.isfinite(best)
        else "",
    )
    logger.info(
        "nothing to train: %s to train on, or add --no-resume to start over",
        " and ".join(_train_on(key, value, state) for key, value in done.items()),
    )
    return result


def _train_on(key: str, value: Any, state: dict[str, Any]) -> str:
    """Return what to change to train a complete run on: what it did, and the key to raise."""
    if key == "train.epochs":
        epochs = int(state["epoch"])
        return f"the run trained {counted(epochs, 'epoch')}; raise train.epochs above {epochs}"
    if key == "train.max_steps":
        steps = int(state["step"])
        return f"the run took {counted(steps, 'step')}; raise train.max_steps above {steps}"
    return f"the run converged; set {key} = 0 (now {value})"
