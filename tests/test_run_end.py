"""What a run tells its user: no progress bar in a redirected log, the settings a resume changes,
and its end (a max_steps run validates, `best` says what it is, a finished run says so). Real
runs of the CLI on the tiny corpus."""

from __future__ import annotations

import logging
import math
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hornn_dist.config import OptimConfig, load_config
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run import on_resume, resume
from hornn_dist.run.run_state import TrainerState
from hornn_dist.training import optim
from hornn_dist.util.errors import ConfigError
from tests.train_helpers import (
    REPO,
    check_ok,
    env,
    event_folder,
    prepared_tiny,
    run_events,
    run_here,
    scalars,
)

STEPS_PER_EPOCH = 14  # the tiny config: 456 train tokens, 4 streams x bptt 8


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_tiny(tmp_path_factory.mktemp("run_end"))


def train(workdir: Path, name: str, *extra: str, config: Path | None = None):
    """Run the trainer on the tiny config (or `config`) into workdir/name."""
    config = config or workdir / "config.toml"
    out = f"train.output_dir={workdir / name}"
    return run_here("hornn_dist.train", str(config), "--set", out, *extra)


def newest(workdir: Path, name: str) -> Path:
    return ckpt.list_checkpoints(workdir / name)[-1]


def _config_without_progress(workdir: Path) -> Path:
    text = (workdir / "config.toml").read_text().replace("progress = false\n", "")
    assert "progress" not in text
    path = workdir / "default_progress.toml"
    path.write_text(text)
    return path


def test_a_redirected_log_has_no_progress_bar(workdir: Path) -> None:
    bar = re.compile(r"\| \d+/\d+ \[")  # tqdm's "| 3/3 [00:00<00:00, 9.1step/s]"
    config = _config_without_progress(workdir)
    quiet = train(workdir, "bar_auto", "--set", "train.max_steps=3", config=config)
    check_ok(quiet)
    assert not bar.search(quiet.stderr), quiet.stderr
    forced = train(
        workdir, "bar_on", "--set", "train.max_steps=3", "--set", "log.progress=true", config=config
    )
    check_ok(forced)
    assert bar.search(forced.stderr)


def test_log_progress_is_auto_true_or_false() -> None:
    assert load_config(None).log.progress == "auto"
    assert load_config(None, ["log.progress=false"]).log.progress is False
    with pytest.raises(ConfigError, match='log.progress must be true, false or "auto"'):
        load_config(None, ["log.progress=sometimes"])
    with pytest.raises(ConfigError, match="log.progress must be of type bool or str"):
        load_config(None, ["log.progress=3"])


def test_resume_applies_changed_optim_settings_and_names_them(workdir: Path) -> None:
    check_ok(train(workdir, "retuned", "--set", "train.max_steps=4"))
    changed = ["optim.lr=0.25", "optim.momentum=0.9", "optim.min_lr=0.01", "optim.clip=2.0",
               "optim.clip_mode=value"]  # fmt: skip
    changed = [arg for kv in changed for arg in ("--set", kv)]
    proc = train(workdir, "retuned", "--set", "train.max_steps=6", *changed)
    check_ok(proc)
    for note in (
        "optim.lr 0.3 -> 0.25",
        "optim.momentum 0.5 -> 0.9",
        "optim.min_lr 0.0001 -> 0.01",
        f"optim.clip {OptimConfig().clip!r} -> 2.0",  # the tiny config leaves clip at its default
        "optim.clip_mode 'auto' -> 'value'",
        "lr now 0.25",
    ):
        assert note in proc.stderr, note
    trained = {e["step"]: e["lr"] for e in run_events(workdir / "retuned", "train")}
    assert (trained[4], trained[6]) == (0.3, 0.25)  # the resumed steps train at the new lr
    folder = newest(workdir, "retuned")
    schedule = TrainerState.read(folder).schedule
    assert schedule["lr"] == 0.25 and schedule["min_lr"] == 0.01
    groups = torch.load(folder / "optimizer.bin", weights_only=True)["param_groups"]
    assert all(g["momentum"] == 0.9 and g["lr"] == 0.25 for g in groups)
    assert "lr = 0.25" in (folder / "config.toml").read_text()
    # the same command again: nothing differs from the checkpoint any more, nothing is named
    again = train(workdir, "retuned", "--set", "train.max_steps=8", *changed)
    check_ok(again)
    assert " -> " not in again.stderr


