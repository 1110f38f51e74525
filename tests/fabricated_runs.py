"""Run folders made without training, for the report's tests.

The product has no writer of a whole checkpoint short of a trained model and an Accelerator
(`checkpoint.save_checkpoint`), so `write_run` writes what its main process writes, each file
through the product's own code where it has one: the weights of a real (tiny) model with
`checkpoint.save_weights`, `config.toml` with `RunConfig.to_toml`, `trainer_state.json` with
`TrainerState.write` (its schedule and validation history made by `LrSchedule.end_epoch`
itself, epoch by epoch, from a validation curve), `checksums.json` with
`checkpoint.write_checksums`, and `DONE` last; and the run's `metrics.jsonl` with
`events.EventLog`: its stop event, which the report reads the stop code from (the other events
are left out: the report reads their numbers from the trainer state). The per-rank files
(random states, stream position) are left out: the report never reads them, and a checkpoint
is complete without them.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict
from pathlib import Path

from hornn_dist.config import RunConfig
from hornn_dist.data.pipeline import corpus_folder
from hornn_dist.models import build_model
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.run_layout import CONFIG_FILE
from hornn_dist.run.run_state import TrainerState
from hornn_dist.training.events import EventLog
from hornn_dist.training.optim import LrSchedule
from hornn_dist.util.files import write_text

STEPS_PER_EPOCH = 10
VOCAB = 50
TOKENS = 1000  # of the valid and test splits


def curve(final_ppl: float, rise_at: int, start_ppl: float = 400.0, tail: int = 12) -> list[float]:
    """Return a validation curve that falls from `start_ppl` to 2% above `final_ppl` by epoch
    `rise_at` - 1, rises 1% at epoch `rise_at` (the plateau rule halves the lr), then creeps
    down by 0.1% an epoch to `final_ppl` (slow epochs: the stopping rule ends the run)."""
    near = final_ppl * 1.02
    fall = [near + (start_ppl - near) * (1 - k / (rise_at - 1)) ** 2 for k in range(rise_at)]
    creep = [final_ppl * (1 + 0.001 * (tail - i)) for i in range(tail + 1)]
    return [*fall, fall[-1] * 1.01, *creep]


def _result(ppl: float) -> dict[str, float]:
    loss = math.log(ppl)
    return {"tokens": TOKENS, "loss_sum": loss * TOKENS, "loss": loss, "ppl": ppl}


def write_run(
    out: Path,
    config: RunConfig,
    valid_ppls: list[float],
    test_ppl: float | None,
    tokens_per_sec: float = 0.0,
    stop_at_convergence: bool = True,
) -> dict:
    """Write one checkpoint of a run into `out` after the epochs of `valid_ppls` (stopping
    earlier where the config's stopping rule does), with the test result `test_ppl` stored
    (None: an unfinished run); return its trainer state as the file holds it."""
    schedule = LrSchedule.from_config(config.optim)
    history, best, best_step = [], math.inf, 0
    for epoch, ppl in enumerate(valid_ppls, 1):
        step = epoch * STEPS_PER_EPOCH
        schedule.end_epoch(math.log(ppl))
        history.append(
            {
                "step": step,
                "epoch": float(epoch),
                "loss": math.log(ppl),
                "ppl": ppl,
                "lr": schedule.lr,
            }
        )
        if math.log(ppl) < best:
            best, best_step = math.log(ppl), step
        if schedule.stopped and stop_at_convergence:
            break
    step = history[-1]["step"]
    model = build_model(config.model, VOCAB)
    state = TrainerState(
        step=step,
        epoch=len(history),
        schedule=schedule.state_dict(),
        best_valid=best,
        best_checkpoint=ckpt.step_dir_name(best_step),
        test=_result(test_ppl) if test_ppl is not None else None,
        test_checkpoint=ckpt.step_dir_name(best_step) if test_ppl is not None else "",
        test_last=_result(test_ppl) if test_ppl is not None else None,
        stop_reason=schedule.stopped or ("" if test_ppl is None else "trained"),
        train_seconds=1.0 * len(history),
        tokens_per_sec=tokens_per_sec,
        hardware="cpu (fabricated)",
        parameters=model.num_parameters(),
        valid_history=history,
        last_valid_step=step,
        vocab_hash="0" * 64,
        # a corpus of its own per data config, as prepared corpora are
        corpus_hash=hashlib.sha256(corpus_folder(config.data).name.encode()).hexdigest(),
    )
    folder = ckpt.checkpoint_root(out) / ckpt.step_dir_name(step)
    folder.mkdir(parents=True)
    ckpt.save_weights(model, folder / ckpt.WEIGHTS, ckpt.model_record(config))
    write_text(folder / CONFIG_FILE, config.to_toml())
    state.write(folder)
    ckpt.write_checksums(folder)
    write_text(folder / ckpt.DONE, f"step {step}\n")
    if state.stop_reason:
        events = EventLog(is_main=True)
        events.open(out)
        events.write("stop", step=step, code=_stop_code(config, schedule, len(history)), signal="")
        events.close()
    return asdict(state)


def _stop_code(config: RunConfig, schedule: LrSchedule, epochs: int) -> str:
    """Return the stop code the trainer writes for a run that ended here: converged, its
    max_steps or epochs reached, else a signal's stop."""
    if schedule.stopped:
        return "converged"
    if config.train.max_steps and epochs * STEPS_PER_EPOCH >= config.train.max_steps:
        return "max_steps"
    return "epochs" if epochs >= config.train.epochs else "signal"
