"""Checkpoints: atomic save on every rank, DONE marker, newest/best lookup and pruning.

Layout of one checkpoint (`output_dir/checkpoints/step_00001200/`)::

    model.safetensors    the model's weights, written by the main process
    optimizer.bin  random_states_<r>.pkl  [scaler.pt]   <- accelerator.save_state
    rank_<r>.pt          rank r's own parts: stream position, carried hidden history
    trainer_state.json   step, epoch, lr schedule, validations, test results (run_state.py)
    config.toml          the resolved run config
    checksums.json       size and sha256 of every file above, written after them
    DONE                 written last, after a barrier; a folder without it is ignored

A checkpoint is written into `.tmp_step_<N>` and renamed once DONE exists, so a kill at any
moment leaves either the previous checkpoints untouched or a temp folder: one without DONE is
deleted at the next start, a complete one (a kill at its rename) is put in place. The same step
saved again (its test score recorded) sets the old folder aside as `.old_step_<N>` and deletes
it only once the new one is in place; the next start puts back whichever is complete.
A folder counts as complete when DONE exists, checksums.json lists every file the folder holds
(the weights, state and config at least) and each is there with its size; resume also checks
the sha256 of each and falls back to the newest checkpoint that verifies. A checkpoint whose
checksums.json is missing or lists nothing is damaged: nothing in it can be verified.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save

from hornn_dist.config import RunConfig, load_config
from hornn_dist.run.on_resume import EXECUTION, keys_of
from hornn_dist.run.run_layout import (
    CHECKPOINTS,
    CONFIG_FILE,
    EVENTS_FILE,
    LOCK_FILE,
    RUN_LOG,
    TENSORBOARD,
)
from hornn_dist.run.run_state import STATE_FILE, STEP_DIR, StateVersionError, TrainerState
from hornn_dist.util import files
from hornn_dist.util.errors import CheckpointError, ConfigError, described
from hornn_dist.util.files import CHECKSUMS

logger = logging.getLogger(__name__)

DONE = "DONE"
CHECKPOINT_ARG_HELP = (
    "a checkpoint folder, a run directory (newest checkpoint), or <run>/checkpoints/latest|best"
)
WEIGHTS = "model.safetensors"
MODEL_RECORD = "hornn_dist.model"  # WEIGHTS' metadata: the [model] keys it was written for
REQUIRED = (WEIGHTS, STATE_FILE, CONFIG_FILE)  # files checksums.json must list


def checkpoint_root(output_dir: str | Path) -> Path:
    """Return the folder that holds a run's checkpoints."""
    return Path(output_dir) / CHECKPOINTS


def step_dir_name(step: int) -> str:
    """Return the folder name of the checkpoint taken after `step` optimizer steps."""
    return f"step_{step:08d}"


def checkpoint_holding(path: str | Path) -> Path | None:
    """Return the checkpoint folder, or the run's `checkpoints/` folder, that `path` is or lies
    inside (links followed), or None: a run's output folder must be neither, or it would write
    over another run's saved state.

    A checkpoint folder holds DONE or checksums.json (or is a save's `.tmp_step_N`); a run's
    `checkpoints/` holds step folders, or sits beside a run's lock, log or events."""
    try:
        resolved = Path(os.path.abspath(path)).resolve()  # the tail may not exist yet
        for folder in (resolved, *resolved.parents):
            if not folder.is_dir():
                continue
            if (folder / DONE).is_file() or (folder / CHECKSUMS).is_file():
                return folder
            if folder.name.startswith(".tmp_step_") or (
                folder.name == CHECKPOINTS and _holds_a_run(folder)
            ):
                return folder
    except (OSError, RuntimeError):  # a loop of links, a name too long: the write check names it
        return None
    return None


def _holds_a_run(checkpoints: Path) -> bool:
    """Return whether a folder named `checkpoints` is a run's: it holds step folders (or a
    save's leftovers), or its parent holds a run's lock, log or events."""
    try:
        names = [item.name for item in checkpoints.iterdir()]
    except OSError:
        names = []
    if any(STEP_DIR.match(n) or n.startswith(".tmp_step_") for n in names):
        return True
    return any((checkpoints.parent / name).exists() for name in (LOCK_FILE, RUN_LOG, EVENTS_FILE))


