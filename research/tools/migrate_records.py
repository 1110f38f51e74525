"""Rewrite the run files of research/records/ that older commits wrote into today's formats.

Why it exists: the product reads only the formats it writes (a trainer_state.json of another
version is refused in one line), so the records, kept as they ran, were migrated once by this
tool (run at commit 40afdc7 over every record but the transfer screen's, still being written
then) rather than read through branches for older files in the package. It is idempotent:
a file already in today's format is left as it is, so a second run changes nothing; a record
added later from an older commit (the transfer screen's) is migrated by running it again.

    python research/tools/migrate_records.py [RECORD_OR_RUN_FOLDER ...]   (default: every record)

What it changes, per run folder (one holding trainer_state.json and config.toml), and why each
value keeps the run's meaning:
- config.toml [optim]: a key the run's commit did not have yet is written with the value that
  commit trained under, where today's default differs: `stop_patience = 1` (a run stopped at
  the first small epoch before the key) and `halve_before_stop = false` (the key came in off).
- trainer_state.json of a version before `run_state.VERSION`:
  - `version` set to today's; each field the older writer lacked written with what the file
    implies: `last_valid_step` the last validation's step, `test_checkpoint` and `test_last`
    where the one test result scored the last weights and those were the best checkpoint's
    (every such record run; another would be refused here, not guessed), the rest with the
    dataclass's default, as the reader used to fill them (`epoch_started`, `paused_seconds`,
    `tensorboard_run`, `corpus_hash` "": not recorded);
  - the lr schedule's state given every key of today's `LrSchedule.state_dict()`: the [optim]
    keys it follows from the run's config.toml; `epoch_lr` (the lr its last epoch trained at)
    and `streak_lr` from the lrs its validations record; `small_epochs` (where missing) counted
    from its validation losses by the stopping rule; `plateau_epochs` 0, what it always is
    after an epoch under `halve_patience = 1` (refused otherwise).
  The tool checks that the stop of each state it migrates still stands under the run's config
  (`resume.stop_stands`, what a report now reads), as the stored `stopped` said before.
sweep.json and metrics.jsonl need nothing: every record's already reads as today's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import tomllib

from hornn_dist.config import OptimConfig, config_from_dict, to_toml
from hornn_dist.data.config import DataConfig
from hornn_dist.run.checkpoint import step_dir_name
from hornn_dist.run.on_resume import SCHEDULE, keys_of
from hornn_dist.run.resume import stop_stands
from hornn_dist.run.run_layout import CONFIG_FILE
from hornn_dist.run.run_state import STATE_FILE, VERSION, TrainerState
from hornn_dist.training.optim import relative_improvement
from hornn_dist.util.errors import ConfigError
from hornn_dist.util.files import write_json, write_text

RECORDS = Path(__file__).resolve().parents[1] / "records"
# [optim] keys added after some records were written, with the value their runs trained under
OPTIM_BEFORE_KEY = {"stop_patience": 1, "halve_before_stop": False}


class MigrationError(Exception):
    """A record file this tool cannot bring to today's format without guessing."""


def migrate_config(text: str) -> tuple[str, list[str]]:
    """Return config.toml's text in today's format and what changed ([] when nothing)."""
    raw = tomllib.loads(text)
    changes = []
    optim = raw.get("optim")
    if isinstance(optim, dict):
        for key, value in OPTIM_BEFORE_KEY.items():
            if key not in optim:
                optim[key] = value
                changes.append(f"optim.{key} = {json.dumps(value)} (before the key)")
    data = raw.get("data")
    every = {f.name for f in dataclasses.fields(DataConfig)}
    if isinstance(data, dict) and data.get("preset") and every <= set(data):
        # written before the writer kept only the keys set: those off their default were set
        kept = DataConfig(**data).toml_table()
        raw["data"] = kept
        changes.append(f"[data] keeps the keys set ({', '.join(sorted(kept))})")
    return (to_toml(raw) if changes else text), changes


def epoch_lrs(history: list[dict[str, Any]], initial: float) -> dict[int, float]:
    """Return the lr each epoch trained at, by epoch (1-based): the first's the initial lr, each
    next one's what the validation at the end of the one before recorded for the next steps."""
    lrs = {1: initial}
    for entry in history:
        epoch = float(entry["epoch"])
        if epoch.is_integer() and "lr" in entry:
            lrs[int(epoch) + 1] = float(entry["lr"])
    return lrs


def epoch_losses(history: list[dict[str, Any]]) -> dict[int, float]:
    """Return the validation loss at the end of each epoch, by epoch."""
    return {int(e["epoch"]): float(e["loss"]) for e in history if float(e["epoch"]).is_integer()}


def small_epochs(schedule: dict[str, Any], history: list[dict[str, Any]], initial: float) -> int:
    """Return how many epochs in a row, up to the last, lowered the validation loss by less than
    `stop_improvement` after an lr halving (the stopping rule's count)."""
    lrs, losses = epoch_lrs(history, initial), epoch_losses(history)
    count, previous = 0, math.inf
    for epoch in sorted(losses):
        halved = lrs.get(epoch, initial) < initial
        small = (
            halved
            and relative_improvement(previous, losses[epoch]) < (schedule["stop_improvement"])
        )
        count = count + 1 if small else 0
        previous = losses[epoch]
    return count


