"""Checkpoints: atomic save on every rank, DONE marker, newest/best lookup, pruning and compatibility checks.

Layout of one checkpoint (`output_dir/checkpoints/step_00001200/`)::

    model.safetensors  optimizer.bin  random_states_<r>.pkl  [scaler.pt]   <- accelerator.save_state
    rank_<r>.pt          per-rank stream position and carried hidden history, written by rank r
    trainer_state.json   step, epoch, lr schedule, best validation loss, vocabulary hash
    config.toml          the resolved run config
    DONE                 written last, after a barrier; a folder without it is ignored

A checkpoint is written into `.tmp_step_<N>` and renamed once DONE exists, so a kill at any
moment leaves either the previous checkpoints untouched or a temp folder that resume ignores.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from hornn_dist.config import RunConfig, load_config
from hornn_dist.errors import CheckpointError

logger = logging.getLogger(__name__)

DONE = "DONE"
CHECKPOINT_ARG_HELP = (
    "a checkpoint folder, a run directory (newest checkpoint), or <run>/checkpoints/latest|best"
)
STATE_FILE = "trainer_state.json"
CONFIG_FILE = "config.toml"
_STEP_DIR = re.compile(r"^step_(\d{8,})$")


def checkpoint_root(output_dir: str | Path) -> Path:
    """Return the folder that holds a run's checkpoints."""
    return Path(output_dir) / "checkpoints"


def step_dir_name(step: int) -> str:
    """Return the folder name of the checkpoint taken after `step` optimizer steps."""
    return f"step_{step:08d}"


def is_complete(folder: Path) -> bool:
    """Return True when the folder is a finished checkpoint (its DONE marker exists)."""
    return (folder / DONE).is_file()


def list_checkpoints(output_dir: str | Path, warn: bool = True) -> list[Path]:
    """Return the complete checkpoints of a run, oldest first; warn about incomplete ones."""
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    found = []
    for folder in root.iterdir():
        match = _STEP_DIR.match(folder.name)
        if not match:
            continue
        if is_complete(folder):
            found.append((int(match.group(1)), folder))
        elif warn:
            logger.warning("ignoring incomplete checkpoint %s (no %s marker)", folder, DONE)
    # By step number, not by name: step_100000000 comes after step_99999999.
    return [folder for _, folder in sorted(found)]


def resolve_checkpoint(path: str | Path) -> Path:
    """Return the checkpoint folder meant by a checkpoint, a run directory, or `<run>/checkpoints/latest|best`."""
    path = Path(path)
    if path.name in ("latest", "best") and not path.exists():
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
        return _latest_or_best(run_dir, path.name)
    if not path.exists():
        raise CheckpointError(
            f"{path} does not exist; pass a run directory or one of its checkpoints"
        )
    if is_complete(path):
        return path
    if (path / "checkpoints").is_dir():
        return _latest_or_best(path, "latest")
    if path.name == "checkpoints" and path.is_dir():
        return _latest_or_best(path.parent, "latest")
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
        best = read_trainer_state(complete[-1]).get("best_checkpoint")
        if best and is_complete(checkpoint_root(run_dir) / best):
            return checkpoint_root(run_dir) / best
        logger.warning(
            "%s: using the newest checkpoint %s as best",
            f"best checkpoint {best} is missing" if best else "no best checkpoint recorded yet",
            complete[-1].name,
        )
    return complete[-1]


def read_trainer_state(folder: Path) -> dict[str, Any]:
    """Return the trainer state stored in a checkpoint."""
    try:
        return json.loads((folder / STATE_FILE).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"cannot read {folder / STATE_FILE}: {err}") from None


def read_config(folder: Path) -> RunConfig:
    """Return the run config stored in a checkpoint."""
    return load_config(folder / CONFIG_FILE)


def save_checkpoint(
    accelerator: Any,
    output_dir: str | Path,
    step: int,
    trainer_state: dict[str, Any],
    rank_state: dict[str, Any],
    cfg: RunConfig,
) -> Path:
    """Write a complete checkpoint from every rank and return its folder (call on all ranks)."""
    root = checkpoint_root(output_dir)
    final = root / step_dir_name(step)
    tmp = root / f".tmp_{step_dir_name(step)}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))  # every rank: weights, optimizer, RNG, scaler
    _atomic_torch_save(rank_state, tmp / f"rank_{accelerator.process_index}.pt")
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (tmp / CONFIG_FILE).write_text(cfg.to_toml(), encoding="utf-8")
        (tmp / STATE_FILE).write_text(json.dumps(trainer_state, indent=2), encoding="utf-8")
        _fsync_dir(tmp)
        (tmp / DONE).write_text(f"step {step}\n")
        if final.exists():  # the same step saved again (e.g. an epoch end right after a resume)
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
    accelerator.wait_for_everyone()
    return final