def check_output_dir_outside_checkpoints(output_dir: str | Path) -> None:
    """Raise ConfigError when train.output_dir is or lies inside a checkpoint folder or a run's
    `checkpoints/` (through a link too): a run there would write over that run's state."""
    holder = checkpoint_holding(output_dir)
    if holder is None:
        return
    given = Path(os.path.abspath(output_dir))
    where = "is" if given.resolve() == holder else "lies inside"
    link = " (through a link)" if given.resolve() != given else ""
    if holder.name == CHECKPOINTS:
        what, run = "the checkpoints folder", holder.parent
    else:
        what, run = "the checkpoint", holder
    raise ConfigError(
        f"train.output_dir {output_dir} {where} {what} {holder}{link}: a run there would write "
        "over that run's saved state; set train.output_dir to a folder of its own (to train "
        f"on from that run, pass --resume {run})"
    )


def is_complete(folder: Path) -> bool:
    """Return True when the folder is a finished checkpoint: DONE, and its files all there."""
    return problem_with(folder, deep=False) is None


def problem_with(folder: Path, deep: bool, only: tuple[str, ...] = ()) -> str | None:
    """Return what is wrong with a checkpoint folder's files, or None when they check out.

    Without `deep` it checks that DONE exists, that checksums.json lists every file of the
    folder (a missing or empty list is a damaged checkpoint) and that each is there with its
    size; with `deep` also each file's sha256 (what resume does before loading). `only` limits
    the files' checks to those (evaluate reads the weights alone).
    """
    if not (folder / DONE).is_file():
        return f"no {DONE} marker (written last, so the save did not finish)"
    problem = files.checksums_problem(folder, deep, required=REQUIRED, only=only)
    if problem is not None:
        return problem
    listed = json.loads((folder / CHECKSUMS).read_text(encoding="utf-8"))
    unlisted = sorted(
        item.name
        for item in folder.iterdir()
        if item.is_file()
        and item.name not in listed
        and item.name not in (DONE, CHECKSUMS)
        and not item.name.startswith(".")  # a file manager's or NFS's, never a save's
    )
    if unlisted:
        return f"{unlisted[0]} is not listed in {CHECKSUMS}"
    return None


def verify(folder: Path, only: tuple[str, ...] = ()) -> None:
    """Raise CheckpointError naming the damaged file unless every file of `folder` (or of
    `only`) verifies."""
    problem = problem_with(folder, deep=True, only=only)
    if problem is not None:
        raise CheckpointError(
            f"checkpoint {folder} is damaged: {problem}; resume from another one "
            "(--resume PATH) or start over with --no-resume"
        )


def newest_verified(output_dir: str | Path) -> Path | None:
    """Return the newest checkpoint of a run whose files verify (sha256), or None if it has none.

    A damaged or incomplete checkpoint is skipped with a warning naming the file; if the run
    has checkpoints and none verifies, raise CheckpointError naming them (a fresh run would
    write over them).
    """
    complete = list_checkpoints(output_dir)  # warns about each incomplete one
    damaged = []
    for folder in reversed(step_folders(output_dir)):
        if folder not in complete:
            damaged.append(f"{folder.name}: {problem_with(folder, deep=False)}")
            continue
        problem = problem_with(folder, deep=True)
        if problem is None:
            if damaged:
                logger.warning(
                    "resuming from %s, the newest checkpoint that verifies (skipped: %s)",
                    folder.name,
                    "; ".join(damaged),
                )
            return folder
        logger.warning("checkpoint %s is damaged: %s", folder, problem)
        damaged.append(f"{folder.name}: {problem}")
    if damaged:
        raise CheckpointError(
            f"no checkpoint under {checkpoint_root(output_dir)} verifies ({'; '.join(damaged)}); "
            "nothing was changed: start over with --no-resume (which sets them aside) or set "
            "another train.output_dir"
        )
    return None


def step_folders(output_dir: str | Path) -> list[Path]:
    """Return every `step_N` folder of a run, complete or not, oldest first (by step number,
    not by name: step_100000000 comes after step_99999999)."""
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    found = []
    for folder in root.iterdir():
        match = STEP_DIR.match(folder.name)
        if match:
            found.append((int(match.group(1)), folder))
    return [folder for _, folder in sorted(found)]


