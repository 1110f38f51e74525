"""Resume: where a run starts, and what a resumed run restores, checks and changes.

The trainer builds its parts for this run's config and registers them in its `Checkpointer`
(run/checkpointer.py), then calls `start_run` once: it starts afresh, or resumes from a
checkpoint (the one given by --resume, else the newest of train.output_dir whose files
verify), or finds the run complete. Each decision is made on the main process (it reads and
verifies the files) and handed to every rank, so all ranks resume from the same checkpoint or
stop with the same error.

Checks, before anything is loaded (each refusal is one line naming the fix):
  - every file of the checkpoint matches its sha256 (checksums.json);
  - its trainer_state.json is of this code's format (`run_state.VERSION`, checked by its
    reader): a run of an older format is finished with the commit that wrote it, or started
    over (--no-resume);
  - each shared part's saved state is one the part takes (the lr schedule's: every value
    there, of its type and in its range; `LrSchedule.state_problem`);
  - the model (`model.*` but the execution keys), the vocabulary, the prepared corpus (unless
    train.allow_corpus_change) and the [train] keys of way `on_resume.MATCH` (batch_size,
    bptt) are the checkpoint's;
  - the checkpoint's step lies within this config's train.epochs;
  - a complete run (its test split scored, and train.epochs, train.max_steps or the stopping
    rule reached under this config) is reported, and nothing is trained or written.

Restores, so that a resume with the same config is bit-identical to an uninterrupted run:
  - the weights, the optimizer's state, each rank's random states and the GradScaler;
  - the trainer state (step, best validation, validation history, training time); the test
    results and stop reason of a run's end are not kept: the resumed run ends again; from
    another run's checkpoint (--resume into a new folder) the best is not kept either: a run's
    best names one of its own checkpoints;
  - the lr schedule (its lr, epochs done, last validation loss, halvings, convergence streak);
  - each rank's stream position and carried hidden state; a checkpoint written by another
    number of processes is re-sliced (elastic resume: every process count reads the same
    global data order).

Changes, each named in the log; each key's way is metadata on its config field
(`hornn_dist/run/on_resume.py`), so a new key needs no list here:
  - model.engine / model.recurrence_precision (their way: `on_resume.EXECUTION`), and the
    number of processes, the mixed precision as it resolves, train.reduce_dtype and the
    device (`computed_otherwise`): the same parameters computed another way, so not
    bit-identical (one log line names them; a resume changing none of them is);
  - an [optim] key the config changed since the checkpoint wins: `lr` becomes the current lr
    (the schedule halves on from it), schedule keys go into the restored schedule (whose stop
    is judged again), momentum and weight decay into the optimizer, the clip keys apply at
    every step;
  - the optimizer's `fused` is this run's choice; a changed train.seed is named and has no
    effect (a resumed run goes on from the checkpoint's weights and random state).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from hornn_dist.config import OptimConfig, RunConfig
from hornn_dist.models.precision import resolve_mixed_precision
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.checkpointer import Checkpointer
from hornn_dist.run.lock import RunLock
from hornn_dist.run.on_resume import (
    EXECUTION,
    LR,
    MATCH,
    OPTIMIZER,
    SCHEDULE,
    START,
    keys_of,
    ways_of,
)
from hornn_dist.run.run_state import STATE_FILE, TrainerState
from hornn_dist.runtime import describe_hardware
from hornn_dist.training.metrics import perplexity
from hornn_dist.training.optim import LrSchedule
from hornn_dist.training.scoring import EvalResult
from hornn_dist.util.errors import CheckpointError, ConfigError
from hornn_dist.util.wording import counted

logger = logging.getLogger("hornn_dist.train")


@dataclass
class Start:
    """How a run starts: afresh (`folder` None), resumed from `folder`, or complete (`result`)."""

    folder: Path | None = None
    state: TrainerState = field(default_factory=TrainerState)  # the loop's progress
    result: EvalResult | None = None  # a complete run's stored test result: nothing to train


def start_run(run: Checkpointer, resume_from: str | None, fresh: bool) -> Start:
    """Return how the run starts, with `run`'s parts restored where it resumes (call on
    every rank); --no-resume (`fresh`) sets a previous run in train.output_dir aside."""
    acc, cfg, corpus = run.accelerator, run.cfg, run.corpus
    if fresh:
        if acc.is_main_process:
            moved = ckpt.set_aside_previous_run(run.out)
            if moved is not None:
                logger.info(
                    "--no-resume: moved the previous run's checkpoints, logs and config to %s",
                    moved,
                )
        return Start()
    folder = find_resume_point(acc, run.out, resume_from)
    if folder is None:
        return Start()
    state = TrainerState.read(folder)
    check_parts(folder, state, run.shared)
    saved = ckpt.read_config(folder)
    ckpt.check_model_record(folder, saved)
    changed = check_compatible(
        folder,
        state,
        saved,
        cfg,
        corpus.vocab_hash,
        corpus.content_hash,
        vocab_size=corpus.vocab_size,
        named=resume_from is not None,
    )
    done = completion(state, cfg)
    if done:
        return Start(folder, state, _report_complete(folder, state, done, cfg))
    changed += computed_otherwise(state, saved, cfg, acc)
    if changed:
        logger.info(
            "resuming with another way to compute the same model (%s): same parameters, "
            "different rounding, so not bit-identical to an uninterrupted run",
            "; ".join(changed),
        )
    _check_within_epochs(folder, state.step, run)
    _restore(run, folder, state)
    _apply_changed_settings(run, saved, state)
    # the run's end is scored and told again when the resumed run ends
    progress = replace(state, test=None, test_checkpoint="", test_last=None, stop_reason="")
    return Start(folder, own_best(progress, folder, run.out))


def own_best(progress: TrainerState, folder: Path, out: Path) -> TrainerState:
    """Return `progress` resumed from checkpoint `folder` into the run folder `out`, its best
    checkpoint by validation one of `out`'s own: a checkpoint of another run carries that
    run's best, a folder `out` does not hold (its test score and `best` would read it), so the
    best starts afresh from this run's own validations."""
    if folder.resolve().parent == ckpt.checkpoint_root(out).resolve():
        return progress
    if progress.best_checkpoint:
        logger.info(
            "%s is another run's checkpoint: its best by validation (%s%s) stays there; "
            "this run's best is chosen from its own checkpoints",
            folder,
            progress.best_checkpoint,
            f", valid loss {progress.best_valid:.4f}" if math.isfinite(progress.best_valid) else "",
        )
    return replace(progress, best_valid=math.inf, best_checkpoint="")