def set_aside_previous_run(output_dir: str | Path) -> Path | None:
    """Move a run's checkpoints and TensorBoard logs into `replaced-<time>/`; return it (None if none)."""
    out = Path(output_dir)
    previous = [out / name for name in ("checkpoints", "tensorboard") if (out / name).exists()]
    if not previous:
        return None
    target = out / time.strftime("replaced-%Y%m%d-%H%M%S")
    target.mkdir(parents=True, exist_ok=True)
    for folder in previous:
        os.replace(folder, target / folder.name)
    return target


def prune_checkpoints(output_dir: str | Path, keep: int, best: str | None) -> list[Path]:
    """Delete all but the newest `keep` complete checkpoints and the best one; return what was removed."""
    complete = list_checkpoints(output_dir, warn=False)
    doomed = [c for c in complete[: max(len(complete) - keep, 0)] if c.name != best]
    for folder in doomed:
        shutil.rmtree(folder, ignore_errors=True)
    root = checkpoint_root(output_dir)
    for stale in root.glob(".tmp_step_*"):  # leftovers of a kill while writing
        shutil.rmtree(stale, ignore_errors=True)
    return doomed


def load_rank_state(folder: Path, rank: int, world_size: int) -> dict[str, Any]:
    """Return rank `rank` of `world_size`'s stream position and hidden history from a checkpoint.

    The checkpoint may come from another number of processes: the saved per-rank histories are
    joined along the batch dimension (streams in rank order) and this rank's streams sliced out,
    which is exact because every process count sees the same global data order.
    """
    saved = read_trainer_state(folder).get("world_size", 1)
    states = []
    for saved_rank in range(saved):
        path = folder / f"rank_{saved_rank}.pt"
        if not path.is_file():
            raise CheckpointError(
                f"{path} is missing: the checkpoint is incomplete; resume from an older one"
            )
        states.append(torch.load(path, map_location="cpu", weights_only=True))
    if saved == world_size:
        return states[rank]
    layers = zip(*(s["history"] for s in states), strict=True)
    joined = [torch.cat(parts, dim=1) for parts in layers]  # each (..., B, H), batch at dim 1
    batch = joined[0].shape[1] if joined else 0
    if batch % world_size:
        raise CheckpointError(
            f"the checkpoint holds {batch} streams, which {world_size} processes cannot share; "
            f"resume with a number of processes that divides {batch}"
        )
    width = batch // world_size
    history = tuple(h[:, rank * width : (rank + 1) * width].clone() for h in joined)
    return {"stream": states[0]["stream"], "history": history}


# [model] keys that pick how the same parameters are computed, not what they are: a resume
# may change them (e.g. a run trained with the triton engine on a GPU, resumed on a CPU)
EXECUTION_MODEL_KEYS = ("engine", "recurrence_precision")


def check_compatible(folder: Path, cfg: RunConfig, vocab_hash: str) -> list[str]:
    """Raise CheckpointError listing every difference that makes `folder` unusable for this run.

    Return the execution keys (`EXECUTION_MODEL_KEYS`) that differ, as "key: old -> new".
    """
    saved_cfg = read_config(folder)
    state = read_trainer_state(folder)
    changed = [
        (key, old, getattr(cfg.model, key))
        for key, old in saved_cfg.to_dict()["model"].items()
        if getattr(cfg.model, key) != old
    ]
    diffs = [
        f"model.{key}: checkpoint {old!r} != config {new!r}"
        for key, old, new in changed
        if key not in EXECUTION_MODEL_KEYS
    ]
    if state.get("vocab_hash") != vocab_hash:
        diffs.append(f"vocabulary hash: checkpoint {state.get('vocab_hash')} != data {vocab_hash}")
    for key in ("batch_size", "bptt"):
        if getattr(saved_cfg.train, key) != getattr(cfg.train, key):
            diffs.append(
                f"train.{key}: checkpoint {getattr(saved_cfg.train, key)} != config {getattr(cfg.train, key)}"
            )
    if diffs:
        raise CheckpointError(
            f"cannot resume from {folder}: "
            + "; ".join(diffs)
            + " (use --no-resume or another train.output_dir)"
        )
    return [
        f"model.{key}: {old!r} -> {new!r}"
        for key, old, new in changed
        if key in EXECUTION_MODEL_KEYS
    ]


def _atomic_torch_save(obj: Any, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".partial")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _fsync_dir(folder: Path) -> None:
    for item in folder.iterdir():
        if item.is_file():
            with open(item, "rb") as handle:
                os.fsync(handle.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