def list_checkpoints(output_dir: str | Path, warn: bool = True) -> list[Path]:
    """Return the complete checkpoints of a run, oldest first; warn about incomplete ones."""
    found = []
    for folder in step_folders(output_dir):
        problem = problem_with(folder, deep=False)
        if problem is None:
            found.append(folder)
        elif warn:
            logger.warning("ignoring incomplete checkpoint %s (%s)", folder, problem)
    return found


def resolve_checkpoint(path: str | Path) -> Path:
    """Return the checkpoint folder meant by a checkpoint, a run directory, or `<run>/checkpoints/latest|best`."""
    path = Path(path)
    if path.name in ("latest", "best") and not path.exists():
        run_dir = path.parent.parent if path.parent.name == CHECKPOINTS else path.parent
        return _latest_or_best(run_dir, path.name)
    if not path.exists():
        raise CheckpointError(
            f"{path} does not exist; pass a run directory or one of its checkpoints"
        )
    problem = problem_with(path, deep=False)
    if problem is None:
        return path
    if (path / CHECKPOINTS).is_dir():
        return _latest_or_best(path, "latest")
    if path.name == CHECKPOINTS and path.is_dir():
        return _latest_or_best(path.parent, "latest")
    if STEP_DIR.match(path.name):
        raise CheckpointError(f"checkpoint {path} is incomplete: {problem}; use an older one")
    raise CheckpointError(
        f"{path} is neither a complete checkpoint (no {DONE}) nor a run directory"
    )


def _latest_or_best(run_dir: Path, which: str) -> Path:
    complete = list_checkpoints(run_dir)
    if not complete:
        raise CheckpointError(
            f"no complete checkpoint under {checkpoint_root(run_dir)}; train first"
        )
    if which == "best":
        return _best(run_dir, complete)
    return complete[-1]


def _best(run_dir: Path, complete: list[Path]) -> Path:
    """Return the best checkpoint by validation that the run's newest checkpoint records (a
    damaged newest one's record counts: it may name itself); the newest complete one when no
    validation was recorded yet; raise CheckpointError when the recorded best cannot be read."""
    root, newest = checkpoint_root(run_dir), step_folders(run_dir)[-1]
    try:
        state = TrainerState.read(newest)
    except StateVersionError:  # not damage: a run of another format
        raise
    except CheckpointError as err:  # the newest is damaged where it records the best
        raise CheckpointError(
            f"the newest checkpoint {newest} is damaged ({err}), so which checkpoint is best "
            f"is unknown; pass a checkpoint folder instead, e.g. {complete[-1]}"
        ) from None
    best = state.best_checkpoint
    if not best:  # else a step_N name, never a path (TrainerState.read checked)
        logger.warning(
            "no best checkpoint recorded yet: using the newest checkpoint %s as best",
            complete[-1].name,
        )
        return complete[-1]
    folder = root / best
    problem = problem_with(folder, deep=False) if folder.is_dir() else "it is missing"
    if problem is not None:
        others = ", ".join(c.name for c in reversed(complete[-3:]))
        raise CheckpointError(
            f"the best checkpoint {folder} is damaged: {problem}; pass another checkpoint of "
            f"the run instead ({others} in {root})"
        )
    logger.info("%s is %s%s", root / "best", best, _valid_note(state.best_valid))
    return folder


def describe_checkpoint(folder: Path) -> str:
    """Return which of its run's checkpoints `folder` is, in words: its step, and whether it is
    the newest (the last weights) and the best by validation (whose test score the run reports)."""
    complete = list_checkpoints(folder.parent.parent, warn=False)
    match = STEP_DIR.match(folder.name)
    if match is None or folder.resolve() not in [c.resolve() for c in complete]:
        return "a checkpoint outside its run's checkpoints folder"
    best = TrainerState.read(complete[-1]).best_checkpoint
    roles = []
    if folder.name == complete[-1].name:
        roles.append("the newest, the last weights")
    if folder.name == best:
        roles.append("the best by validation, whose test score the run reports")
    text = f"step {int(match.group(1))}: " + (" and ".join(roles) or "an older checkpoint")
    if best and folder.name != best:
        text += f"; the best by validation is {best} (RUN/checkpoints/best)"
    return text