# ---------------------------------------------------------------- where a run starts


def from_main(accelerator: Any, value: Any) -> Any:
    """Return the main process's `value` on every rank."""
    if accelerator.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value], from_process=0)[0]


def take_run_folder(accelerator: Any, lock: RunLock, out: Path) -> None:
    """Lock output_dir for this run (main process), put back a checkpoint a kill left out of
    place and clear a killed save's leftovers; raise the same ConfigError on every rank when
    another run holds the folder."""
    error = ""
    if accelerator.is_main_process:
        try:
            lock.acquire()
        except ConfigError as err:
            error = str(err)
        else:
            for recovered in ckpt.recover_saves(out):
                logger.warning("recovered %s", recovered)
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


# ---------------------------------------------------------------- checks


def check_parts(folder: Path, state: TrainerState, shared: dict[str, Any]) -> None:
    """Raise one CheckpointError naming the file and the field where a shared part's saved
    state (the lr schedule's) is missing, of another type or out of range, before any use: each
    part with a `state_problem` says what it takes (a part missing altogether is refused by
    its load, naming it)."""
    for name, part in shared.items():
        saved, judge = state.part(name), getattr(part, "state_problem", None)
        if saved is None or judge is None:
            continue
        problem = judge(saved, state.epoch)
        if problem is not None:
            key, what = problem
            raise CheckpointError(
                f'{folder / STATE_FILE}: field "{name}{"." + key if key else ""}" {what}; the '
                "file was changed after its save: use another checkpoint of the run (an older "
                "step_N)"
            )


