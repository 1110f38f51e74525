"""trainer_state.json: what a run has done, one dataclass that writes and reads the file.

Every checkpoint holds one (`checkpoint.py`). `TrainerState.write` is the file's one writer and
`TrainerState.read` its one reader: it checks every field before any use (types, ranges, the
step against the folder's `step_N`, none missing).

Besides its own fields the file holds one top-level field per shared checkpoint part
(run/checkpointer.py), that part's state as a JSON object: the lr schedule's in the field
`schedule`, which TrainerState declares for reports to read (`PART` metadata); any other in
`shared`, by name, so a new part is its registration alone. Every field of the file that
TrainerState does not declare is read as a part's (a field it adds or drops moves the
`VERSION`: a file of this version lacking a declared field is refused).

`version` says which format a file holds; files without the field are version 1. Only a file
of this `VERSION` is read (another is refused in one line, which resume, report, evaluate,
generate and export say): the format has no release to keep, so an older run is finished, or
reported, with the commit that wrote it (`WRITTEN_BY`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from hornn_dist.util import files
from hornn_dist.util.errors import CheckpointError

STATE_FILE = "trainer_state.json"
# 1: the files before the version field; 3: rank_<r>.pt keyed by part; 4: the rank files
# hold the train loss window (a log line after a resume averages the steps it would have);
# 5: and the epoch's train loss (its end line says the epoch's train ppl)
VERSION = 5
# a commit that writes each older version, to finish that version's runs with
WRITTEN_BY = {1: "75b372c", 2: "fc73f9f", 3: "394d229", 4: "170e70f"}
STEP_DIR = re.compile(r"^step_(\d{8,})$")  # a checkpoint folder's name (checkpoint.step_dir_name)
PART = "part"  # metadata of a field that holds a shared part's state (reports read it)


class StateVersionError(CheckpointError):
    """A trainer_state.json of another format than this code reads (not a damaged file)."""


@dataclass
class TrainerState:
    """What a run has done so far: the training loop's progress and what a report reads."""

    version: int = VERSION
    step: int = 0  # optimizer steps taken
    epoch: int = 0  # epochs finished
    # the lr schedule's shared part (LrSchedule.state_dict()): declared, for reports to read
    schedule: dict[str, Any] = field(default_factory=dict, metadata={PART: True})
    best_valid: float = math.inf
    best_checkpoint: str = ""
    last_valid_step: int = -1  # the step of the last validation (a resume does not repeat it)
    # the final test results (EvalResult.record()), saved with the last checkpoint: the run's
    # (`test`) is its best checkpoint's by validation, as word_language_model reports;
    # `test_last` the last weights'
    test: dict[str, float] | None = None
    test_checkpoint: str = ""  # the checkpoint `test` scored
    test_last: dict[str, float] | None = None
    stop_reason: str = ""  # why training ended (epochs, max_steps, converged, a signal)
    train_seconds: float = 0.0  # wall-clock time in the training loop, over all resumes
    epoch_started: float = 0.0  # train_seconds when the epoch in progress began
    paused_seconds: float = 0.0  # of which validating and checkpointing (not in tokens/s)
    tokens_per_sec: float = 0.0  # over train_seconds less paused_seconds
    hardware: str = ""
    parameters: int = 0
    valid_history: list[dict[str, float]] = field(default_factory=list)  # one per validation
    vocab_hash: str = ""
    corpus_hash: str = ""  # which prepared corpus, checked on resume
    world_size: int = 1  # the processes that wrote the checkpoint (one rank_<r>.pt each)
    # the run's TensorBoard event folder in output_dir/tensorboard/, named at its start: its
    # resumes continue it ("" before a tracker wrote one: the next start names one)
    tensorboard_run: str = ""
    # every other shared part's state by its name (a top-level field of the file each)
    shared: dict[str, dict[str, Any]] = field(default_factory=dict)

    def with_parts(self, states: dict[str, dict[str, Any]]) -> TrainerState:
        """Return this state holding `states`, each shared part's by its name: in its declared
        field (`PART_FIELDS`), else in `shared`."""
        check_part_names(states)
        declared = {name: s for name, s in states.items() if name in PART_FIELDS}
        others = {name: s for name, s in states.items() if name not in PART_FIELDS}
        return replace(self, **declared, shared=others)

    def part(self, name: str) -> dict[str, Any] | None:
        """Return the state of the shared part `name`; None where the file holds none (a
        declared part's field holds {} then)."""
        return getattr(self, name) if name in PART_FIELDS else self.shared.get(name)

    def write(self, folder: Path) -> None:
        """Write this state as `folder`/trainer_state.json (atomically), each shared part's
        state a top-level field."""
        check_part_names(self.shared)
        record = asdict(self)
        parts = record.pop("shared")
        files.write_json(folder / STATE_FILE, {**record, **parts}, indent=2)

    @classmethod
    def read(cls, folder: Path) -> TrainerState:
        """Return the state in `folder`/trainer_state.json, checked before any use; raise one
        CheckpointError naming the file and the field."""
        path = folder / STATE_FILE
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
            raise CheckpointError(f"cannot read {path}: {err}") from None
        problem = _problem(stored, folder.name)
        if problem is None:
            check_version(path, stored.get("version", 1))
            missing = sorted(OWN_FIELDS - stored.keys())
            problem = f'field "{missing[0]}" is missing' if missing else None
        if problem is not None:
            raise CheckpointError(
                f"{path}: {problem}; the file was changed after its save: use another "
                "checkpoint of the run (an older step_N)"
            )
        own = {k: v for k, v in stored.items() if k in OWN_FIELDS}
        parts = {k: v for k, v in stored.items() if k not in OWN_FIELDS}
        return cls(**own, shared=parts)