def _valid_note(loss: float) -> str:
    """Return " (valid loss L, ppl P)" for a recorded validation loss, else ""."""
    if not math.isfinite(loss):
        return ""
    return f" (valid loss {loss:.4f}, ppl {math.exp(loss) if loss < 700 else math.inf:.2f})"


def read_config(folder: Path) -> RunConfig:
    """Return the run config stored in a checkpoint."""
    return load_config(folder / CONFIG_FILE)


def save_checkpoint(
    accelerator: Any,
    output_dir: str | Path,
    state: TrainerState,
    rank_state: dict[str, Any],
    cfg: RunConfig,
    model: torch.nn.Module,
) -> Path:
    """Write a complete checkpoint of `model`, the trainer `state` (of step `state.step`) and
    the accelerator's optimizer, scaler and random states from every rank and return its
    folder (call on all ranks).

    A rank that cannot write (a full disk, say) makes every rank raise one CheckpointError,
    after the partial folder is removed; the previous checkpoints stay as they were.
    """
    root, step = checkpoint_root(output_dir), state.step
    final = root / step_dir_name(step)
    tmp = root / f".tmp_{step_dir_name(step)}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        remove_partial_saves(output_dir)  # a kill's leftovers would hold disk space
    accelerator.wait_for_everyone()
    failure: BaseException | None = None
    try:
        # the model is not Accelerate's (no DDP: the step averages the gradients itself)
        accelerator.save_state(str(tmp))  # every rank: optimizer, RNG, scaler
        if accelerator.is_main_process:
            save_weights(model, tmp / WEIGHTS, model_record(cfg))
        with files.atomic_writer(tmp / f"rank_{accelerator.process_index}.pt") as f:
            torch.save(rank_state, f)
    except (
        Exception
    ) as err:  # OSError; torch's RuntimeError and safetensors' error on a short write
        failure = err
    _raise_if_any_rank_failed(accelerator, failure, root, tmp)
    if accelerator.is_main_process:
        try:
            files.write_text(tmp / CONFIG_FILE, cfg.to_toml())
            state.write(tmp)
            write_checksums(tmp)
            files.fsync_folder(tmp)
            files.write_text(tmp / DONE, f"step {step}\n")
        except OSError as err:
            failure = err
    _raise_if_any_rank_failed(accelerator, failure, root, tmp)
    if accelerator.is_main_process:
        put_in_place(tmp, final)
    accelerator.wait_for_everyone()
    return final


def set_aside_name(final: Path) -> Path:
    """Return where a checkpoint saved again is kept until its new save is in place."""
    return final.with_name(f".old_{final.name}")


def put_in_place(tmp: Path, final: Path) -> None:
    """Rename the complete save `tmp` to `final`. A checkpoint already there (the same step
    saved again, e.g. to hold its test score) is renamed aside first and deleted only once the
    new one is in place: a kill at any moment leaves a complete checkpoint of the step, which
    `recover_saves` puts back at the next start."""
    old = set_aside_name(final)
    if final.is_symlink():  # replaced, never followed
        final.unlink()
    elif final.exists():
        if old.is_symlink():
            old.unlink()
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    files.fsync_folder(final.parent)
    if old.exists() and not old.is_symlink():
        shutil.rmtree(old)


def recover_saves(output_dir: str | Path) -> list[str]:
    """Put back the checkpoints a kill left out of place while renaming (call before
    `remove_partial_saves`, on the main process); return what was done, in words.

    A `.tmp_step_N` that verifies (its save was complete, killed at its rename) becomes
    `step_N` where that is missing; a `.old_step_N` (a checkpoint set aside by a save of the
    same step) becomes `step_N` again where that is missing, else it is deleted."""
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    done = []
    prefixes = (".tmp_", ".old_")  # the new save first: it is the one the run meant to keep
    for prefix in prefixes:
        for folder in sorted(root.glob(f"{prefix}step_*")):
            final = root / folder.name.removeprefix(prefix)
            if folder.is_symlink() or not STEP_DIR.match(final.name):
                continue
            if os.path.lexists(final):
                if prefix == ".old_":
                    shutil.rmtree(folder, ignore_errors=True)  # the new one is in place
                continue  # a .tmp_ beside its step: remove_partial_saves deletes it
            if problem_with(folder, deep=True) is None:
                os.replace(folder, final)
                files.fsync_folder(root)
                done.append(f"{final} from {folder.name}, a complete save killed at its rename")
    return done


