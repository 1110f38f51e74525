"""A run resumed past its config's train.epochs says so in one line and what to pass, instead of
validating mid-epoch and ending."""

from __future__ import annotations

import json
import shutil

import pytest

from hornn_dist.run import checkpoint as ckpt
from tests.train_helpers import check_ok, prepared_tiny, train_into


@pytest.mark.integration  # trains ~40 steps
def test_a_checkpoint_past_train_epochs_names_the_key_to_pass(tmp_path):
    folder = prepared_tiny(tmp_path)
    out = folder / "run"
    # `--set train.epochs=4` run, "interrupted" in epoch 3: its final (max_steps) save removed,
    # as a kill before that save leaves it, so the newest checkpoint is mid-epoch 3, no test
    first = train_into(folder, out, "--set", "train.epochs=4", "--set", "train.max_steps=37")
    check_ok(first)
    shutil.rmtree(ckpt.list_checkpoints(out)[-1])
    resume_at = ckpt.list_checkpoints(out)[-1]
    state = json.loads((resume_at / ckpt.STATE_FILE).read_text())
    spe = round(state["valid_history"][0]["step"] / state["valid_history"][0]["epoch"])
    assert state["test"] is None and state["step"] > 2 * spe and state["step"] % spe, state
    before = sorted(p.name for p in ckpt.checkpoint_root(out).iterdir())
    proc = train_into(folder, out, "--set", "train.epochs=2")
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    assert "train.epochs = 2" in errors[0] and "--set train.epochs=3" in errors[0]
    assert sorted(p.name for p in ckpt.checkpoint_root(out).iterdir()) == before