OWN_FIELDS = frozenset(f.name for f in fields(TrainerState)) - {"shared"}  # declared in the file
PART_FIELDS = frozenset(f.name for f in fields(TrainerState) if f.metadata.get(PART))


def check_version(path: Path, version: int) -> None:
    """Raise StateVersionError (one line naming the file and a commit that reads it) unless a
    trainer state of `version` is of the format this code reads."""
    if version == VERSION:
        return
    writer = WRITTEN_BY.get(version)
    which = f"e.g. commit {writer} writes version {version}" if writer else "a newer one"
    raise StateVersionError(
        f"{path} is trainer state version {version}; this code reads version {VERSION}: "
        f"finish or report that run with the commit that wrote it ({which}), or start it over "
        "with --no-resume"
    )


def check_part_names(names: Iterable[str]) -> None:
    """Raise ValueError where a shared part is named like a field of the trainer state that
    holds no part's state (its step, its test, ...)."""
    clash = sorted(set(names) & (OWN_FIELDS - PART_FIELDS | {"shared"}))
    if clash:
        raise ValueError(f"shared checkpoint parts {clash} are named like trainer state fields")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


def _problem(state: Any, folder_name: str) -> str | None:
    """Return what is wrong with a trainer state read from folder `folder_name`, or None.

    Checked: every field, when present (`step` always); a folder named `step_N` holds the
    state of step N."""
    if not isinstance(state, dict):
        return f"holds a {type(state).__name__}, not a JSON object"
    step = state.get("step")
    if not _is_int(step) or step < 0:
        return f'field "step" must be a whole number >= 0, got {step!r}'
    named = STEP_DIR.match(folder_name)
    if named and int(named.group(1)) != step:
        return (
            f'field "step" is {step}, but the folder {folder_name} holds step {int(named.group(1))}'
        )
    whole = {"version": 1, "epoch": 0, "world_size": 1, "last_valid_step": -1, "parameters": 0}
    for key, low in whole.items():
        if key in state and (not _is_int(state[key]) or not low <= state[key]):
            return f'field "{key}" must be a whole number >= {low}, got {state[key]!r}'
    if state.get("last_valid_step", -1) > step:
        return f'field "last_valid_step" is {state["last_valid_step"]}, after the step {step}'
    for key in ("train_seconds", "paused_seconds", "tokens_per_sec", "epoch_started"):
        if key in state and (not _is_number(state[key]) or not 0 <= state[key] < math.inf):
            return f'field "{key}" must be a finite number >= 0, got {state[key]!r}'
    if "best_valid" in state and (not _is_number(state["best_valid"]) or state["best_valid"] < 0):
        return f'field "best_valid" must be a loss >= 0 (or Infinity), got {state["best_valid"]!r}'
    for key in ("best_checkpoint", "test_checkpoint"):
        name = state.get(key, "")
        match = STEP_DIR.match(name) if isinstance(name, str) else None
        if name != "" and (match is None or int(match.group(1)) > step):
            return (
                f'field "{key}" must be "" or a step_N folder name up to step {step}, got {name!r}'
            )
    for key in ("vocab_hash", "corpus_hash", "stop_reason", "hardware", "tensorboard_run"):
        if key in state and not isinstance(state[key], str):
            return f'field "{key}" must be a string, got {state[key]!r}'
    board = state.get("tensorboard_run", "")
    if board in (".", "..") or not re.fullmatch(r"[\w.-]*", board):
        return f'field "tensorboard_run" must be a folder name, got {board!r}'
    for key in sorted(state.keys() - (OWN_FIELDS - PART_FIELDS)):  # a shared part's state
        if not isinstance(state[key], dict):
            return f'field "{key}" must be a JSON object (a checkpoint part), got {state[key]!r}'
    for key in ("test", "test_last"):
        if state.get(key) is not None and not isinstance(state[key], dict):
            return f'field "{key}" must be a JSON object, got {state[key]!r}'
    history = state.get("valid_history", [])
    if not isinstance(history, list):
        return f'field "valid_history" must be a list, got {history!r}'
    for entry in history:
        ok = isinstance(entry, dict) and _is_int(entry.get("step"))
        if not ok or not 0 <= entry["step"] <= step or not _is_number(entry.get("loss")):
            return f'field "valid_history" holds {entry!r}, not a validation up to step {step}'
    return None