def remove_partial_saves(output_dir: str | Path) -> list[Path]:
    """Delete the `.tmp_step_*` folders a killed or failed save left behind; return them."""
    stale = sorted(checkpoint_root(output_dir).glob(".tmp_step_*"))
    for folder in stale:
        if folder.is_symlink():  # the save would write through it
            folder.unlink()
        shutil.rmtree(folder, ignore_errors=True)
    return stale


def _raise_if_any_rank_failed(
    accelerator: Any, failure: BaseException | None, root: Path, tmp: Path
) -> None:
    """Agree across ranks whether a save failed; if one did, clean up and raise on every rank."""
    failed = failure is not None
    if accelerator.num_processes > 1:
        flag = torch.tensor(int(failed), device=accelerator.device)
        failed = bool(accelerator.reduce(flag, reduction="sum").item())
    if not failed:
        return
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    raise _save_error(failure, root)


def _save_error(failure: BaseException | None, root: Path) -> CheckpointError:
    """Return the one-line error for a failed save (a full disk named as such)."""
    if failure is None:
        return CheckpointError(
            f"another process failed to write its part of a checkpoint in {root}"
        )
    free = shutil.disk_usage(root).free if root.exists() else 0
    no_space = isinstance(failure, OSError) and failure.errno in (errno.ENOSPC, errno.EDQUOT)
    said = str(failure)  # torch and safetensors wrap the OS error in their own types
    if no_space or "No space left" in said or "unexpected pos" in said or free < (1 << 20):
        newest = list_checkpoints(root.parent, warn=False)
        need = sum(f.stat().st_size for f in newest[-1].iterdir()) if newest else 0
        return CheckpointError(
            f"no space left on the device of {root} ({free / 2**20:.1f} MiB free"
            + (f"; a checkpoint needs about {need / 2**20:.1f} MiB" if need else "")
            + "); free some space or point train.output_dir elsewhere, then run the same command"
        )
    return CheckpointError(f"cannot write a checkpoint in {root}: {described(failure)}")


def write_checksums(folder: Path) -> None:
    """Write checksums.json: the size and sha256 of every file in the folder so far (before DONE)."""
    files.write_checksums(
        folder,
        (
            path.name
            for path in folder.iterdir()
            if path.is_file() and path.name not in (DONE, CHECKSUMS)
        ),
    )


def set_aside_previous_run(output_dir: str | Path) -> Path | None:
    """Move a run's checkpoints, TensorBoard logs, config and train.log beside it, into
    `<output_dir>.replaced-<time>/`; return that folder (None when there is no previous run).

    Beside, not inside: `output_dir` then holds the new run alone (`tensorboard --logdir` of it
    shows one run). The run lock `.lock` stays: the new run holds it.
    """
    out = Path(output_dir)
    if not any((out / name).exists() for name in (CHECKPOINTS, TENSORBOARD)):
        return None
    previous = [
        out / name for name in (CHECKPOINTS, TENSORBOARD, CONFIG_FILE, RUN_LOG, EVENTS_FILE)
    ]
    base = out if out.name not in ("", ".", "..") else out.resolve()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target, n = base.with_name(f"{base.name}.replaced-{stamp}"), 1
    while target.exists():  # twice in one second
        target, n = base.with_name(f"{base.name}.replaced-{stamp}-{n}"), n + 1
    target.mkdir(parents=True)
    for item in previous:
        if item.exists():
            shutil.move(item, target / item.name)  # a rename; a copy when output_dir is a mount
    return target


def prune_checkpoints(output_dir: str | Path, keep: int, best: str | None) -> list[Path]:
    """Delete all but the newest `keep` complete checkpoints and the best one; return what was removed."""
    complete = list_checkpoints(output_dir, warn=False)
    doomed = [c for c in complete[: max(len(complete) - keep, 0)] if c.name != best]
    for folder in doomed:
        shutil.rmtree(folder, ignore_errors=True)
    remove_partial_saves(output_dir)  # leftovers of a kill while writing
    return doomed


def save_weights(model: torch.nn.Module, path: Path, record: str) -> None:
    """Write the model's weights to `path` as safetensors, as Accelerate's save_state does,
    with `record` (`model_record`) in its metadata."""
    weights = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    files.write_bytes(path, save(weights, metadata={"format": "pt", MODEL_RECORD: record}))


