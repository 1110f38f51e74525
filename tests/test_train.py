"""The training job end to end: exact resume (1 and 2 real ranks), 2 ranks like 1, kills, TensorBoard."""

from __future__ import annotations

import math
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hornn_dist.run.checkpoint import list_checkpoints
from hornn_dist.run.run_state import TrainerState
from tests.train_helpers import (
    KILL_IN_SECOND_CHECKPOINT,
    check_ok,
    event_folder,
    final_weights,
    launch_two_ranks,
    read_until,
    run_events,
    run_here,
    run_patched,
    scalars,
    start,
    write_tiny_config,
)

# real training runs: 1 and 2 processes, kills, resumes, elastic resume
pytestmark = pytest.mark.integration

K_STEPS = 30  # spans two epoch boundaries, 14 and 28 (14 steps per epoch at these sizes)
K_FIRST = 7  # stop mid-epoch 0, resume to K_STEPS


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("train")
    config = write_tiny_config(folder)
    check_ok(run_here("hornn_dist.prepare", str(config)))  # shared shards for every run below
    return folder


def _config(workdir: Path) -> str:
    return str(workdir / "config.toml")


def _out(workdir: Path, name: str) -> Path:
    return workdir / name


def _train(workdir: Path, name: str, *extra: str, ranks: int = 1):
    args = [_config(workdir), "--set", f"train.output_dir={_out(workdir, name)}", *extra]
    if ranks == 1:
        return run_here("hornn_dist.train", *args)
    return launch_two_ranks("hornn_dist.train", *args)


@pytest.fixture(scope="module")
def straight_1(workdir: Path) -> Path:
    check_ok(_train(workdir, "straight1", "--set", f"train.max_steps={K_STEPS}"))
    return _out(workdir, "straight1")


@pytest.fixture(scope="module")
def straight_2(workdir: Path) -> Path:
    check_ok(_train(workdir, "straight2", "--set", f"train.max_steps={K_STEPS}", ranks=2))
    return _out(workdir, "straight2")


def _assert_bit_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs"


def _train_points(run: Path, after: int) -> dict[str, dict[int, object]]:
    """Return what a run logged of training after step `after`: each metrics.jsonl train
    event's numbers (the last one per step) and each train/ TensorBoard point, by step."""
    kept = ("loss", "ppl", "lr", "grad_norm", "path_grad_norms")
    events = {e["step"]: {k: e[k] for k in kept} for e in run_events(run, "train")}
    points = {"events": {step: v for step, v in events.items() if step > after}}
    for tag in ("train/loss", "train/ppl", "train/lr", "grad_norm/total"):
        points[tag] = {step: v for step, v in scalars(run)[tag] if step > after}
    return points


def _assert_same_train_log(resumed: Path, straight: Path, after: int, rel: float = 0.0) -> None:
    """Assert every train line's numbers after step `after` (metrics.jsonl and TensorBoard)
    are the uninterrupted run's: all equal, or (another process count) losses within `rel`."""
    got, want = _train_points(resumed, after), _train_points(straight, after)
    assert got["events"] and got.keys() == want.keys()
    for key in got:
        assert got[key].keys() == want[key].keys(), key
        if not rel:
            assert got[key] == want[key], key
            continue
        for step, value in got[key].items():
            if key == "events":
                assert value["loss"] == pytest.approx(want[key][step]["loss"], rel=rel), step
            elif key in ("train/loss", "train/ppl"):
                assert value == pytest.approx(want[key][step], rel=rel), (key, step)


EPOCH_LINE = re.compile(r"epoch (\d+) of \d+ done in (\S+): train ppl ([0-9.]+), valid ppl ")


def _epoch_lines(run: Path) -> dict[int, tuple[str, str]]:
    """Return the end-of-epoch lines of a run's train.log as epoch: (its time, train ppl)."""
    found = (EPOCH_LINE.search(line) for line in (run / "train.log").read_text().splitlines())
    return {int(m[1]): (m[2], m[3]) for m in found if m}