def test_every_optim_key_declares_its_way_to_apply_on_resume() -> None:
    """An [optim] key's field says how a resume applies a change of it (hornn_dist/run/on_resume.py):
    a key without one would be named and not applied."""
    ways = on_resume.ways_of(OptimConfig)
    optim_ways = {on_resume.LR, on_resume.SCHEDULE, on_resume.OPTIMIZER, on_resume.STEP}
    assert {key for key, way in ways.items() if way not in optim_ways} == set()
    assert on_resume.keys_of(OptimConfig, on_resume.LR) == ("lr",)


def test_changed_schedule_keeps_its_history() -> None:
    saved = OptimConfig(lr=0.5)
    schedule = optim.LrSchedule.from_config(saved)
    schedule.end_epoch(5.0)
    schedule.end_epoch(6.0)  # plateau: halved to 0.25
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.25, momentum=0.5)
    cfg = OptimConfig(
        lr=0.1, schedule="fixed_then_halve", halve_after=1, weight_decay=0.0, stop_improvement=0.0
    )
    notes = resume.apply_changed_settings(saved, cfg, schedule, opt)
    assert notes[0] == "optim.lr 0.5 -> 0.1 (the schedule had reached 0.25)"
    assert schedule.lr == 0.1 and schedule.epochs_done == 2 and schedule.previous_valid == 6.0
    assert opt.param_groups[0]["weight_decay"] == 0.0
    assert schedule.end_epoch(7.0) == 0.05  # fixed_then_halve, past halve_after


def test_a_finished_run_says_so_and_exits_without_work(workdir: Path) -> None:
    first = train(workdir, "finished", "--set", "train.epochs=2")
    check_ok(first)
    epoch_lines = [line for line in first.stderr.splitlines() if ", valid ppl " in line]
    assert len(epoch_lines) == 2
    assert "lr for next epoch" in epoch_lines[0]
    assert "lr for next epoch" not in epoch_lines[1]  # there is no next epoch
    folder = newest(workdir, "finished")
    test = TrainerState.read(folder).test
    assert test["tokens"] == 216  # 217 test tokens: every one but the first is predicted
    assert "test: 216 predicted tokens (the split's 217 but the first)" in first.stderr
    assert f"ppl {test['ppl']:.2f}" in first.stderr
    assert set(test) == {"tokens", "loss_sum", "loss", "ppl"}
    done = (folder / "DONE").stat().st_mtime_ns
    events = (workdir / "finished" / "metrics.jsonl").read_bytes()

    again = train(workdir, "finished", "--set", "train.epochs=2")
    check_ok(again)
    assert f"is complete at step {2 * STEPS_PER_EPOCH}" in again.stderr
    assert "trained train.epochs = 2 epochs" in again.stderr
    stored = f"test: 216 predicted tokens, loss {test['loss']:.4f}, ppl {test['ppl']:.2f}"
    assert stored in again.stderr
    assert (
        "the run trained 2 epochs; raise train.epochs above 2" in again.stderr
        and "--no-resume" in again.stderr
    )
    assert "resuming from" not in again.stderr
    assert (folder / "DONE").stat().st_mtime_ns == done  # nothing written
    assert (workdir / "finished" / "metrics.jsonl").read_bytes() == events  # no event either

    more = train(workdir, "finished", "--set", "train.epochs=3")
    check_ok(more)
    assert "resuming from" in more.stderr
    assert TrainerState.read(newest(workdir, "finished")).step == 3 * STEPS_PER_EPOCH


