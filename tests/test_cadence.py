"""The loop's after-step decisions: the cadence table, one finiteness check per checkpoint, and a
stop signal honoured at the logging cadence when several processes must agree on it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hornn_dist.checkpoint import list_checkpoints, read_trainer_state
from hornn_dist.config import load_config
from hornn_dist.training.cadence import AfterStep, Cadence
from tests.train_helpers import (
    check_ok,
    children,
    read_until,
    run_module,
    start,
    two_rank_command,
    write_tiny_config,
)


def test_cadence_table() -> None:
    one = Cadence(log_every=2, eval_every=6, checkpoint_every=4, processes=1)
    assert one.after(1, epoch_end=False) == AfterStep(False, False, False, True)
    assert one.after(2, epoch_end=False) == AfterStep(True, False, False, True)
    assert one.after(4, epoch_end=False) == AfterStep(True, False, True, True)
    # a validation checkpoints by itself: no second save at step 12 (a multiple of 4 and 6)
    assert one.after(12, epoch_end=False) == AfterStep(True, True, False, True)
    # the epoch's end validates and saves on its own
    assert one.after(12, epoch_end=True) == AfterStep(True, False, False, True)
    off = Cadence(log_every=5)
    assert not any(off.after(k, epoch_end=False).validate for k in range(1, 50))
    assert not any(off.after(k, epoch_end=False).save for k in range(1, 50))


def test_several_processes_look_for_a_stop_at_the_logging_cadence_only() -> None:
    two = Cadence(log_every=5, processes=2)
    assert [k for k in range(1, 21) if two.after(k, epoch_end=False).check_stop] == [5, 10, 15, 20]
    one = Cadence(log_every=5, processes=1)
    assert all(one.after(k, epoch_end=False).check_stop for k in range(1, 21))


def test_cadence_from_config(tmp_path: Path) -> None:
    cfg = load_config(None, ["log.every=7", "train.eval_every=9", "train.checkpoint_every=11"])
    assert Cadence.from_config(cfg, 4) == Cadence(7, 9, 11, 4)


def test_each_checkpoint_checks_the_loss_once(tmp_path: Path) -> None:
    from accelerate.state import AcceleratorState

    from hornn_dist.training.trainer import Trainer

    config = write_tiny_config(tmp_path, train={"eval_every": 3, "checkpoint_every": 4})
    cfg = load_config(config, ["train.max_steps=13", f"train.output_dir={tmp_path / 'run'}"])
    AcceleratorState._reset_state(True)
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
        AcceleratorState._reset_state(True)
    # validations at 3, 6, 9 (12 is the epoch end), saves at 4, 8, the epoch end 12, the end 13
    assert counts["writes"] == 7
    assert counts["checks"] == counts["writes"]


@pytest.mark.timeout(300)
def test_two_ranks_stop_together_at_a_logging_step(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path)
    check_ok(run_module("hornn_dist.prepare", str(config)))
    out = tmp_path / "run"
    args = [str(config), "--set", f"train.output_dir={out}", "--set", "train.epochs=1000"]
    args += ["--set", "train.checkpoint_every=0", "--set", "log.every=5"]
    proc = start(two_rank_command("hornn_dist.train", *args, port=29671))
    lines = read_until(proc, "step 20: loss")
    workers = children(proc)
    assert len(workers) == 2, workers
    subprocess.run(["kill", "-TERM", str(workers[-1])], check=True)  # one rank only
    _, rest = proc.communicate(timeout=120)
    log = "".join(lines) + rest
    assert proc.returncode == 0, log[-3000:]
    assert "received: checkpointing at step" in log
    state = read_trainer_state(list_checkpoints(out)[-1])
    assert state["step"] > 20 and state["step"] % 5 == 0, state["step"]
    assert state["world_size"] == 2
    assert "test:" not in log
