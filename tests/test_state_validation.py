"""A checkpoint's trainer state and random states are checked before use:
tampered files, even with checksums.json recomputed, are one CheckpointError naming the file
and the field, and nothing is trained or written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.run_state import VERSION, WRITTEN_BY, StateVersionError, TrainerState
from hornn_dist.util.errors import CheckpointError
from tests.train_helpers import check_ok, prepared_tiny, run_here, train_into

STEP = 6


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny run stopped at step 6 (its checkpoint step_00000006), to copy and tamper with."""
    folder = prepared_tiny(tmp_path_factory.mktemp("state"))
    check_ok(train_into(folder, folder / "run", "--set", f"train.max_steps={STEP}"))
    return folder


def _tampered_copy(trained: Path, tmp_path: Path, name: str, content: bytes) -> Path:
    """Return a copy of the run whose checkpoint file `name` holds `content`, with its
    checksums.json written again (so the sha256 check passes)."""
    run = tmp_path / "run"
    shutil.copytree(trained / "run", run)
    folder = ckpt.checkpoint_root(run) / ckpt.step_dir_name(STEP)
    (folder / name).write_bytes(content)
    ckpt.write_checksums(folder)
    return run


def _state_with(trained: Path, **fields) -> bytes:
    folder = ckpt.checkpoint_root(trained / "run") / ckpt.step_dir_name(STEP)
    state = json.loads((folder / ckpt.STATE_FILE).read_text())
    return json.dumps({**state, **fields}).encode()


def _error_line(proc) -> str:
    """Return the run's one error line (asserting there is exactly one, and no traceback)."""
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"step": -5}, "step"),
        ({"step": 40}, "step"),  # not the folder's step_00000006
        ({"step": "6"}, "step"),
        ({"epoch": -1}, "epoch"),
        ({"best_checkpoint": "../../x"}, "best_checkpoint"),
        ({"last_valid_step": 99}, "last_valid_step"),
        ({"valid_history": [{"step": 7, "loss": 1.0}]}, "valid_history"),
        ({"world_size": 0}, "world_size"),
        ({"schedule": [1]}, "schedule"),
        ({"version": "2"}, "version"),
    ],
)
def test_a_tampered_trainer_state_is_refused_before_use(trained, tmp_path, fields, field):
    run = _tampered_copy(trained, tmp_path, ckpt.STATE_FILE, _state_with(trained, **fields))
    before = sorted(p.name for p in ckpt.checkpoint_root(run).iterdir())
    line = _error_line(train_into(trained, run, "--set", f"train.max_steps={STEP + 4}"))
    assert ckpt.STATE_FILE in line and f'"{field}"' in line
    assert sorted(p.name for p in ckpt.checkpoint_root(run).iterdir()) == before


def test_every_reader_checks_the_state(trained, tmp_path):
    """resolve (latest/best), describe and the state reader itself refuse the same file."""
    run = _tampered_copy(trained, tmp_path, ckpt.STATE_FILE, _state_with(trained, step=-5))
    folder = ckpt.checkpoint_root(run) / ckpt.step_dir_name(STEP)
    for read in (
        lambda: TrainerState.read(folder),
        lambda: ckpt.resolve_checkpoint(run / "checkpoints" / "best"),
        lambda: ckpt.describe_checkpoint(folder),
    ):
        with pytest.raises(CheckpointError, match=r'trainer_state.json: field "step"') as info:
            read()
        assert "\n" not in str(info.value)