def model_record(cfg: RunConfig) -> str:
    """Return the [model] keys that shape the weights (all but the execution keys) as JSON."""
    execution = keys_of(cfg.model, EXECUTION)
    keys = {k: v for k, v in cfg.to_dict()["model"].items() if k not in execution}
    return json.dumps(keys, sort_keys=True)


def vocab_size_of(folder: Path) -> int | None:
    """Return the vocabulary size a checkpoint's weights were made for (the rows of the
    language model's `embedding`), or None where the weights cannot say."""
    try:
        with safe_open(str(folder / WEIGHTS), framework="pt") as weights:
            return int(weights.get_slice("embedding.weight").get_shape()[0])
    except Exception:  # safetensors raises many types; no such tensor
        return None


def check_model_record(folder: Path, cfg: RunConfig) -> None:
    """Raise CheckpointError when the checkpoint's weights record no model, or `cfg` (its
    config.toml) names another model than the one they record (a file replaced or a config
    edited after the save, its checksums rewritten); unreadable weights pass (their load says
    so)."""
    try:
        with safe_open(str(folder / WEIGHTS), framework="pt") as weights:
            stored = (weights.metadata() or {}).get(MODEL_RECORD)
        recorded = json.loads(stored) if stored is not None else None
    except Exception:  # safetensors and json raise many types; the load names the file
        return
    if not isinstance(recorded, dict):
        raise CheckpointError(
            f"{folder / WEIGHTS} records no model (its {MODEL_RECORD!r} metadata): the file was "
            f"replaced after the save; {older_instead(folder)}"
        )
    now = json.loads(model_record(cfg))
    diffs = [
        f"model.{key} = {now[key]!r} there, {value!r} when the weights were written"
        for key, value in sorted(recorded.items())
        if key in now and now[key] != value
    ]
    if diffs:
        raise CheckpointError(
            f"{folder / CONFIG_FILE} does not describe the model in {folder / WEIGHTS} "
            f"({'; '.join(diffs)}): the config was edited after the save; put those values back"
        )


def nonfinite_tensors(weights: dict[str, torch.Tensor]) -> list[str]:
    """Return the names of the floating-point tensors that hold a NaN or an infinity."""
    return [name for name, t in weights.items() if t.is_floating_point() and not t.isfinite().all()]


def last_finite_checkpoint(folder: Path) -> Path | None:
    """Return the newest complete checkpoint of `folder`'s run older than it whose weights are
    all finite, or None."""
    older = [c for c in list_checkpoints(folder.parent.parent, warn=False) if c.name < folder.name]
    for candidate in reversed(older):
        try:
            if not nonfinite_tensors(load_file(str(candidate / WEIGHTS))):
                return candidate
        except Exception:  # an unreadable one is no candidate
            continue
    return None


def older_instead(folder: Path) -> str:
    """Return what to resume instead of checkpoint `folder`: the newest complete checkpoint of
    its run before it (`--resume PATH`), or, where the run has none, a start over."""
    match = STEP_DIR.match(folder.name)
    step = int(match.group(1)) if match else -1
    older = [
        c
        for c in list_checkpoints(folder.parent.parent, warn=False)
        if int(STEP_DIR.match(c.name).group(1)) < step
    ]
    if older:
        return f"resume from an older checkpoint of its run (--resume {older[-1]})"
    return "its run has no older checkpoint: start over with --no-resume"


def check_finite_for_resume(folder: Path, weights: dict[str, torch.Tensor]) -> None:
    """Raise CheckpointError when a checkpoint to resume holds NaN or infinite weights,
    naming the last good checkpoint of its run."""
    bad = nonfinite_tensors(weights)
    if not bad:
        return
    good = last_finite_checkpoint(folder)
    instead = (
        f"resume from {good} (--resume {good}) with a lower optim.lr or an optim.clip"
        if good is not None
        else "its run has no earlier finite checkpoint: start over with --no-resume"
    )
    raise CheckpointError(
        f"checkpoint {folder} holds NaN or infinite weights ({len(bad)} of {len(weights)} "
        f"tensors, e.g. {bad[0]}): its run diverged before this save; {instead}"
    )