def check_compatible(
    folder: Path,
    state: TrainerState,
    saved: RunConfig,
    cfg: RunConfig,
    vocab_hash: str,
    corpus_hash: str | None = None,
    vocab_size: int | None = None,
    named: bool = False,
) -> list[str]:
    """Raise CheckpointError listing every difference that makes `folder` (its trainer
    `state`, its config `saved`) unusable for this run.

    `corpus_hash` is the prepared corpus's identity (`Corpus.content_hash`): training on another
    corpus than the checkpoint's is a difference unless `train.allow_corpus_change` (logged).
    Another vocabulary is told by its size where `vocab_size` (the data's) is given and the
    weights say theirs; `named`: the checkpoint was given by --resume (the fix then is another
    checkpoint, or none).
    Return the execution keys (`on_resume.EXECUTION`) that differ, as "model.key: old -> new".
    """
    execution = keys_of(cfg.model, EXECUTION)  # every other [model] key shapes the weights
    changed = [
        (key, old, getattr(cfg.model, key))
        for key, old in saved.to_dict()["model"].items()
        if getattr(cfg.model, key) != old
    ]
    diffs = [
        f"model.{key}: checkpoint {old!r} != config {new!r}"
        for key, old, new in changed
        if key not in execution
    ]
    if state.vocab_hash != vocab_hash:
        diffs.append(_vocabulary_difference(folder, state.vocab_hash, vocab_hash, vocab_size))
    elif corpus_hash is not None and state.corpus_hash != corpus_hash:
        if not cfg.train.allow_corpus_change:
            diffs.append(
                f"prepared corpus: checkpoint {state.corpus_hash[:16]} != data "
                f"{corpus_hash[:16]} (the training text changed; to go on training on it, "
                "set train.allow_corpus_change = true)"
            )
        else:
            logger.warning(
                "the training text changed since %s (prepared corpus %s then, %s now): "
                "training resumes from its step %s at the same place in an epoch of the new "
                "text (which must have as many tokens), as train.allow_corpus_change = true "
                "allows",
                folder,
                state.corpus_hash[:16],
                corpus_hash[:16],
                state.step,
            )
    for key in keys_of(cfg.train, MATCH):
        old, new = getattr(saved.train, key), getattr(cfg.train, key)
        if old != new:
            diffs.append(f"train.{key}: checkpoint {old!r} != config {new!r}")
    if diffs:
        fix = (
            "pass --resume a checkpoint of a run with this model and data, or leave --resume out"
            if named
            else "use --no-resume or another train.output_dir"
        )
        raise CheckpointError(f"cannot resume from {folder}: " + "; ".join(diffs) + f" ({fix})")
    return [f"model.{key}: {old!r} -> {new!r}" for key, old, new in changed if key in execution]


def computed_otherwise(
    state: TrainerState, saved: RunConfig, cfg: RunConfig, accelerator: Any
) -> list[str]:
    """Return what this run computes otherwise than the checkpoint's run did, besides the
    execution keys: the number of processes (the same data order, the gradients summed over
    the ranks in another order), the mixed precision as it resolves here, the dtype of the
    gradient all-reduce, the device. Each gives other rounding: a resume is bit-identical to
    an uninterrupted run only where none changed."""
    notes, world = [], accelerator.num_processes
    if state.world_size != world:
        notes.append(
            f"processes: {state.world_size} -> {world} (the same data order; the gradients "
            "summed over the ranks in another order)"
        )
    old, new = saved.train.mixed_precision, cfg.train.mixed_precision
    before = resolve_mixed_precision(old, saved.model.arch).name
    now = resolve_mixed_precision(new, cfg.model.arch).name
    if before != now:
        notes.append(
            f"mixed precision: {before} -> {now} (train.mixed_precision {old!r} -> {new!r})"
        )
    old, new = saved.train.reduce_dtype, cfg.train.reduce_dtype
    if old != new and max(state.world_size, world) > 1:
        notes.append(f"train.reduce_dtype: {old!r} -> {new!r}")
    device = _device_name(describe_hardware(accelerator.device, world))
    if state.hardware and _device_name(state.hardware) != device:
        notes.append(f"device: {_device_name(state.hardware)} -> {device}")
    return notes


def _device_name(hardware: str) -> str:
    """Return the device of a run's hardware line ("1 x NVIDIA H100" -> "NVIDIA H100",
    "AMD EPYC (2 threads)" -> "AMD EPYC"), without its count of processes or threads."""
    count, sep, name = hardware.partition(" x ")
    if sep and count.isdigit():
        return name
    return hardware.split(" (")[0]