def _schedule_with(trained: Path, **changes) -> bytes:
    """Return the trainer state with its `schedule` field changed (a value None deletes the
    key; `schedule=None` deletes the whole field)."""
    folder = ckpt.checkpoint_root(trained / "run") / ckpt.step_dir_name(STEP)
    state = json.loads((folder / ckpt.STATE_FILE).read_text())
    if "schedule" in changes:
        del state["schedule"]
    for key, value in changes.items():
        if key != "schedule":
            state["schedule"][key] = value
    return json.dumps(state).encode()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"lr": float("nan")}, "schedule.lr"),  # was blamed on optim.lr as a loss gone NaN
        ({"lr": -3}, "schedule.lr"),  # trained uphill and exited 0, "converged"
        ({"lr": 1e308}, "schedule.lr"),  # a traceback
        ({"schedule": None}, "schedule"),  # resumed at the config's lr, without a word
        ({"halvings": -5}, "schedule.halvings"),
        ({"epochs_done": 1e30}, "schedule.epochs_done"),
        ({"epochs_done": 7}, "schedule.epochs_done"),  # more epochs than the run finished
        ({"previous_valid": "low"}, "schedule.previous_valid"),
        ({"stopped": None}, "schedule.stopped"),
        ({"halve_after": -1}, "schedule"),  # a followed [optim] key out of its range
        ({"halve_before_stop": 1}, "schedule.halve_before_stop"),
    ],
)
def test_a_tampered_lr_schedule_is_refused_naming_the_field(trained, tmp_path, changes, field):
    """The schedule's part of trainer_state.json is checked at load as the state's own fields
    are: each value's type and range, one line naming the file and the field, nothing written."""
    run = _tampered_copy(trained, tmp_path, ckpt.STATE_FILE, _schedule_with(trained, **changes))
    before = sorted(p.relative_to(run) for p in run.rglob("*") if p.name != ".lock")
    line = _error_line(train_into(trained, run, "--set", f"train.max_steps={STEP + 4}"))
    folder = ckpt.checkpoint_root(run) / ckpt.step_dir_name(STEP)
    assert str(folder / ckpt.STATE_FILE) in line and f'field "{field}"' in line
    assert "Lower optim.lr" not in line
    assert sorted(p.relative_to(run) for p in run.rglob("*") if p.name != ".lock") == before


@pytest.mark.parametrize("version", [None, 2, 4], ids=["no-field", "v2", "v4"])
def test_a_checkpoint_of_a_previous_version_is_refused_naming_both(trained, tmp_path, version):
    """A trainer state without the version field (as the commits before it wrote), or of
    version 2 (rank files before they were keyed by part) or 4 (rank files without the
    epoch's train loss), is neither resumed nor reported nor read: one line names its
    version, the one this code reads and a commit that finishes it."""
    folder = ckpt.checkpoint_root(trained / "run") / ckpt.step_dir_name(STEP)
    state = json.loads((folder / ckpt.STATE_FILE).read_text())
    assert state.pop("version") == VERSION == 5
    if version is not None:
        state["version"] = version
    run = _tampered_copy(trained, tmp_path, ckpt.STATE_FILE, json.dumps(state).encode())
    before = sorted(p.name for p in ckpt.checkpoint_root(run).iterdir())
    line = _error_line(train_into(trained, run, "--set", f"train.max_steps={STEP + 4}"))
    old = version or 1
    assert f"trainer state version {old}; this code reads version 5" in line
    assert f"commit {WRITTEN_BY[old]} writes version {old}" in line and "--no-resume" in line
    assert sorted(p.name for p in ckpt.checkpoint_root(run).iterdir()) == before
    assert _error_line(run_here("hornn_dist.report", str(run), "--no-plots")) == line
    with pytest.raises(StateVersionError) as info:
        TrainerState.read(ckpt.checkpoint_root(run) / ckpt.step_dir_name(STEP))
    assert line.endswith(str(info.value))


def test_a_trainer_state_missing_a_field_is_refused_naming_it(trained, tmp_path):
    """A file of this version holds every field its writer writes: one it lacks is not
    filled with a default but refused, in one line naming the file and the field."""
    folder = tmp_path / ckpt.step_dir_name(STEP)
    shutil.copytree(ckpt.checkpoint_root(trained / "run") / ckpt.step_dir_name(STEP), folder)
    state = json.loads((folder / ckpt.STATE_FILE).read_text())
    del state["hardware"]
    (folder / ckpt.STATE_FILE).write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match=r'trainer_state.json: field "hardware" is missing'):
        TrainerState.read(folder)


@pytest.mark.parametrize(
    "content",
    [b"garbage, not a pickle", None],  # None: a real pickle whose states are not states
    ids=["bytes", "wrong-states"],
)
def test_garbage_random_states_are_refused(trained, tmp_path, content):
    if content is None:
        import io

        import torch

        buffer = io.BytesIO()
        torch.save({"random_state": 1, "numpy_random_seed": 2, "torch_manual_seed": 3}, buffer)
        content = buffer.getvalue()
    run = _tampered_copy(trained, tmp_path, "random_states_0.pkl", content)
    line = _error_line(train_into(trained, run, "--set", f"train.max_steps={STEP + 4}"))
    assert "random_states_0.pkl" in line
