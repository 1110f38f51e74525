"""Sweep and report names and refusals: one rule for every name that becomes a path, `sweep
--dry-run` says plainly when it has no time estimate yet, `report` names a damaged checkpoint
instead of "train them", and a second sweep on one output_dir is refused in one line, the first
unharmed.

The damaged runs are written by `tests/fabricated_runs.py` (the trainer's checkpoint files
through the product's own writers; its docstring says which); the two-sweeps test that trains
through the CLI is an integration test.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hornn_dist.config import load_config
from hornn_dist.run.lock import RunLock
from hornn_dist.sweeps.runner import SWEEP_LOCK
from hornn_dist.sweeps.sweep_file import read_sweep, run_name_problem
from hornn_dist.util.errors import ConfigError
from tests.fabricated_runs import curve, write_run
from tests.train_helpers import REPO, env, run_here, wait_for_step, write_sweep

BAD_NAMES = ["a/../../../pwn", "..", ".", "a/b", "/abs", "x y", "", "ä"]


# ---------------------------------------------------------------- item 2: names that are paths


def test_a_recipe_name_cannot_write_outside_the_output_dir(tmp_path: Path) -> None:
    path = write_sweep(
        tmp_path, '[[runs]]\nname = "a"\n[recipes]\n"a/../../../pwn" = { "optim.lr" = 0.1 }\n'
    )
    with pytest.raises(ConfigError) as err:
        read_sweep(path)
    assert str(err.value) == (
        f"{path}: recipe name 'a/../../../pwn' must be letters, digits and . _ + - (a folder name)"
    )
    proc = run_here("hornn_dist.sweep", str(path))
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: {err.value}"
    assert not (tmp_path / "runs").exists() and not (tmp_path / "pwn").exists()


@pytest.mark.parametrize("name", BAD_NAMES)
def test_run_names_and_recipe_names_pass_one_rule(tmp_path: Path, name: str) -> None:
    """The sweep refuses a name as a run's and as a recipe's with `run_name_problem`'s words,
    the same rule `report` applies to the names of a sweep.json."""
    problem = run_name_problem(name)
    assert problem
    escaped = name.replace("\\", "\\\\").replace('"', '\\"')
    cases = {
        "run name": f'[[runs]]\nname = "{escaped}"\n',
        "recipe name": f'[[runs]]\nname = "a"\n[recipes]\n"{escaped}" = {{ "optim.lr" = 0.1 }}\n',
    }
    for what, text in cases.items():
        with pytest.raises(ConfigError) as err:
            read_sweep(write_sweep(tmp_path, text))
        message = str(err.value)
        assert f"{what} {name!r} {problem}" in message or (
            what == "run name" and not name and "needs a name" in message
        ), message
        assert "\n" not in message


def test_good_recipe_names_still_make_run_folders(tmp_path: Path) -> None:
    path = write_sweep(
        tmp_path, '[[runs]]\nname = "a"\n[recipes]\n"lr0.5_norm+1" = { "optim.lr" = 0.5 }\n'
    )
    run = read_sweep(path).runs[0]
    assert run.name == "a--lr0.5_norm+1"
    assert run.config.train.output_dir == str(tmp_path / "runs" / "a--lr0.5_norm+1")


# ---------------------------------------------------------------- item 14: the dry run's estimate


def test_the_dry_run_says_plainly_it_has_no_estimate_before_an_epoch(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, '[[runs]]\nname = "a"\n[[runs]]\nname = "b"\n')
    proc = run_here("hornn_dist.sweep", str(path), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.startswith("dry run: 2 runs in ")
    assert "no time estimate yet: none of its runs has trained an epoch to time" in summary
    assert "[1/2] a: H 12, E 10: " in proc.stderr and " recurrent" in proc.stderr  # sizes
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


# ---------------------------------------------------------------- item 15: a damaged checkpoint


def _finished_run_with_damaged_last_checkpoint(folder: Path, damage: str) -> Path:
    """Write a run folder with an unfinished checkpoint (epoch 3) and a finished one, then
    damage the finished one's trainer_state.json: cut it short, or change bytes in place."""
    config = load_config(
        REPO / "configs" / "demo.toml",
        ["model.hidden_size=8", "model.embedding_size=8", f"train.output_dir={folder}"],
    )
    valid = curve(100.0, 5)
    write_run(folder, config, valid[:3], None, stop_at_convergence=False)
    state = write_run(folder, config, valid, 104.0)
    last = folder / "checkpoints" / f"step_{state['step']:08d}" / "trainer_state.json"
    text = last.read_bytes()
    if damage == "truncated":
        last.write_bytes(text[: len(text) // 2])
    else:  # the same size, other bytes
        last.write_bytes(text.replace(b'"step"', b'"stop"', 1))
    return last.parent


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("truncated", "trainer_state.json has {size} bytes, checksums.json says"),
        ("changed", "trainer_state.json does not match its sha256 in checksums.json"),
    ],
)
def test_report_names_a_damaged_last_checkpoint(tmp_path: Path, damage: str, problem: str) -> None:
    runs = tmp_path / "runs"
    step = _finished_run_with_damaged_last_checkpoint(runs / "hornn3-fofe", damage)
    proc = run_here("hornn_dist.report", str(runs), "--no-plots")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    size = (step / "trainer_state.json").stat().st_size
    assert f"run hornn3-fofe: checkpoint {step.name} is damaged: " in lines[0]
    assert problem.format(size=size) in lines[0]
    assert "(read from step_00000030, not finished)" in lines[0]
    assert "restore the damaged files from a copy, or train again with" in lines[0]