def _vocabulary_difference(
    folder: Path, saved_hash: str, data_hash: str, data_size: int | None
) -> str:
    """Return how the checkpoint's vocabulary differs from the data's: by size where the
    weights say theirs, else by hash."""
    saved_size = ckpt.vocab_size_of(folder) if data_size is not None else None
    if saved_size is None:
        return f"vocabulary hash: checkpoint {saved_hash} != data {data_hash}"
    if saved_size != data_size:
        return f"vocabulary: checkpoint {saved_size:,} words != data {data_size:,} words"
    return (
        f"vocabulary: {data_size:,} words in both but other words (hash: checkpoint "
        f"{saved_hash[:16]} != data {data_hash[:16]})"
    )


def _check_within_epochs(folder: Path, step: int, run: Checkpointer) -> None:
    """Raise ConfigError when `folder`'s step lies past this config's train.epochs (a run
    trained with more, resumed without them): it would validate mid-epoch and end."""
    per_epoch, epochs = run.per_rank["stream"].steps_per_epoch, run.cfg.train.epochs
    if step <= per_epoch * epochs:
        return
    in_epoch = math.ceil(step / per_epoch)
    raise ConfigError(
        f"the checkpoint {folder} is at step {step}, in epoch {in_epoch}, past train.epochs "
        f"= {epochs} ({per_epoch * epochs} steps): pass --set train.epochs={in_epoch} (or "
        "more) to train it on, or --no-resume to start over"
    )


def completion(state: TrainerState, cfg: RunConfig) -> dict[str, Any]:
    """Return the config keys whose end a checkpoint's trainer state reached with its test
    result stored ({"train.epochs": 15}, ...); empty when the run has training left to do."""
    train = cfg.train
    try:
        EvalResult.from_record(state.test or {})
    except (KeyError, TypeError, ValueError):  # no result stored (stopped, or not yet ended)
        return {}
    done: dict[str, Any] = {"train.epochs": train.epochs} if state.epoch >= train.epochs else {}
    if train.max_steps and state.step >= train.max_steps:
        done["train.max_steps"] = train.max_steps
    if stop_stands(state.schedule, cfg.optim) and cfg.optim.stop_improvement > 0:
        done["optim.stop_improvement"] = cfg.optim.stop_improvement
    return done


def stop_stands(schedule_state: dict[str, Any], cfg: OptimConfig) -> bool:
    """Return whether a checkpoint's schedule state ended its run under the stopping rule of
    `cfg` (a longer `stop_patience`, or `halve_before_stop` where the run's last streak kept
    one lr, trains it on)."""
    if not schedule_state:
        return False
    schedule = LrSchedule.from_config(cfg)
    schedule.load_state_dict(schedule_state)
    # the two keys that decide whether a stop stands; a resume applies the others it changed
    rule = {"stop_patience": cfg.stop_patience, "halve_before_stop": cfg.halve_before_stop}
    schedule.cfg = replace(schedule.cfg, **rule)
    schedule.judge_stop_again()
    return bool(schedule.stopped)


def _report_complete(
    folder: Path, state: TrainerState, done: dict[str, Any], cfg: RunConfig
) -> EvalResult:
    """Say that the run in `folder` is complete under `cfg` and what to change to train it on;
    return its stored test result."""
    result = EvalResult.from_record(state.test or {})
    best = state.best_valid
    logger.info(
        "the run in %s is complete at step %d (%s): %s",
        cfg.train.output_dir,
        state.step,
        folder,
        state.stop_reason
        or " and ".join(f"{key} = {value} reached" for key, value in done.items()),
    )
    logger.info(
        "test: %s predicted tokens, loss %.4f, ppl %.2f on %s%s",
        f"{result.tokens:,}",
        result.loss,
        result.ppl,
        f"the best checkpoint by validation ({state.test_checkpoint})",
        f"; best valid loss {best:.4f}, ppl {perplexity(best, 1):.2f} ({state.best_checkpoint})"
        if math.isfinite(best)
        else "",
    )
    logger.info(
        "nothing to train: %s to train on, or add --no-resume to start over",
        " and ".join(_train_on(key, value, state) for key, value in done.items()),
    )
    return result