def migrate_schedule(
    schedule: dict[str, Any], history: list[dict[str, Any]], optim: dict[str, Any], where: Path
) -> list[str]:
    """Give `schedule` (in place) every key of today's LrSchedule state; return what was added."""
    defaults = OptimConfig()
    added = []
    for key in keys_of(defaults, SCHEDULE):
        if key not in schedule:
            schedule[key] = optim.get(key, getattr(defaults, key))
            added.append(key)
    if schedule["halve_patience"] != 1 and "plateau_epochs" not in schedule:
        raise MigrationError(f"{where}: plateau_epochs is unknown under halve_patience > 1")
    initial = float(optim.get("lr", defaults.lr))
    history = list(history)
    lrs = epoch_lrs(history, initial)
    last = int(schedule["epochs_done"])
    derived = {"plateau_epochs": 0}
    if "small_epochs" not in schedule:
        derived["small_epochs"] = small_epochs(schedule, history, initial)
    small = derived.get("small_epochs", schedule.get("small_epochs", 0))
    if last > 0:
        derived["epoch_lr"] = lrs.get(last, initial)
        derived["streak_lr"] = lrs.get(last - small + 1, initial) if small else 0.0
    else:
        derived.update(epoch_lr=0.0, streak_lr=0.0)
    for key, value in derived.items():
        if key not in schedule:
            schedule[key] = value
            added.append(key)
    return added


def migrate_state(stored: dict[str, Any], optim: dict[str, Any], where: Path) -> list[str]:
    """Bring a trainer state (in place) to today's format; return what changed ([] when it was)."""
    if stored.get("version") == VERSION:
        return []
    changes = [f"version {stored.get('version', 1)} -> {VERSION}"]
    history = stored.get("valid_history", [])
    if stored.get("test") and not stored.get("test_checkpoint"):
        last_weights = step_dir_name(stored["step"])
        if stored.get("best_checkpoint") != last_weights:
            raise MigrationError(
                f"{where}: its test scored the last weights, not its best checkpoint "
                f"{stored.get('best_checkpoint')!r}"
            )
        stored["test_checkpoint"] = last_weights
        stored.setdefault("test_last", stored["test"])
        changes.append(f"test_checkpoint {last_weights} (the last weights were the best)")
    if "last_valid_step" not in stored:
        stored["last_valid_step"] = max((int(e["step"]) for e in history), default=-1)
        changes.append(f"last_valid_step {stored['last_valid_step']}")
    added = migrate_schedule(stored.setdefault("schedule", {}), history, optim, where)
    if added:
        changes.append(f"schedule + {', '.join(added)}")
    stored["version"] = VERSION
    defaults = dataclasses.asdict(TrainerState())
    filled = [name for name in defaults if name != "shared" and name not in stored]
    if filled:
        changes.append(f"+ {', '.join(filled)} (not recorded: defaults)")
    own = {name: stored.get(name, value) for name, value in defaults.items() if name != "shared"}
    parts = {k: v for k, v in stored.items() if k not in own}
    stored.clear()
    stored.update(own, **parts)
    return changes


def migrate_run(folder: Path, write: bool) -> list[str]:
    """Migrate one run folder; return one line per file changed."""
    lines = []
    config_path, state_path = folder / CONFIG_FILE, folder / STATE_FILE
    text, changes = migrate_config(config_path.read_text(encoding="utf-8"))
    if changes:
        lines.append(f"{config_path}: {'; '.join(changes)}")
        if write:
            write_text(config_path, text)
    optim = tomllib.loads(text).get("optim", {})
    stored = json.loads(state_path.read_text(encoding="utf-8"))
    changes = migrate_state(stored, optim, state_path)
    if changes:
        lines.append(f"{state_path}: {'; '.join(changes)}")
        schedule = stored["schedule"]
        try:
            cfg = config_from_dict(tomllib.loads(text))
        except ConfigError:  # a config today's checks refuse: record_runs reads it as written
            cfg = None
        if cfg is not None and stop_stands(schedule, cfg.optim) != bool(schedule["stopped"]):
            raise MigrationError(f"{state_path}: its stop no longer stands as it did")
        if write:
            write_json(state_path, stored, indent=2)
            TrainerState.read(folder)  # today's reader takes it
    return lines


def run_folders(roots: list[Path]) -> list[Path]:
    """Return every run folder (trainer_state.json beside config.toml) under `roots`, sorted."""
    found = set()
    for root in roots:
        for state in [root / STATE_FILE, *root.rglob(STATE_FILE)]:
            if state.is_file() and (state.parent / CONFIG_FILE).is_file():
                found.add(state.parent)
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    """Migrate the record folders named (default: all of research/records); print each change."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="records or run folders")
    parser.add_argument("--check", action="store_true", help="print what would change only")
    args = parser.parse_args(argv)
    folders = run_folders(args.folders or [RECORDS])
    changed = 0
    for folder in folders:
        try:
            lines = migrate_run(folder, write=not args.check)
        except MigrationError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        changed += bool(lines)
        for line in lines:
            print(line)
    print(f"{changed} of {len(folders)} run folders {'to change' if args.check else 'changed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