def test_a_max_steps_run_validates_at_its_end_and_best_names_its_step(
    workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc = train(workdir, "short", "--set", "train.max_steps=7")  # mid-epoch, saves at 5 and 7
    check_ok(proc)
    (valid,) = run_events(workdir / "short", "valid")  # the save at step 5 validates nothing
    assert (valid["step"], valid["best"]) == (7, True)
    state = TrainerState.read(newest(workdir, "short"))
    assert state.best_checkpoint == "step_00000007" and math.isfinite(state.best_valid)
    with caplog.at_level(logging.INFO, logger="hornn_dist.run.checkpoint"):
        best = ckpt.resolve_checkpoint(workdir / "short" / "checkpoints" / "best")
    assert best.name == "step_00000007"
    note = f"is step_00000007 (valid loss {state.best_valid:.4f}, ppl"
    assert note in caplog.text
    evaluated = run_here("hornn_dist.evaluate", str(workdir / "short" / "checkpoints" / "best"))
    check_ok(evaluated)
    assert note in evaluated.stderr


def _stop_reasons(run_dir: Path) -> list[tuple[int, str]]:
    """Return the run/stop_reason texts of a run's TensorBoard files as (step, text)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(event_folder(run_dir)), size_guidance={"tensors": 0}).Reload()
    tag = next(t for t in acc.Tags()["tensors"] if t.startswith("run/stop_reason"))
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(tag)]


def test_a_converged_run_stops_says_why_in_log_and_tensorboard(workdir: Path) -> None:
    # fixed_then_halve halves after epoch 1; epoch 2 improves by far less than 90%: converged
    settings = (
        "--set", "optim.schedule=fixed_then_halve", "--set", "optim.halve_after=1",
        "--set", "optim.stop_improvement=0.9", "--set", "train.epochs=6",
        "--set", "optim.halve_before_stop=false", "--set", "optim.stop_patience=1",
    )  # fmt: skip
    proc = train(workdir, "converged", *settings)
    check_ok(proc)
    end = 2 * STEPS_PER_EPOCH
    assert f"training ended at step {end}: converged: epoch 2 lowered the validation loss by" in (
        proc.stderr
    )
    assert (
        "under optim.stop_improvement = 0.9 (1 epoch in a row, optim.stop_patience = 1), "
        "after 1 lr halving(s)" in proc.stderr
    )
    assert "epoch 2 of 6 done" in proc.stderr and "epoch 3 of 6 done" not in proc.stderr
    assert "lr for next epoch" not in proc.stderr.split("epoch 2 of 6 done")[1].splitlines()[0]
    [(step, reason)] = _stop_reasons(workdir / "converged")
    assert step == end and reason.startswith("converged: epoch 2 lowered")
    state = TrainerState.read(newest(workdir, "converged"))
    assert state.stop_reason == reason and state.test["tokens"] == 216
    assert [round(h["epoch"], 6) for h in state.valid_history] == [1.0, 2.0]
    assert state.train_seconds > 0 and state.tokens_per_sec > 0 and state.parameters > 0
    assert state.hardware

    again = train(workdir, "converged", *settings)  # converged counts as finished
    check_ok(again)
    assert "is complete at step" in again.stderr and reason in again.stderr
    assert "set optim.stop_improvement = 0 (now 0.9)" in again.stderr

    patient = train(workdir, "converged", *settings[:-2], "--set", "optim.stop_patience=2")
    check_ok(patient)  # a longer patience trains the stopped run on, to its second small epoch
    assert "resuming from" in patient.stderr and "optim.stop_patience 1 -> 2" in patient.stderr
    assert f"training ended at step {3 * STEPS_PER_EPOCH}: converged: epoch 3 lowered" in (
        patient.stderr
    )
    assert "(2 epochs in a row, optim.stop_patience = 2), after 2 lr halving(s)" in patient.stderr

    more = train(workdir, "converged", *settings[:4], "--set", "optim.stop_improvement=0.0",
                 "--set", "train.epochs=4")  # fmt: skip
    check_ok(more)  # without the rule the run trains on to train.epochs
    assert "resuming from" in more.stderr and "epoch 4 of 4 done" in more.stderr
    assert f"training ended at step {4 * STEPS_PER_EPOCH}: trained train.epochs = 4 epochs" in (
        more.stderr
    )


def test_a_converged_run_resumed_under_halve_before_stop_is_that_rule_from_the_start(
    workdir: Path,
) -> None:
    # fixed_then_halve halves after every epoch from the first, so with patience 1 the rule
    # without halve_before_stop ends the run at epoch 2 (its one slow epoch kept one lr), and
    # with it at epoch 3 (the slow epoch at the lr halved after epoch 2)
    settings = (
        "--set", "optim.schedule=fixed_then_halve", "--set", "optim.halve_after=1",
        "--set", "optim.stop_improvement=0.9", "--set", "optim.stop_patience=1",
        "--set", "train.epochs=6",
    )  # fmt: skip
    rule = ("--set", "optim.halve_before_stop=true")
    check_ok(train(workdir, "halve_first", *settings))  # the default
    check_ok(train(workdir, "stopped_first", *settings, "--set", "optim.halve_before_stop=false"))
    assert TrainerState.read(newest(workdir, "stopped_first")).epoch == 2
    resumed = train(workdir, "stopped_first", *settings, *rule)
    check_ok(resumed)  # the stop no longer stands: the run trains on to its third epoch
    assert "optim.halve_before_stop False -> True; lr now" in resumed.stderr
    assert "the checkpoint's run had stopped (converged: epoch 2 lowered" in resumed.stderr
    assert "(optim.stop_patience 1, optim.halve_before_stop true) it trains on at lr" in (
        resumed.stderr
    )
    assert f"training ended at step {3 * STEPS_PER_EPOCH}: converged: epoch 3" in resumed.stderr
    fresh, again = (newest(workdir, name) for name in ("halve_first", "stopped_first"))
    assert fresh.name == again.name
    a, b = (load_file(str(p / "model.safetensors")) for p in (fresh, again))
    assert all(torch.equal(a[k], b[k]) for k in a)
    states = [TrainerState.read(p) for p in (fresh, again)]
    assert states[0].schedule == states[1].schedule and states[0].test == states[1].test


def _worse_than_uniform(workdir: Path, name: str, steps: int) -> list[str]:
    """Train with huge initial weights and an lr too small to fix them (ppl far above the
    41-word vocabulary) for `steps`; return the run's WARNING lines."""
    proc = train(
        workdir, name, "--set", "model.init_std=3.0", "--set", "optim.lr=1e-6",
        "--set", f"train.max_steps={steps}",
    )  # fmt: skip
    check_ok(proc)
    return [line for line in proc.stderr.splitlines() if "WARNING" in line]


def test_validation_worse_than_uniform_is_a_warning_naming_the_keys(workdir: Path) -> None:
    [line] = [line for line in _worse_than_uniform(workdir, "uniform", 2) if "valid ppl" in line]
    assert "above the vocabulary size" in line and "worse than guessing uniformly" in line
    assert "optim.lr" in line and "optim.clip_mode" in line and "optim.max_col_norm" in line
    assert scalars(workdir / "uniform")["valid/worse_than_uniform"] == [(2, 1.0)]
    fine = train(workdir, "fine", "--set", "train.max_steps=2")
    check_ok(fine)
    assert "WARNING" not in fine.stderr


def test_a_train_window_worse_than_uniform_is_one_warning_naming_the_keys(workdir: Path) -> None:
    # logged every 2 steps over 6: three windows above the 41 words, one line
    warnings = _worse_than_uniform(workdir, "hot", 6)
    lines = [line for line in warnings if "train ppl" in line]
    assert len(lines) == 1, warnings
    assert "in the window up to step 2 is above the vocabulary size 41" in lines[0]
    assert "optim.warmup_steps" in lines[0] and "model.feedback_scale" in lines[0]
    assert scalars(workdir / "hot")["train/worse_than_uniform"] == [(2, 1.0)]
    assert all(ppl > 41 for _, ppl in scalars(workdir / "hot")["train/ppl"])


@pytest.fixture(scope="module")
def two_epochs(workdir: Path) -> TrainerState:
    """The trainer state of an uninterrupted 2-epoch run."""
    check_ok(train(workdir, "two_epochs", "--set", "train.epochs=2"))
    return TrainerState.read(newest(workdir, "two_epochs"))


def _same_end(
    state: TrainerState, straight: TrainerState, weights: Path, straight_weights: Path
) -> None:
    """Assert a run ended like the uninterrupted one: history, schedule, test and weights."""
    assert [h["step"] for h in state.valid_history] == [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]
    assert state.valid_history == straight.valid_history
    assert state.schedule == straight.schedule and state.test == straight.test
    a, b = (load_file(str(p / "model.safetensors")) for p in (weights, straight_weights))
    assert all(torch.equal(a[key], b[key]) for key in b)


def test_max_steps_on_an_epochs_last_batch_ends_that_epoch(
    workdir: Path, two_epochs: TrainerState
) -> None:
    capped = train(
        workdir, "capped", "--set", "train.epochs=2", "--set", f"train.max_steps={STEPS_PER_EPOCH}"
    )
    check_ok(capped)
    assert re.search(r"epoch 1 of 2 done in \S+: train ppl [0-9.]+, valid ppl", capped.stderr)
    assert [e["step"] for e in run_events(workdir / "capped", "valid")] == [STEPS_PER_EPOCH]
    state = TrainerState.read(newest(workdir, "capped"))
    assert state.epoch == 1 and state.schedule["epochs_done"] == 1  # the epoch counted
    assert state.stop_reason == f"reached train.max_steps = {STEPS_PER_EPOCH}"
    assert [h["step"] for h in state.valid_history] == [STEPS_PER_EPOCH]
    resumed = train(workdir, "capped", "--set", "train.epochs=2")
    check_ok(resumed)
    validated = [e["step"] for e in run_events(workdir / "capped", "valid")]
    assert validated == [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]  # the first not again
    assert re.search(r"epoch 2 of 2 done in \S+: train ppl [0-9.]+, valid ppl", resumed.stderr)
    end = newest(workdir, "capped")
    _same_end(TrainerState.read(end), two_epochs, end, newest(workdir, "two_epochs"))


_KILL_AT_TEST = """
import os, signal, sys
from hornn_dist import train
from hornn_dist.runtime import run_cli
from hornn_dist.training import trainer

real_evaluate = trainer.Trainer._evaluate
def die_before_the_test(self, split):
    # SIGKILL after the last epoch end's checkpoint, before the test score
    if split == "test":
        os.kill(os.getpid(), signal.SIGKILL)
    return real_evaluate(self, split)
trainer.Trainer._evaluate = die_before_the_test
run_cli(train.main, sys.argv[1:])
"""


@pytest.mark.integration
def test_a_kill_before_the_test_score_does_not_validate_again(
    workdir: Path, two_epochs: TrainerState
) -> None:
    out = f"train.output_dir={workdir / 'killed_at_test'}"
    args = [str(workdir / "config.toml"), "--set", out, "--set", "train.epochs=2"]
    killed = subprocess.run(
        [sys.executable, "-c", _KILL_AT_TEST, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env(),
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    last = newest(workdir, "killed_at_test")
    assert TrainerState.read(last).test is None
    assert last.name == f"step_{2 * STEPS_PER_EPOCH:08d}"
    rerun = run_here("hornn_dist.train", *args)
    check_ok(rerun)
    assert f"resuming from {last}" in rerun.stderr
    # the killed run validated both epoch ends; the rerun scores the test and validates nothing
    validated = [e["step"] for e in run_events(workdir / "killed_at_test", "valid")]
    assert validated == [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]
    assert [e["tokens"] for e in run_events(workdir / "killed_at_test", "test")] == [216]
    end = newest(workdir, "killed_at_test")
    _same_end(TrainerState.read(end), two_epochs, end, newest(workdir, "two_epochs"))