def _train_on(key: str, value: Any, state: TrainerState) -> str:
    """Return what to change to train a complete run on: what it did, and the key to raise."""
    if key == "train.epochs":
        epochs = state.epoch
        return f"the run trained {counted(epochs, 'epoch')}; raise train.epochs above {epochs}"
    if key == "train.max_steps":
        steps = state.step
        return f"the run took {counted(steps, 'step')}; raise train.max_steps above {steps}"
    return f"the run converged; set {key} = 0 (now {value})"


# ---------------------------------------------------------------- restores


def _restore(run: Checkpointer, folder: Path, state: TrainerState) -> None:
    """Restore `run`'s parts from `folder` and say where the run goes on."""
    acc, stream = run.accelerator, run.per_rank["stream"]
    run.load(folder, state)
    epochs = run.cfg.train.epochs
    logger.info(
        "resuming from %s (step %d, in epoch %d of %d, batch %d of %d)%s",
        folder,
        state.step,
        min(stream.epoch + 1, epochs),  # 1-based, as logged
        epochs,
        stream.step,
        stream.steps_per_epoch,
        f"; written by {state.world_size} processes, now {acc.num_processes}"
        if state.world_size != acc.num_processes
        else "",
    )


# ---------------------------------------------------------------- changes


def _apply_changed_settings(run: Checkpointer, saved: RunConfig, state: TrainerState) -> None:
    """Apply and name the [optim] keys this run's config changed since the checkpoint (its
    config `saved`), name a changed key that only starts a run (train.seed), and set the lr."""
    cfg, schedule = run.cfg, run.shared["schedule"]
    notes = apply_changed_settings(saved.optim, cfg.optim, schedule, run.optimizer)
    if notes:
        logger.info(
            "the config changes the checkpoint's [optim] settings, applied from step %d on: "
            "%s; lr now %.4g",
            state.step,
            "; ".join(notes),
            schedule.lr,
        )
    for key in keys_of(cfg.train, START):
        old, new = getattr(saved.train, key), getattr(cfg.train, key)
        if old != new:
            logger.info(
                "train.%s %r -> %r does not apply: it only initialises a run, a resumed one "
                "goes on from the checkpoint's weights and random state",
                key,
                old,
                new,
            )
    if state.schedule.get("stopped") and not schedule.stopped:
        logger.info(
            "the checkpoint's run had stopped (%s); under this config's stopping rule "
            "(optim.stop_patience %d, optim.halve_before_stop %s) it trains on at lr %.4g",
            state.schedule["stopped"],
            schedule.cfg.stop_patience,
            str(schedule.cfg.halve_before_stop).lower(),
            schedule.lr,
        )


def apply_changed_settings(
    saved: OptimConfig, cfg: OptimConfig, schedule: LrSchedule, optimizer: torch.optim.Optimizer
) -> list[str]:
    """Apply the [optim] keys where this run's config differs from a checkpoint's (`saved`) to
    the restored schedule and optimizer; return one "optim.key old -> new" note per change.

    A resume restores the lr schedule and the optimizer's settings from the checkpoint; a key
    the config changed since then wins, as nanoGPT takes its lr from the command line on
    resume: `lr` becomes the current lr (the schedule halves on from it), the schedule keeps
    its epochs done and last validation loss. A resume with the same config changes nothing,
    so it stays bit-identical to an uninterrupted run (the schedule sets each new lr on the
    optimizer it drives).
    """
    notes, followed = [], False
    restored_lr = schedule.lr
    for key, way in ways_of(cfg).items():  # a STEP key is read at every step: nothing to do
        old, new = getattr(saved, key), getattr(cfg, key)
        if old == new:
            continue
        note = f"optim.{key} {old!r} -> {new!r}"
        if way == LR:
            schedule.set_lr(new)
            if restored_lr != old:
                note += f" (the schedule had reached {restored_lr:.4g})"
        elif way == OPTIMIZER:
            for group in optimizer.param_groups:
                group[key] = new
        notes.append(note)
        followed = followed or way == SCHEDULE
    if followed:  # the schedule holds its keys: it takes them all, and judges its stop again
        schedule.follow(cfg)
    return notes