def test_resume_is_bit_identical_one_process(workdir: Path, straight_1: Path) -> None:
    first = _train(workdir, "resumed1", "--set", f"train.max_steps={K_FIRST}")
    check_ok(first)
    second = _train(workdir, "resumed1", "--set", f"train.max_steps={K_STEPS}")
    check_ok(second)
    assert f"resuming from {_out(workdir, 'resumed1') / 'checkpoints'}" in second.stderr
    assert f"step_{K_FIRST:08d}" in second.stderr
    assert "(auto engine: fused, layers in fp32)" in second.stderr  # the defaults, on a CPU
    state = TrainerState.read(list_checkpoints(_out(workdir, "resumed1"))[-1])
    assert state.step == K_STEPS and state.epoch == 2  # crossed two epoch boundaries
    _assert_bit_identical(final_weights(straight_1), final_weights(_out(workdir, "resumed1")))
    # step 7 was saved mid-window (log.every 2): step 8's line averages steps 7 and 8 still
    _assert_same_train_log(_out(workdir, "resumed1"), straight_1, after=K_FIRST)
    # and the end of epoch 1 (step 14) its steps 1 to 14
    resumed_epochs = _epoch_lines(_out(workdir, "resumed1"))
    assert {e: ppl for e, (_, ppl) in resumed_epochs.items()} == {
        e: ppl for e, (_, ppl) in _epoch_lines(straight_1).items()
    }


def test_resume_is_bit_identical_two_ranks(workdir: Path, straight_2: Path) -> None:
    check_ok(_train(workdir, "resumed2", "--set", f"train.max_steps={K_FIRST}", ranks=2))
    second = _train(workdir, "resumed2", "--set", f"train.max_steps={K_STEPS}", ranks=2)
    check_ok(second)
    assert "resuming from" in second.stderr
    # The multi-process path that CUDA graphs replay, here eager: no DDP, the exchange.
    assert "gradients averaged over 2 processes: the output layer's" in second.stderr
    folder = list_checkpoints(_out(workdir, "resumed2"))[-1]
    assert {p.name for p in folder.glob("rank_*.pt")} == {"rank_0.pt", "rank_1.pt"}
    _assert_bit_identical(final_weights(straight_2), final_weights(_out(workdir, "resumed2")))
    _assert_same_train_log(_out(workdir, "resumed2"), straight_2, after=K_FIRST)


def test_an_epoch_line_says_the_epochs_time_and_train_ppl(straight_1: Path) -> None:
    """Each epoch's end line gives its time and the perplexity of its mean train loss (here,
    log.every 2, the mean of its seven train events' losses)."""
    lines = _epoch_lines(straight_1)
    assert sorted(lines) == [1, 2]  # epochs end at steps 14 and 28
    losses = {e["step"]: e["loss"] for e in run_events(straight_1, "train")}
    state = TrainerState.read(list_checkpoints(straight_1)[-1])
    for epoch, (took, ppl) in lines.items():
        steps = range(2 + 14 * (epoch - 1), 14 * epoch + 1, 2)
        mean = sum(losses[s] for s in steps) / len(steps)
        assert float(ppl) == pytest.approx(math.exp(mean), abs=0.006), epoch
        assert took.endswith("s") and 0 < float(took.removesuffix("s")) <= state.train_seconds


def test_two_ranks_train_like_one(straight_1: Path, straight_2: Path) -> None:
    one, two = scalars(straight_1), scalars(straight_2)
    for tag in ("train/loss", "valid/loss", "test/ppl"):
        steps_1, values_1 = zip(*one[tag], strict=True)
        steps_2, values_2 = zip(*two[tag], strict=True)
        assert steps_1 == steps_2
        for v1, v2 in zip(values_1, values_2, strict=True):
            assert v1 == pytest.approx(v2, rel=1e-4), tag
    w1, w2 = final_weights(straight_1), final_weights(straight_2)
    for key in w1:
        torch.testing.assert_close(w1[key], w2[key], rtol=1e-4, atol=1e-5)