def test_report_names_a_run_whose_only_checkpoint_is_damaged(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    config = load_config(
        REPO / "configs" / "demo.toml", ["model.hidden_size=8", "model.embedding_size=8"]
    )
    state = write_run(runs / "rnn", config, curve(100.0, 5), 104.0)
    weights = runs / "rnn" / "checkpoints" / f"step_{state['step']:08d}" / "config.toml"
    weights.write_text(weights.read_text() + "\n")  # one byte more than checksums.json says
    proc = run_here("hornn_dist.report", str(runs), "--no-plots")
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "(0 runs with checkpoints, none finished)" in line
    assert f"run rnn: checkpoint step_{state['step']:08d} is damaged: config.toml has" in line


def test_a_damaged_run_beside_finished_ones_is_named_in_the_report(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _finished_run_with_damaged_last_checkpoint(runs / "bad", "truncated")
    config = load_config(
        REPO / "configs" / "demo.toml", ["model.hidden_size=8", "model.embedding_size=8"]
    )
    write_run(runs / "good", config, curve(100.0, 5), 104.0)
    proc = run_here("hornn_dist.report", str(runs), "--no-plots")
    assert proc.returncode == 0, proc.stderr
    assert "Damaged checkpoints: run bad: checkpoint step_" in proc.stdout
    assert "Not finished, left out: bad (step 30; checkpoint step_" in proc.stdout


# ---------------------------------------------------------------- item 16: two sweeps, one dir


def test_a_second_sweep_on_the_same_output_dir_is_refused_in_one_line(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, '[[runs]]\nname = "a"\n')
    runs = tmp_path / "runs"
    first = RunLock(runs, SWEEP_LOCK)  # what the sweep training there holds
    first.acquire()
    try:
        (runs / "sweep.json").write_text("the first sweep's\n")
        proc = run_here("hornn_dist.sweep", str(path))
    finally:
        first.release()
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "\n" not in line, proc.stderr
    assert line.startswith(f"error: {runs} is in use by another sweep (host ")
    assert line.endswith("wait for it to end, or give this sweep another output_dir")
    assert (runs / "sweep.json").read_text() == "the first sweep's\n"  # untouched
    assert sorted(p.name for p in runs.iterdir()) == [SWEEP_LOCK, "sweep.json"]  # no run folder


@pytest.mark.integration
def test_two_real_sweeps_on_one_output_dir(tmp_path: Path) -> None:
    """The first sweep trains a long run; the second, started meanwhile, is refused in one line
    and writes nothing; the first, stopped by SIGTERM, checkpoints and ends as a stop (exit 0),
    its run's train.log written by one run only."""
    path = write_sweep(
        tmp_path,
        'set = { "train.epochs" = 1000, "optim.stop_improvement" = 0, "log.tensorboard" = false }\n'
        '[[runs]]\nname = "a"\n',
    )
    log = tmp_path / "runs" / "a" / "train.log"
    first = subprocess.Popen(
        [sys.executable, "-m", "hornn_dist.sweep", str(path)],
        cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for_step(tmp_path / "runs" / "a", 2, first)
        second = subprocess.run(
            [sys.executable, "-m", "hornn_dist.sweep", str(path)],
            cwd=REPO, env=env(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert second.returncode == 2
        assert (
            second.stderr.strip()
            .splitlines()[-1]
            .startswith(f"error: {tmp_path / 'runs'} is in use by another sweep")
        )
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert "FAILED" not in err and "stopped after" in err
    text = log.read_text()
    starts = [line for line in text.splitlines() if line.startswith("=====")]
    assert len(starts) == 1 and "in use by another run" not in text  # one run wrote it