def load_state(accelerator: Any, folder: Path, model: torch.nn.Module) -> None:
    """Load a checkpoint's weights into `model` and its optimizer, RNG and scaler state into
    the accelerator's objects.

    A file the libraries cannot read is one CheckpointError (never their advice, such as
    torch.load's suggestion to turn off weights_only, which would run code from the file).
    """
    _check_random_states(folder / f"random_states_{accelerator.process_index}.pkl")
    try:
        weights = load_file(str(folder / WEIGHTS))
    except Exception as err:  # safetensors raises many types
        raise _unreadable(folder, err) from None
    check_finite_for_resume(folder, weights)  # evaluate refuses the same weights
    try:
        accelerator.load_state(str(folder))
        model.load_state_dict(weights)  # copied onto its device
    except Exception as err:  # safetensors, torch.load and pickle raise many types
        raise _unreadable(folder, err) from None


def check_finite_optimizer(folder: Path, optimizer: torch.optim.Optimizer) -> None:
    """Raise CheckpointError when a restored optimizer state (a momentum buffer) holds a NaN or
    an infinity: the run would fail at its first step as a loss gone NaN, blaming the lr."""
    tensors = [
        (name, t)
        for state in optimizer.state.values()
        for name, t in state.items()
        if isinstance(t, torch.Tensor) and t.is_floating_point()
    ]
    bad = [name for name, t in tensors if not t.isfinite().all()]
    if bad:
        raise CheckpointError(
            f"checkpoint {folder} holds NaN or infinite optimizer state ({len(bad)} of "
            f"{len(tensors)} tensors, e.g. a {bad[0]} in optimizer.bin): its run diverged "
            f"before this save; {older_instead(folder)}"
        )


def _unreadable(folder: Path, err: Exception) -> CheckpointError:
    """Return the one error for a checkpoint holding a file its library cannot read."""
    return CheckpointError(
        f"{folder} holds a file that is not a valid checkpoint file ({type(err).__name__}); "
        f"{older_instead(folder)}"
    )


def _check_random_states(path: Path) -> None:
    """Raise one CheckpointError unless `path` (this rank's random states, where saved) holds
    states Python's, numpy's and torch's generators take: Accelerate's load_state would skip a
    bad file with an INFO line and resume on other random numbers."""
    if not path.is_file():  # another process count: Accelerate starts this rank's afresh
        return
    import random

    import numpy as np
    from accelerate.utils import load

    try:
        states = load(path)  # Accelerate's own reader (weights_only)
    except Exception as err:  # UnpicklingError, RuntimeError (bad zip), EOFError, ...
        raise CheckpointError(
            f"{path} is not a valid random-state file ({type(err).__name__}); use another "
            "checkpoint of the run (an older step_N)"
        ) from None
    setters = {
        "random_state": lambda v: random.Random().setstate(v),
        "numpy_random_seed": lambda v: np.random.RandomState().set_state(v),
        "torch_manual_seed": lambda v: torch.Generator().set_state(v),
    }
    for key, apply in setters.items():
        try:
            apply(states[key])  # on a scratch generator: the same checks, no effect
        except Exception as err:  # KeyError, TypeError, ValueError, RuntimeError
            raise CheckpointError(
                f"{path}: field {key!r} is not a generator state ({type(err).__name__}); use "
                "another checkpoint of the run (an older step_N)"
            ) from None


def _torch_load(path: Path) -> Any:
    """Return the tensors saved in `path` (weights_only), or raise one CheckpointError."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError, RuntimeError (bad zip), EOFError, ...
        raise CheckpointError(
            f"{path} is not a valid checkpoint file ({type(err).__name__}); "
            f"{older_instead(path.parent)}"
        ) from None


def load_rank_file(folder: Path, rank: int) -> dict[str, Any]:
    """Return the per-rank parts that rank `rank` saved in checkpoint `folder` (rank_<r>.pt),
    or raise one CheckpointError."""
    path = folder / f"rank_{rank}.pt"
    if not path.is_file():
        raise CheckpointError(
            f"{path} is missing: the checkpoint is incomplete; {older_instead(folder)}"
        )
    saved = _torch_load(path)
    if not isinstance(saved, dict):
        raise CheckpointError(
            f"{path} holds a {type(saved).__name__}, not the per-rank parts; "
            f"{older_instead(folder)}"
        )
    return saved
