"""prepare and train draw their progress bars as log.progress says: never into a redirected
file under "auto"; a bar says what holds it still, and what ends after it starts a line."""

from __future__ import annotations

import re

import pytest

from tests.train_helpers import (
    check_ok,
    mount_tmpfs,
    run_here,
    run_module,
    unmount,
    write_tiny_config,
)


def _prepare_stderr(tmp_path, progress: bool | str) -> str:
    """Return what `prepare` wrote, its stderr a pipe as under `2> file` (a real process: the
    bars are drawn by its preparing child)."""
    config = write_tiny_config(tmp_path, log={"progress": progress})
    proc = run_module("hornn_dist.prepare", str(config))
    check_ok(proc)
    return proc.stderr + proc.stdout


@pytest.mark.integration  # two real processes, ~5 s each
@pytest.mark.parametrize(("progress", "bars"), [("auto", False), (True, True)])
def test_bars_only_where_log_progress_says(tmp_path, progress, bars):
    """ "auto" (the default) with stderr redirected: no bar, no carriage return; true: bars."""
    out = _prepare_stderr(tmp_path, progress)
    assert ("tiny: vocabulary (train)" in out) is bars
    if not bars:
        assert "\r" not in out


@pytest.mark.integration  # trains
def test_train_prepares_its_corpus_without_bars_into_a_redirected_log(tmp_path):
    """The corpus the train command prepares itself ("auto", stderr a pipe): no bar, no
    carriage return, as prepare alone (a real process: its preparing child draws the bars)."""
    config = write_tiny_config(tmp_path, log={"progress": "auto"})
    proc = run_module("hornn_dist.train", str(config), "--set", "train.max_steps=2")
    check_ok(proc)
    assert "data: prepared" in proc.stderr  # this run prepared it
    assert "\r" not in proc.stderr and "tiny: vocabulary (train)" not in proc.stderr


@pytest.mark.integration  # trains
def test_the_training_bar_says_what_holds_it_still_and_that_its_total_is_at_most(tmp_path):
    """A bar (log.progress = true) names the validation and the save it waits on, and, where
    the stopping rule may end the run sooner, says its total is the most it trains."""
    config = write_tiny_config(tmp_path, log={"every": 2, "progress": True})
    settings = ("train.max_steps=6", "train.eval_every=3", "optim.stop_improvement=0.01")
    proc = run_here("hornn_dist.train", str(config), *(a for kv in settings for a in ("--set", kv)))
    check_ok(proc)
    redraws = proc.stderr.split("\r")
    assert any(r.startswith("evaluating the valid split:  50%") for r in redraws), redraws
    assert any(r.startswith("saving a checkpoint:") for r in redraws)
    assert any(" 3/6 steps at most [" in r for r in redraws)
    elsewhere = f"train.output_dir={tmp_path / 'plain'}"
    plain = run_here(
        "hornn_dist.train", str(config), "--set", elsewhere, "--set", "train.max_steps=2"
    )
    check_ok(plain)
    assert "at most [" not in plain.stderr  # no stopping rule: the total is the run's


@pytest.mark.integration  # trains
def test_an_error_after_a_bar_in_a_file_starts_its_own_line(tmp_path):
    """A bar drawn into a file (log.progress = true, stderr redirected) and a disk that fills
    at the first checkpoint: the error line starts a line, as `grep '^error:'` needs."""
    disk = tmp_path / "disk"
    if not mount_tmpfs(disk, "size=64k"):  # the run's files fit, its first checkpoint does not
        pytest.skip("cannot mount a tmpfs here")
    try:
        config = write_tiny_config(tmp_path, log={"every": 2, "progress": True})
        out = f"train.output_dir={disk / 'run'}"
        proc = run_here(
            "hornn_dist.train", str(config), "--set", out, "--set", "train.max_steps=10"
        )
    finally:
        unmount(disk)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "%|" in proc.stderr  # a bar was drawn
    (line,) = re.findall(r"^error: .*$", proc.stderr, re.M)
    assert "no space left" in line
