"""metrics.jsonl: a run's events as data, written by a real run and read back without parsing
its log (the start with its config, every log step with each path's gradient norm, each
validation, the test, the stop with its code), appended by a resumed run."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch

from hornn_dist.run.checkpoint import list_checkpoints
from hornn_dist.run.run_state import TrainerState
from hornn_dist.runtime import cpu_name
from hornn_dist.training.events import EventLog, read_events
from hornn_dist.util.provenance import code_commit, describe_commit
from tests.train_helpers import check_ok, run_here, write_tiny_config


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("events")
    config = write_tiny_config(folder, train={"epochs": 2})
    check_ok(run_here("hornn_dist.train", str(config), "--set", "train.max_steps=12"))
    check_ok(run_here("hornn_dist.train", str(config), "--set", "train.max_steps=20"))  # on
    return folder / "run"


def test_every_log_line_and_validation_is_an_event_with_the_states_numbers(run: Path) -> None:
    events = read_events(run / "metrics.jsonl")
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds.count("start") == 2 and kinds.count("stop") == 2
    starts = [e for e in events if e["event"] == "start"]
    assert starts[0]["step"] == 0 and starts[1]["step"] == 12
    assert starts[1]["started"].startswith("resumed from ")
    assert starts[0]["config"]["model"]["pooling"] == "gated"
    assert starts[0]["parameters"] > 0 and starts[0]["clip_mode"] in ("norm", "value")
    # what the start-up recipe line says, as data: the init's stds and the clip auto chose
    assert starts[0]["init"] == "init scaled: every weight ~ N(0, 0.1) (feedback gain <= 1 already)"
    assert starts[0]["config"]["optim"]["clip_mode"] == "auto" and starts[0]["clip"] > 0
    assert starts[0]["vocabulary"] == 41  # the tiny corpus's, as the start-up line says
    # which code and machine trained it, for the record: as git and torch say here
    assert (
        starts[0]["code"] == code_commit() and starts[0]["versions"]["torch"] == torch.__version__
    )
    assert starts[0]["hardware"] == f"{cpu_name()} (1 thread)"
    assert f"code: {describe_commit(code_commit())}, hornn_dist " in (run / "train.log").read_text()
    train = [e for e in events if e["event"] == "train"]
    assert [e["step"] for e in train] == list(range(2, 21, 2))  # log.every = 2
    for event in train:
        assert math.isclose(event["ppl"], math.exp(event["loss"]), rel_tol=1e-9)
        assert event["path_grad_norms"] and event["grad_norm"] > 0
    state = TrainerState.read(list_checkpoints(run)[-1])
    valid = [e for e in events if e["event"] == "valid"]
    assert [(e["step"], e["loss"]) for e in valid] == [
        (h["step"], h["loss"]) for h in state.valid_history
    ]
    tests = [e for e in events if e["event"] == "test"]  # each run that ends scores the test
    assert [t["step"] for t in tests] == [12, 20]
    assert (tests[-1]["checkpoint"], tests[-1]["ppl"]) == (state.test_checkpoint, state.test["ppl"])
    stops = [e for e in events if e["event"] == "stop"]
    assert [s["code"] for s in stops] == ["max_steps", "max_steps"]
    assert stops[-1]["reason"] == state.stop_reason and stops[-1]["step"] == 20


def test_a_line_cut_short_by_a_kill_is_left_out_and_nan_is_null(tmp_path: Path) -> None:
    log = EventLog(is_main=True)
    log.open(tmp_path)
    log.write("train", step=1, loss=math.nan, ppl=math.inf)
    log.close()
    path = tmp_path / "metrics.jsonl"
    assert json.loads(path.read_text())["loss"] is None
    with open(path, "a") as f:
        f.write('{"event": "train", "step": 2, "lo')  # a kill mid-write
    assert [e["step"] for e in read_events(path)] == [1]
    with pytest.raises(ValueError, match="stop code"):
        log.open(tmp_path)
        log.write("stop", step=3, code="tired", reason="")
    log.close()


def test_report_skips_lines_that_are_not_events_with_one_warning(run: Path, tmp_path: Path) -> None:
    """A metrics.jsonl holding a line that is not UTF-8, or JSON that is not an event (`42`,
    `{"x": 1}`), is reported with one warning naming the file and those lines, where report
    exited 1 with a traceback."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    path = copy / "metrics.jsonl"
    lines = path.read_bytes().count(b"\n")
    with open(path, "ab") as f:
        f.write(b'42\n{"x": 1}\nand\xff god\n')
    proc = run_here("hornn_dist.report", str(copy), "--no-plots")
    check_ok(proc)
    assert "Traceback" not in proc.stderr
    (warning,) = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    assert str(path) in warning
    assert f"{lines + 1} (not an event object), {lines + 2} (not an event object)" in warning
    assert f"{lines + 3} (not UTF-8)" in warning
    assert "max_steps 20" in (copy / "report" / "report.md").read_text()  # its stop event read


def test_other_ranks_write_nothing(tmp_path: Path) -> None:
    log = EventLog(is_main=False)
    log.open(tmp_path)
    log.write("train", step=1)
    assert not (tmp_path / "metrics.jsonl").exists()


def test_each_log_step_says_where_the_run_is_and_the_time_left(run: Path) -> None:
    """The train events' time left is the steps left to the epoch's and the run's end
    (train.max_steps 12, then 20 on resume) at the interval's speed; the log line says both."""
    events = read_events(run / "metrics.jsonl")
    train = [e for e in events if e["event"] == "train"]
    per_epoch = round(train[0]["step"] / train[0]["epoch"])
    for event in train:
        step, seconds_per_step = event["step"], 4 * 8 / event["tokens_per_sec"]  # B 4, T 8
        total = 12 if step <= 12 else 20
        to_epoch_end = per_epoch - ((step - 1) % per_epoch + 1)
        assert round(event["run_seconds_left"] / seconds_per_step) == total - step
        assert round(event["epoch_seconds_left"] / seconds_per_step) == min(
            to_epoch_end, total - step
        )
    log = (run / "train.log").read_text()
    line = next(line for line in log.splitlines() if "step 4: loss" in line)
    assert re.search(
        rf"; epoch 1/2, batch 4/{per_epoch}, [0-9.hms]+ left in the epoch, [0-9.hms]+ in the "
        "run at most$",
        line,
    ), line