def test_tensorboard_holds_every_tag(straight_1: Path) -> None:
    tags = scalars(straight_1)
    expected = {
        "train/loss", "train/ppl", "train/lr", "train/tokens_per_sec", "valid/loss", "valid/ppl",
        "test/ppl", "grad_norm/total",
        *(f"grad_norm/layer0/path{n}" for n in (1, 2, 3)),
        *(f"grad_norm/layer0/gate{n}" for n in (1, 2, 3)),
    }  # fmt: skip
    assert expected <= tags.keys()
    for tag in expected:
        assert tags[tag], tag
        assert all(math.isfinite(v) for _, v in tags[tag]), tag
    assert len(tags["train/loss"]) == K_STEPS // 2  # log.every = 2
    lr_steps = [step for step, _ in tags["train/lr"]]
    assert lr_steps == sorted(set(lr_steps))  # one value a step, epoch ends (log steps) too
    losses = [v for _, v in tags["train/loss"]]
    assert losses[-1] < losses[0]  # it learns the pseudo-language
    assert all(v > 0 for _, v in tags["grad_norm/layer0/path1"])


def test_tensorboard_shows_one_run_with_hparams_and_a_layout(workdir: Path) -> None:
    """One run in the tensorboard folder, the run's start's event folder, resumes included
    (no timestamped sibling), holding the hyper-parameters and a custom-scalars layout of a
    chart per feedback path and gate, titled by it, and train, valid and test ppl; the test
    result as a table in the Text tab; a resume adds no second layout."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
    from tensorboard.plugins.custom_scalar import layout_pb2
    from tensorboard.plugins.custom_scalar import metadata as layout_meta
    from tensorboard.plugins.hparams import metadata as hparams_meta

    settings = ("model.num_layers=2", "model.order=2", "train.eval_every=4")
    two_layers = [arg for kv in settings for arg in ("--set", kv)]
    check_ok(_train(workdir, "tb_layout", *two_layers, "--set", "train.max_steps=4"))
    check_ok(_train(workdir, "tb_layout", *two_layers, "--set", "train.max_steps=8"))  # resumes
    board = _out(workdir, "tb_layout") / "tensorboard"
    (start,) = board.iterdir()
    mux = EventMultiplexer().AddRunsFromDirectory(str(board)).Reload()
    assert {run.split("/")[0] for run in mux.Runs()} == {start.name}  # its lines: sub-runs
    state = TrainerState.read(list_checkpoints(_out(workdir, "tb_layout"))[-1])
    assert state.tensorboard_run == start.name

    events = EventAccumulator(str(start), size_guidance={"tensors": 0}).Reload()
    starts = events.PluginTagToContent(hparams_meta.PLUGIN_NAME)
    assert list(starts) == [hparams_meta.SESSION_START_INFO_TAG]
    hparams = hparams_meta.parse_session_start_info_plugin_data(
        starts[hparams_meta.SESSION_START_INFO_TAG]
    ).hparams
    assert hparams["model.num_layers"].number_value == 2
    assert hparams["model.pooling"].string_value == "gated"

    written = events.Tensors(layout_meta.CONFIG_SUMMARY_TAG)
    assert len(written) == 1  # the resume did not write a second layout
    layout = layout_pb2.Layout()
    layout.ParseFromString(written[0].tensor_proto.string_val[0])
    charts = {c.title: list(c.chart) for c in layout.category}
    scalar_tags = {(run, t) for run in mux.Runs() for t in mux.Runs()[run]["scalars"]}

    def shown(chart) -> set[tuple[str, str]]:  # (run below the start, tag): a line each
        regexes = chart.multiline.tag
        lines = {(run, t) for run, t in scalar_tags if any(re.match(r, t) for r in regexes)}
        return {(run.removeprefix(start.name).strip("/") or ".", t) for run, t in lines}

    for layer in (0, 1):  # every path and gate on one chart, a line each; then a chart each
        each, *paths = charts[f"layer {layer}: gradient norm per feedback path"]
        assert each.title.startswith(f"layer {layer}: every path and gate")
        names = [f"{kind}{n}" for kind in ("path", "gate") for n in (1, 2)]
        assert shown(each) == {(name, f"lines/layer{layer}_grad_norm") for name in names}
        assert [c.title.split(":")[0] for c in paths] == [
            f"layer {layer}, {kind} {n}" for kind in ("path", "gate") for n in (1, 2)
        ]
        assert [shown(c) for c in paths] == [{(".", f"grad_norm/layer{layer}/{n}")} for n in names]
    (loss,) = charts["loss"]  # first: train, valid and test loss, a line each
    assert [c.title for c in layout.category][0] == "loss"
    assert shown(loss) == {(split, "lines/loss") for split in ("train", "valid", "test")}
    (text,) = [t for t in events.Tags()["tensors"] if t.startswith("run/test")]
    table = events.Tensors(text)[-1].tensor_proto.string_val[0].decode()
    assert f"| best by validation ({state.test_checkpoint}, valid ppl " in table
    assert f"**{state.test['ppl']:.2f}**" in table


def test_tensorboard_tells_lines_apart_and_puts_the_test_at_the_best_checkpoint(
    workdir: Path,
) -> None:
    """Train, valid and test loss and every path's gradient norm are each a run of their own
    (a colour each, named in the run list) holding the run's own values; test/loss and
    test/ppl stand at the step of the checkpoint they score, the best by validation (step 14,
    an epoch at lr 30 after it validating worse), test/*_last at the last step."""
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    run = _out(workdir, "tb_lines")
    check_ok(_train(workdir, "tb_lines", "--set", "train.epochs=1"))
    check_ok(_train(workdir, "tb_lines", "--set", "train.epochs=2", "--set", "optim.lr=30"))
    state = TrainerState.read(list_checkpoints(run)[-1])
    assert (state.best_checkpoint, state.step) == ("step_00000014", 28)
    main = scalars(run)
    assert {step for step, _ in main["test/ppl"]} == {14}  # the first end's and this one's
    assert main["test/ppl"][-1][1] == pytest.approx(state.test["ppl"], rel=1e-6)
    assert main["test/ppl_last"][-1] == (28, pytest.approx(state.test_last["ppl"], rel=1e-6))

    mux = EventMultiplexer().AddRunsFromDirectory(str(event_folder(run))).Reload()

    def line(series: str, tag: str) -> list[tuple[int, float]]:
        return [(e.step, e.value) for e in mux.Scalars(series, tag)]

    assert line("train", "lines/loss") == main["train/loss"]
    assert line("valid", "lines/loss") == main["valid/loss"]
    assert line("test", "lines/loss")[-1] == main["test/loss"][-1]
    for name in ("path1", "path3", "gate2"):
        assert line(name, "lines/layer0_grad_norm") == main[f"grad_norm/layer0/{name}"]


def test_checkpoints_pruned_to_newest_plus_best(straight_1: Path) -> None:
    complete = list_checkpoints(straight_1)
    state = TrainerState.read(complete[-1])
    names = {c.name for c in complete}
    # keep_checkpoints = 2: the newest two (the second epoch's end at 28, the last step) and
    # the best by validation, wherever it is
    assert names == {state.best_checkpoint, f"step_{28:08d}", f"step_{K_STEPS:08d}"}
    assert complete[-1].name == f"step_{K_STEPS:08d}"
    assert not list((straight_1 / "checkpoints").glob(".tmp_*"))


def test_sigkill_while_checkpointing_keeps_previous_checkpoint(
    workdir: Path, straight_1: Path
) -> None:
    out = _out(workdir, "killed")
    args = [
        _config(workdir),
        "--set",
        f"train.output_dir={out}",
        "--set",
        f"train.max_steps={K_STEPS}",
    ]
    proc = run_patched(KILL_IN_SECOND_CHECKPOINT, *args)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    complete = list_checkpoints(out)
    assert [c.name for c in complete] == ["step_00000005"]
    partial = out / "checkpoints" / ".tmp_step_00000010"
    assert (partial / "model.safetensors").is_file() and not (partial / "DONE").exists()
    assert load_file(str(complete[0] / "model.safetensors"))  # the previous one loads
    rerun = _train(workdir, "killed", "--set", f"train.max_steps={K_STEPS}")
    check_ok(rerun)
    assert f"resuming from {complete[0]}" in rerun.stderr
    assert not partial.exists()  # leftovers are cleaned at the next save
    _assert_bit_identical(final_weights(straight_1), final_weights(out))


def test_sigterm_checkpoints_and_exits_zero(workdir: Path) -> None:
    out = _out(workdir, "preempted")
    args = [_config(workdir), "--set", f"train.output_dir={out}", "--set", "train.epochs=1000"]
    args += ["--set", "train.checkpoint_every=0"]
    proc = start([sys.executable, "-m", "hornn_dist.train", *args])
    lines = read_until(proc, "step 20: loss")
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=120)
    log = "".join(lines) + rest
    assert proc.returncode == 0, log[-3000:]
    assert "SIGTERM received: checkpointing at step" in log
    newest = list_checkpoints(out)[-1]
    state = TrainerState.read(newest)
    assert state.step >= 20 and state.epoch < 1000
    assert state.stop_reason == "stopped by SIGTERM; run again to resume"
    assert f"training ended at step {state.step}: stopped by SIGTERM" in log
    assert "test:" not in log  # stopped early: no final test pass


@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_during_the_stop_checkpoint_waits_for_it(
    workdir: Path, first: signal.Signals
) -> None:
    out = _out(workdir, f"double-{first.name}")
    args = [_config(workdir), "--set", f"train.output_dir={out}", "--set", "train.epochs=1000"]
    args += ["--set", "train.checkpoint_every=0", "--set", "model.hidden_size=1024"]
    proc = start([sys.executable, "-m", "hornn_dist.train", *args])
    lines = read_until(proc, "step 10: loss")
    proc.send_signal(first)
    lines += read_until(proc, "checkpointing at step")
    proc.send_signal(signal.SIGINT)  # what a user does when the first seems slow
    _, rest = proc.communicate(timeout=120)
    log = "".join(lines) + rest
    assert proc.returncode == 0, log[-3000:]
    (stop,) = run_events(out, "stop")  # the first signal's stop, at the step it checkpointed
    step = stop["step"]
    assert (stop["code"], stop["signal"]) == ("signal", first.name)
    assert [c.name for c in list_checkpoints(out)] == [f"step_{step:08d}"], log[-3000:]
    assert not list((out / "checkpoints").glob(".tmp_*"))
    assert TrainerState.read(list_checkpoints(out)[-1]).step == step


# `python -c SIGNALS_AT_STEP_12 CONFIG ...`: stop signals at step 12's log line, before the
# stop's checkpoint begins (the tiny config saves steps 5 and 10)
SIGNALS_AT_STEP_12 = """
import os, signal, sys
from hornn_dist import train
from hornn_dist.runtime import run_cli
from hornn_dist.training.trainer import Trainer

SENT = [signal.Signals[name] for name in os.environ["SIGNALS"].split(",")]
real_log_train = Trainer._log_train
def log_then_signal(self, *args):
    real_log_train(self, *args)
    if self.progress.step == 12:
        for signum in SENT:
            os.kill(os.getpid(), signum)
Trainer._log_train = log_then_signal
run_cli(train.main, sys.argv[1:])
"""


# `python -c SIGTERM_AT_STEP CONFIG ...`: SIGTERM (or $SIGNAL) to itself once step $STOP_AT has
# run, before the loop looks for a stop: the run stops there, whatever the log cadence
SIGTERM_AT_STEP = """
import os, signal, sys
from hornn_dist import train
from hornn_dist.runtime import run_cli
from hornn_dist.training.trainer import Trainer

real_stop_requested = Trainer._stop_requested
def signal_then_look(self):
    if self.progress.step == int(os.environ["STOP_AT"]):
        os.kill(os.getpid(), signal.Signals[os.environ.get("SIGNAL", "SIGTERM")])
    return real_stop_requested(self)
Trainer._stop_requested = signal_then_look
run_cli(train.main, sys.argv[1:])
"""


def test_lines_after_a_stop_between_log_lines_are_the_uninterrupted_runs(
    workdir: Path, straight_1: Path
) -> None:
    """A run stopped by SIGTERM at step 13, between two log lines (log.every 2), and resumed
    logs at steps 14, 16, ... what the run straight through logged: each line's loss averages
    the steps since the line before, step 13 included, in metrics.jsonl and TensorBoard."""
    out = _out(workdir, "stopped13")
    args = [_config(workdir), "--set", f"train.output_dir={out}"]
    proc = run_patched(SIGTERM_AT_STEP, *args, extra_env={"STOP_AT": "13"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list_checkpoints(out)[-1].name == "step_00000013"
    check_ok(_train(workdir, "stopped13", "--set", f"train.max_steps={K_STEPS}"))
    _assert_same_train_log(out, straight_1, after=13)
    _assert_bit_identical(final_weights(straight_1), final_weights(out))
    epoch_1 = _epoch_lines(out)[1][1]  # its train ppl: of steps 1 to 14, the stop between
    assert epoch_1 == _epoch_lines(straight_1)[1][1]


@pytest.mark.parametrize("sent", ["SIGINT", "SIGTERM"])
def test_a_stop_on_one_process_at_a_checkpoint_step_is_told_once_and_plainly(
    workdir: Path, sent: str
) -> None:
    """A stop at step 5, which checkpoint_every 5 saves: the signal's line says nothing of
    several processes, the stop's line names what a further signal of this kind does, and
    step 5's checkpoint is saved once, then holds the stop's reason (not "saved" twice)."""
    out = _out(workdir, f"stop5-{sent}")
    args = [_config(workdir), "--set", f"train.output_dir={out}"]
    proc = run_patched(SIGTERM_AT_STEP, *args, extra_env={"STOP_AT": "5", "SIGNAL": sent})
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stderr.splitlines()
    (heard,) = [line for line in log if line.startswith(f"{sent} received: the run")]
    assert heard == (
        f"{sent} received: the run checkpoints and exits after its current step; pressing "
        "again is safe"
    )
    (stop,) = [line for line in log if f"{sent} received: checkpointing at step 5" in line]
    further = "another Ctrl-C" if sent == "SIGINT" else "another stop signal"
    assert stop.endswith(f"and exiting ({further} waits for this checkpoint)")
    step_5 = [line for line in log if "step_00000005 (" in line]
    assert [line.split(" INFO ")[1].split(" /")[0] for line in step_5] == [
        "saved checkpoint",
        "recorded the stop in checkpoint",
    ]
    assert TrainerState.read(list_checkpoints(out)[-1]).stop_reason.startswith(f"stopped by {sent}")


@pytest.mark.parametrize(
    "sent", ["SIGINT,SIGINT", "SIGTERM,SIGTERM,SIGINT", "SIGINT,SIGTERM,SIGINT"]
)
def test_any_number_of_stop_signals_checkpoint_the_last_finished_step(
    workdir: Path, sent: str
) -> None:
    out = _out(workdir, f"signals-{sent.replace(',', '-')}")
    args = [_config(workdir), "--set", f"train.output_dir={out}", "--set", "train.epochs=1000"]
    proc = run_patched(SIGNALS_AT_STEP_12, *args, extra_env={"SIGNALS": sent})
    assert proc.returncode == 0, proc.stderr[-3000:]
    newest = list_checkpoints(out)[-1]
    assert newest.name == "step_00000012"  # not step 10: nothing since the last save is lost
    assert TrainerState.read(newest).stop_reason.startswith(f"stopped by {sent.split(',')[0]}")
    again = [line for line in proc.stderr.splitlines() if "received again" in line]
    assert len(again) == sent.count(",")
    assert again[0].endswith(
        "received again: the current step finishes, then its checkpoint is written and the run "
        "exits; to abort without that checkpoint press Ctrl-\\ (SIGQUIT) or send SIGKILL (the "
        "checkpoint before stays loadable)"
    )
    assert "Traceback" not in proc.stderr and "interrupted" not in proc.stderr


@pytest.mark.parametrize(
    "sent",
    [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGTERM, signal.SIGINT)],
    ids=["INT-INT", "TERM-TERM-INT"],
)
def test_signals_from_outside_mid_step_lose_no_step(
    workdir: Path, sent: tuple[signal.Signals, ...]
) -> None:
    out = _out(workdir, "outside-" + "-".join(s.name for s in sent))
    args = [_config(workdir), "--set", f"train.output_dir={out}", "--set", "train.epochs=1000"]
    args += ["--set", "train.checkpoint_every=0", "--set", "model.hidden_size=1024"]
    proc = start([sys.executable, "-m", "hornn_dist.train", *args])
    lines = read_until(proc, "step 10: loss")  # no checkpoint yet: the stop's is the first
    for i, signum in enumerate(sent):  # a user pressing Ctrl-C again while a slow step runs
        proc.send_signal(signum)  # the next once this one is handled: none merges with it
        lines += read_until(proc, "received: the run" if i == 0 else "received again")
    _, rest = proc.communicate(timeout=120)
    log = "".join(lines) + rest
    assert proc.returncode == 0, log[-3000:]
    (stop,) = run_events(out, "stop")
    step = stop["step"]
    assert (stop["code"], stop["signal"]) == ("signal", sent[0].name)
    assert step >= 10 and [c.name for c in list_checkpoints(out)] == [f"step_{step:08d}"]
    assert log.count("received again") == len(sent) - 1


def test_signals_after_training_ended_leave_the_exit_0(workdir: Path) -> None:
    """SIGTERM and Ctrl-C, again and again from the "training ended" line until the process is
    gone (the interpreter's shutdown takes a second or two): the run still exits 0."""
    out = _out(workdir, "ended-signals")
    args = [_config(workdir), "--set", f"train.output_dir={out}", "--set", "train.max_steps=4"]
    proc = start([sys.executable, "-m", "hornn_dist.train", *args])
    lines = read_until(proc, "training ended at step 4")
    assert "training ended at step 4" in lines[-1], "".join(lines)[-3000:]
    sent = 0
    while proc.poll() is None:
        proc.send_signal((signal.SIGTERM, signal.SIGINT)[sent % 2])
        sent += 1
        time.sleep(0.02)
    log = "".join(lines) + proc.stderr.read()
    assert proc.returncode == 0, f"exit {proc.returncode} after {sent} signals\n{log[-3000:]}"
    assert sent > 5 and "Traceback" not in log  # signals all through the shutdown
    assert [c.name for c in list_checkpoints(out)][-1] == "step_00000004"


def test_resume_refuses_a_different_model(workdir: Path, straight_1: Path) -> None:
    copy = _out(workdir, "mismatch")
    shutil.copytree(straight_1, copy)
    proc = _train(workdir, "mismatch", "--set", "model.hidden_size=14", "--set", "model.order=2")
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot resume from")
    assert "model.hidden_size: checkpoint 12 != config 14" in last
    assert "model.order: checkpoint 3 != config 2" in last
    assert "Traceback" not in proc.stderr


def test_resume_with_another_engine(workdir: Path, straight_1: Path) -> None:
    """The engine is how, not what: a run resumes under another one and trains on the same."""
    name = "engine_switch"
    check_ok(_train(workdir, name, "--set", f"train.max_steps={K_FIRST}"))
    second = _train(
        workdir, name, "--set", "model.engine=loop", "--set", f"train.max_steps={K_STEPS}"
    )
    check_ok(second)
    assert "resuming from" in second.stderr
    assert "another way to compute the same model (model.engine: 'auto' -> 'loop')" in second.stderr
    got, want = final_weights(_out(workdir, name)), final_weights(straight_1)
    for key in want:  # the same model and data; the engines sum in different orders
        torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-5)


def test_evaluate_two_ranks_equals_one(straight_1: Path) -> None:
    one = run_here("hornn_dist.evaluate", str(straight_1), "--split", "valid")
    two = launch_two_ranks("hornn_dist.evaluate", str(straight_1), "--split", "valid")
    check_ok(one)
    check_ok(two)
    line_1 = one.stdout.strip().splitlines()[-1].split()
    line_2 = [line for line in two.stdout.splitlines() if line.startswith("split valid:")]
    assert len(line_2) == 1  # printed by the main process only
    line_2 = line_2[0].split()
    assert line_1[3] == line_2[3] == "216"  # every target token once, across both ranks
    assert float(line_1[5]) == pytest.approx(float(line_2[5]), rel=1e-6)


def test_evaluate_plans_the_layers_for_the_streams_it_runs(straight_1: Path) -> None:
    proc = run_here("hornn_dist.evaluate", str(straight_1), "--split", "valid", "--batch-size", "3")
    check_ok(proc)
    [label] = [line for line in proc.stderr.splitlines() if "HORNN layers of" in line]
    assert " for 3 streams: " in label, label  # not the run's train.eval_batch_size (4)


def test_no_resume_sets_the_previous_run_aside(workdir: Path, straight_1: Path) -> None:
    copy = _out(workdir, "restart")
    shutil.copytree(straight_1, copy)
    proc = _train(workdir, "restart", "--no-resume", "--set", "train.max_steps=4")
    check_ok(proc)
    assert "resuming" not in proc.stderr
    # beside the run, not inside it: runs/demo holds the new run alone
    (aside,) = workdir.glob("restart.replaced-*")
    assert f"to {aside}" in proc.stderr
    assert list_checkpoints(aside)[-1].name == f"step_{K_STEPS:08d}"  # nothing lost
    assert (aside / "tensorboard").is_dir()
    assert "max_steps = 30" in (aside / "config.toml").read_text()  # the old run's config
    assert {p.name for p in copy.iterdir()} == {
        ".lock",
        "checkpoints",
        "config.toml",
        "metrics.jsonl",
        "tensorboard",
        "train.log",  # the new run's; the old one's moved aside with its run
    }
    assert (aside / "train.log").is_file() and (aside / "metrics.jsonl").is_file()
    assert [c.name for c in list_checkpoints(copy)] == ["step_00000004"]


def test_each_run_start_writes_tensorboard_events_into_a_folder_of_its_own(
    workdir: Path, straight_1: Path
) -> None:
    """A run started over writes its TensorBoard events where no earlier run's lie, so that a
    TensorBoard watching the runs never draws the new run into the old one's lines: after
    --no-resume, and after a start where the run had no checkpoint to resume (stopped before
    its first)."""
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    def shown(folder: Path) -> list[str]:  # the runs `tensorboard --logdir folder` lists
        runs = EventMultiplexer().AddRunsFromDirectory(str(folder)).Reload().Runs()
        return sorted({"/".join(run.split("/")[:2]) for run in runs})  # less their lines

    run = _out(workdir, "restarts")
    shutil.copytree(straight_1, run)
    (old,) = shown(run)
    check_ok(_train(workdir, "restarts", "--no-resume", "--set", "train.max_steps=4"))
    (aside,) = workdir.glob("restarts.replaced-*")
    (new,) = shown(run)
    assert new != old  # not the run (path) the old run's events had in TensorBoard
    assert shown(aside) == [old]
    new = run / new
    assert [s for s, _ in scalars(aside)["train/loss"]] == list(range(2, K_STEPS + 1, 2))
    assert [s for s, _ in scalars(run)["train/loss"]] == [2, 4]

    shutil.rmtree(run / "checkpoints")  # as a run stopped before its first checkpoint leaves it
    check_ok(_train(workdir, "restarts", "--set", "train.max_steps=2"))
    first, second = sorted((run / "tensorboard").iterdir())
    assert first == new and second.name > new.name  # start order
    assert [s for s, _ in scalars(run)["train/loss"]] == [2]  # the second start's alone
    state = TrainerState.read(list_checkpoints(run)[-1])
    assert state.tensorboard_run == second.name


@pytest.mark.parametrize(("first", "then"), [(1, 2), (2, 1)])
def test_resume_on_another_number_of_processes(
    workdir: Path, straight_1: Path, first: int, then: int
) -> None:
    name = f"elastic{first}{then}"
    check_ok(_train(workdir, name, "--set", f"train.max_steps={K_FIRST}", ranks=first))
    second = _train(workdir, name, "--set", f"train.max_steps={K_STEPS}", ranks=then)
    check_ok(second)
    assert f"written by {first} processes, now {then}" in second.stderr
    resumed, straight = final_weights(_out(workdir, name)), final_weights(straight_1)
    for key in straight:  # same data order for any process count: equal up to reduction order
        torch.testing.assert_close(resumed[key], straight[key], rtol=1e-4, atol=1e-5)
    # the loss window saved at step 7 by `first` processes is the window `then` go on with
    _assert_same_train_log(_out(workdir, name), straight_1, after=K_FIRST, rel=1e-4)
