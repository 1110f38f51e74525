"""The loop's after-step decisions: the cadence table (epoch and run ends included), one
finiteness check per checkpoint, and a stop signal agreed by several processes at a bounded
interval whatever log.every is."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from hornn_dist.config import load_config
from hornn_dist.run.checkpoint import list_checkpoints
from hornn_dist.run.run_state import TrainerState
from hornn_dist.training.cadence import STOP_CHECK_S, AfterStep, Cadence
from tests.train_helpers import (
    check_ok,
    children,
    read_until,
    reset_accelerate_state,
    run_events,
    run_here,
    start,
    two_rank_command,
    write_tiny_config,
)


def test_cadence_table() -> None:
    one = Cadence(log_every=2, eval_every=6, checkpoint_every=4, processes=1)
    assert one.after(1) == AfterStep(False, False, False, True)
    assert one.after(2) == AfterStep(True, False, False, True)
    assert one.after(4) == AfterStep(True, False, True, True)
    # a validation checkpoints by itself: no second save at step 12 (a multiple of 4 and 6)
    assert one.after(12) == AfterStep(True, True, False, True)
    off = Cadence(log_every=5)
    assert not any(off.after(k).validate for k in range(1, 50))
    assert not any(off.after(k).save for k in range(1, 50))
    assert not any(off.after(k).end_epoch or off.after(k).end_run for k in range(1, 50))


def test_cadence_table_across_epoch_ends() -> None:
    # the tiny test config's 14 steps per epoch, 2 epochs
    two = Cadence(log_every=2, eval_every=6, checkpoint_every=4, steps_per_epoch=14, epochs=2)
    assert two.after(12) == AfterStep(True, True, False, True)
    # the epoch's end validates, steps the schedule and saves on its own
    assert two.after(14) == AfterStep(True, False, False, True, end_epoch=True)
    assert two.after(16) == AfterStep(True, False, True, True)
    assert two.after(18) == AfterStep(True, True, False, True)
    assert two.after(28) == AfterStep(True, False, False, True, end_epoch=True, end_run=True)
    assert [k for k in range(1, 40) if two.after(k).end_epoch] == [14, 28]
    assert [k for k in range(1, 40) if two.after(k).end_run] == list(range(28, 40))
    assert two.total_steps == 28 and two.end_reason(28) == "trained train.epochs = 2 epochs"
    # train.max_steps on an epoch's last batch: the epoch still ends there, and so does the run
    capped = Cadence(log_every=5, steps_per_epoch=14, epochs=3, max_steps=14)
    assert capped.after(14) == AfterStep(False, False, False, True, end_epoch=True, end_run=True)
    assert capped.end_reason(14) == "reached train.max_steps = 14" and not capped.end_reason(13)
    assert capped.total_steps == 14


def test_position_and_steps_left_as_a_table() -> None:
    two = Cadence(log_every=2, steps_per_epoch=14, epochs=2)
    assert [two.position(k) for k in (1, 13, 14, 15, 28)] == [
        (1, 1),
        (1, 13),
        (1, 14),
        (2, 1),
        (2, 14),
    ]
    assert [two.steps_left(k) for k in (1, 14, 15, 28)] == [(13, 27), (0, 14), (13, 13), (0, 0)]
    capped = Cadence(log_every=2, steps_per_epoch=14, epochs=3, max_steps=20)
    assert capped.steps_left(16) == (4, 4)  # the run ends before its epoch does
    unbounded = Cadence(log_every=2, steps_per_epoch=14)  # no train.epochs, no max_steps
    assert unbounded.steps_left(3) == (11, None)


def test_several_processes_look_for_a_stop_every_step_until_timed_then_at_a_bounded_interval() -> (
    None
):
    two = Cadence(log_every=1_000_000, processes=2, steps_per_epoch=7)
    assert all(two.after(k).check_stop for k in range(1, 21))  # not timed yet: every step
    timed = two.with_step_time(STOP_CHECK_S / 3.5)  # 3.5 steps in STOP_CHECK_S: every 3 steps
    assert timed.stop_every == 3
    checks = [k for k in range(1, 22) if timed.after(k).check_stop]
    assert checks == [3, 6, 7, 9, 12, 14, 15, 18, 21]  # every 3 steps and at each epoch end
    assert two.with_step_time(10 * STOP_CHECK_S).stop_every == 1  # slow steps: every step
    logged = Cadence(log_every=5, processes=2, stop_every=1000)
    assert [k for k in range(1, 21) if logged.after(k).check_stop] == [5, 10, 15, 20]
    one = Cadence(log_every=5, processes=1, stop_every=1000)
    assert all(one.after(k).check_stop for k in range(1, 21))


def test_cadence_from_config(tmp_path: Path) -> None:
    cfg = load_config(None, ["log.every=7", "train.eval_every=9", "train.checkpoint_every=11"])
    assert Cadence.from_config(cfg, 4, 14) == Cadence(7, 9, 11, 4, 14, cfg.train.epochs)


def test_each_checkpoint_checks_the_loss_once(tmp_path: Path) -> None:
    from hornn_dist.training.trainer import Trainer

    config = write_tiny_config(tmp_path, train={"eval_every": 3, "checkpoint_every": 4})
    cfg = load_config(config, ["train.max_steps=17", f"train.output_dir={tmp_path / 'run'}"])
    reset_accelerate_state()
    try:
        trainer = Trainer(cfg)
        counts = {"checks": 0, "writes": 0}

        def counted(name: str, method):
            def wrapper(*args, **kwargs):
                counts[name] += 1
                return method(*args, **kwargs)

            return wrapper

        trainer._check_finite = counted("checks", trainer._check_finite)
        trainer._write_checkpoint = counted("writes", trainer._write_checkpoint)
        trainer.run()
    finally:
        reset_accelerate_state()
    # 14 steps per epoch: validations at 3, 6, 9, 12, 15, the epoch end 14, saves at 4, 8, 16
    # (12 validates instead), the end 17
    assert counts["writes"] == 10
    assert counts["checks"] == counts["writes"]


def _rank_of(pid: int) -> str:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(v.decode()[5:] for v in environ if v.startswith(b"RANK="))


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_two_ranks_stop_within_the_bound_whatever_log_every(tmp_path: Path) -> None:
    # 12,500 steps per epoch and no log step: only the timed stop checks can end this run soon
    config = write_tiny_config(tmp_path, train_words=400_000)
    check_ok(run_here("hornn_dist.prepare", str(config)))
    out = tmp_path / "run"
    args = [str(config), "--set", f"train.output_dir={out}", "--set", "train.checkpoint_every=0"]
    args += ["--set", "log.every=1000000", "--set", "log.tensorboard=false"]
    proc = start(two_rank_command("hornn_dist.train", *args))
    try:
        lines = read_until(proc, "agree on a stop signal every")
        timed = re.search(r"every (\d+) steps \(about", lines[-1])
        assert timed, "".join(lines)[-3000:]
        every = int(timed.group(1))
        workers = children(proc)
        assert len(workers) == 2, workers
        time.sleep(1.0)
        os.kill(next(w for w in workers if _rank_of(w) == "1"), signal.SIGTERM)  # one rank only
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = "".join(lines) + rest
    assert proc.returncode == 0, log[-3000:]
    assert "received: checkpointing at step" in log and "test:" not in log
    stopped = list_checkpoints(out)[-1]
    state = TrainerState.read(stopped)
    # stopped at a timed check, mid-epoch: not at a log step or an epoch end
    assert state.step % every == 0 and state.epoch == 0, (state.step, every)
    assert state.world_size == 2
    # that bound is by construction (a multiple of `every`, mid-epoch): without the timed checks
    # the run would train on to its epoch end (12,500 steps), minutes later
    resumed = run_here("hornn_dist.train", *args, "--set", f"train.max_steps={state.step + 2}")
    check_ok(resumed)
    assert f"resuming from {stopped}" in resumed.stderr
    assert run_events(out, "valid")[-1]["step"] == state.step + 2  # max_steps validates
