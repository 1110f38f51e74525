"""Where a run lives and what it says: the start-up and save lines, train.log (appended on
resume), `--print-config`, the console scripts, `report RUN_FOLDER`, and the epoch wording.
Real runs of the CLI on the tiny corpus."""

from __future__ import annotations

import importlib
import re
import runpy
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

from hornn_dist.config import load_config, read_toml
from hornn_dist.run.run_state import TrainerState
from hornn_dist.util.wording import counted
from tests.train_helpers import (
    REPO,
    check_ok,
    env,
    launch_two_ranks,
    prepared_tiny,
    read_until,
    run_here,
    train_into,
    two_rank_command,
    write_tiny_config,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

STEPS_PER_EPOCH = 14  # the tiny config: 456 train tokens, 4 streams x bptt 8
COMMANDS = ("train", "prepare", "evaluate", "generate", "export", "sweep", "report")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_tiny(tmp_path_factory.mktemp("daily"))


def train(workdir: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    return train_into(workdir, workdir / name, *extra)


def test_a_run_names_its_folder_and_each_save_and_keeps_train_log(workdir: Path) -> None:
    run = workdir / "logged"
    first = train(workdir, "logged", "--set", "train.epochs=1")
    check_ok(first)
    assert f"run folder {run} (fresh run)" in first.stderr
    saves = re.findall(r"saved checkpoint (\S+) \(([^)]*)\)", first.stderr)
    assert [Path(folder).name for folder, _ in saves] == [
        "step_00000005",
        "step_00000010",
        f"step_{STEPS_PER_EPOCH:08d}",
    ]  # each step saved once: the test result then joins the epoch end's save, said so
    final = f"recorded the test score in checkpoint {run / 'checkpoints'}"
    assert first.stderr.count(final) == 1
    assert "4 streams x bptt 8 (4 per process x 1 process) |" in first.stderr
    assert saves[0][1] == "step 5, not validated"
    state = TrainerState.read(run / "checkpoints" / f"step_{STEPS_PER_EPOCH:08d}")
    ppl = state.valid_history[-1]["ppl"]
    assert saves[2][1] == f"valid ppl {ppl:.2f}, best"  # the only validation is the best
    assert "epoch 1 of 1 done" in first.stderr and ", 1 epoch |" in first.stderr
    assert "trained train.epochs = 1 epoch" in first.stderr

    log = (run / "train.log").read_text()
    assert log.startswith("=====") and "fresh run" in log.splitlines()[0]
    assert "data: " in log  # held from before the folder was known (opening the corpus)
    assert log.count("saved checkpoint") == 3 and "test: " in log
    # the last line, after the final validation, the test and their save
    assert log.splitlines()[-1].endswith(
        f"training ended at step {STEPS_PER_EPOCH}: trained train.epochs = 1 epoch"
    )

    again = train(workdir, "logged", "--set", "train.epochs=2")
    check_ok(again)
    assert "in epoch 2 of 2, batch 0 of 14" in again.stderr
    log = (run / "train.log").read_text()
    separators = [line for line in log.splitlines() if line.startswith("=====")]
    newest = f"step_{STEPS_PER_EPOCH:08d}"
    assert len(separators) == 2 and f"resumed from {run / 'checkpoints' / newest}" in separators[1]
    assert log.count("epoch 2 of 2 done") == 1 and log.count("epoch 1 of 1 done") == 1

    done = train(workdir, "logged", "--set", "train.epochs=2")
    check_ok(done)
    assert "nothing to train: the run trained 2 epochs; raise train.epochs above 2" in done.stderr


def test_an_error_of_the_run_ends_its_train_log(workdir: Path) -> None:
    """A run that stops with an error writes its one-line `error:` into train.log too."""
    run = workdir / "failing"
    diverging = ["optim.lr=1000", "optim.clip_mode=norm", "optim.clip=0", "optim.max_col_norm=0"]
    sets = [arg for item in [*diverging, "model.activation=relu"] for arg in ("--set", item)]
    proc = train(workdir, "failing", "--set", "train.max_steps=20", *sets)  # NaN mid-run
    assert proc.returncode == 2
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1
    assert (run / "train.log").read_text().splitlines()[-1] == error[0]


def test_print_config_round_trips_to_the_same_run_config(tmp_path: Path) -> None:
    overrides = ["train.epochs=3", "model.order=2", "data.min_count=3"]
    proc = run_here(
        "hornn_dist.train",
        "configs/demo.toml",
        *[arg for item in overrides for arg in ("--set", item)],
        "--print-config",
    )
    check_ok(proc)
    assert '# filled in by preset "demo":' in proc.stdout and "# source = " in proc.stdout
    path = tmp_path / "printed.toml"
    path.write_text(proc.stdout)
    read_toml(path, "printed config", "")  # valid TOML
    expected = load_config(REPO / "configs" / "demo.toml", overrides)
    assert load_config(path) == expected
    assert load_config(path).data.toml_table() == expected.data.toml_table()  # same corpus folder
    assert not (REPO / "runs" / "demo" / "printed").exists()


def test_every_console_script_is_its_module_and_runs_help(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each console script is its module's `cli`, and its --help is `python -m MODULE --help`'s
    (both run in this process: the entry point, then the module as __main__)."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert sorted(scripts) == sorted(f"hornn-{name}" for name in COMMANDS)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)  # run_cli sets its own
    for name in COMMANDS:
        target = scripts[f"hornn-{name}"]
        assert target == f"hornn_dist.{name}:cli"
        module, _, function = target.partition(":")
        monkeypatch.setattr(sys, "argv", [f"hornn-{name}", "--help"])
        with pytest.raises(SystemExit) as ended:
            getattr(importlib.import_module(module), function)()
        assert ended.value.code == 0
        console = capsys.readouterr().out
        assert "docs/config.md (one table per [section])" in console.replace("\n", " ")
        monkeypatch.setattr(sys, "argv", [module, "--help"])
        with pytest.raises(SystemExit) as ended, warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module is imported already
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        assert ended.value.code == 0
        assert capsys.readouterr().out == console


def test_report_of_a_single_finished_run(workdir: Path) -> None:
    check_ok(train(workdir, "single", "--set", "train.epochs=1"))
    proc = run_here("hornn_dist.report", str(workdir / "single"), "--no-plots")
    check_ok(proc)
    assert (workdir / "single" / "report" / "report.md").is_file()
    assert f"from 1 run in `{workdir / 'single'}`" in proc.stdout  # the run itself, finished
    assert "(1 finished)" in proc.stdout


def test_tokens_per_sec_leaves_out_the_paused_time() -> None:
    from hornn_dist.training.metrics import Throughput

    now = [100.0]
    speed = Throughput(clock=lambda: now[0])
    speed.add(1000)
    now[0] += 0.3  # 0.1 s of training, then a validation of 0.2 s: not training time
    speed.exclude(0.2)
    assert speed.rate() == pytest.approx(1000 / 0.1)  # without the exclusion: 1000 / 0.3
    speed.add(500)
    now[0] += 0.5
    assert speed.rate() == pytest.approx(500 / 0.5)  # a new interval from the last rate()


def test_epoch_wording() -> None:
    assert counted(1, "epoch") == "1 epoch" and counted(3, "epoch") == "3 epochs"
    assert counted(0, "run") == "0 runs"


@pytest.mark.integration
def test_a_config_error_under_a_two_process_launch_is_printed_once(tmp_path: Path) -> None:
    """Real `accelerate launch` of 2 ranks: the main process prints the error; rank 1's goes
    to its torchrun error file, which torchrun's failure summary shows in place of its
    "To enable traceback" pointer."""

    proc = launch_two_ranks(
        "hornn_dist.train", "configs/demo.toml", "--set", "train.bptt=0", timeout=240
    )
    log = proc.stdout + proc.stderr
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0
    assert errors == ["error: train.bptt must be >= 1, got 0"], log
    # the main rank's error file (rank 1's too, when torchrun had not stopped it before)
    assert "traceback : error: train.bptt must be >= 1" in log
    assert "To enable traceback" not in log and "hornn_dist/" not in log  # no rank traceback


def _wrapped(*args: str) -> list[str]:
    """Return `python -m hornn_dist.launch` of 2 CPU ranks: accelerate launch's arguments."""

    launch = two_rank_command("hornn_dist.train", *args)
    return [sys.executable, "-m", "hornn_dist.launch", *launch[3:]]  # less "python -m accelerate.."


@pytest.mark.integration
def test_a_config_error_under_the_quiet_launcher_is_two_lines() -> None:
    proc = subprocess.run(
        _wrapped("configs/demo.toml", "--set", "train.bptt=0"),
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env(),
        timeout=240,
    )
    lines = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode != 0
    assert lines[0] == "error: train.bptt must be >= 1, got 0", lines
    assert len(lines) == 2 and lines[1].startswith("launch: failed (rank 0 exit 2"), lines


@pytest.mark.integration
def test_an_error_of_one_process_under_the_quiet_launcher_is_two_lines(tmp_path: Path) -> None:
    """Accelerate's simple launcher (one process) raises CalledProcessError, whose traceback
    `accelerate launch` prints after the run's own line; the quiet launcher says one line."""
    config = write_tiny_config(tmp_path)
    (tmp_path / "valid.txt").unlink()
    command = [sys.executable, "-m", "hornn_dist.launch", "--num_processes", "1", "--cpu",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "-m", "hornn_dist.train", str(config)]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env(), timeout=240)
    lines = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode == 1, lines
    assert lines[-2].startswith("error: data.valid: no file matches"), lines
    assert lines[-1] == "launch: failed (exit 2)" and "Traceback" not in proc.stderr, lines
    assert not (tmp_path / "run").exists()  # nothing written: no empty run folder either


@pytest.mark.integration
def test_ctrl_c_under_the_quiet_launcher_checkpoints_without_a_traceback(tmp_path: Path) -> None:
    import os
    import signal

    config = write_tiny_config(tmp_path, train_words=20_000)
    # H 1024: a step slow enough that the second Ctrl-C lands before the stop's checkpoint
    command = _wrapped(str(config), "--set", "train.epochs=50", "--set", "model.hidden_size=1024")
    proc = subprocess.Popen(
        command, cwd=REPO, env=env(), stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    lines = read_until(proc, "step 4:")
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C as a terminal sends it: to the process group
    lines += read_until(proc, "received: the run checkpoints")  # said at once, not at the step
    os.killpg(proc.pid, signal.SIGINT)  # a second Ctrl-C: the checkpoint still comes
    lines += proc.stderr.read().splitlines(keepends=True)
    proc.wait(timeout=120)
    log = "".join(lines)
    assert "SIGINT received: checkpointing" in log and "saved checkpoint" in log, log
    assert log.count("received: the run checkpoints") == 1, log  # the main process speaks
    assert "(2 processes: within about 5 s plus one step)" in log, log
    assert log.count("received again") == 1, log  # for both ranks
    assert "Traceback" not in log and "SignalException" not in log, log
    assert lines[-1] == "launch: the launcher got SIGINT and passed it on to the ranks\n"


@pytest.mark.integration
def test_the_quiet_launcher_without_a_launch_config_prints_only_the_error(tmp_path: Path) -> None:
    """No Accelerate config file: `accelerate launch` prints its 6-line warning of the defaults
    it filled in before the run's own line; the quiet launcher leaves it out."""
    command = [sys.executable, "-m", "hornn_dist.launch", "-m", "hornn_dist.train",
               "configs/demo.toml", "--set", "train.bptt=0"]  # fmt: skip
    bare = env() | {"HF_HOME": str(tmp_path / "hf")}  # where Accelerate looks for its config
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=bare, timeout=240)
    lines = (proc.stdout + proc.stderr).splitlines()
    assert lines == ["error: train.bptt must be >= 1, got 0", "launch: failed (exit 2)"], lines
    plain = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", *command[3:]],
        capture_output=True, text=True, cwd=REPO, env=bare, timeout=240,
    )  # fmt: skip
    assert "The following values were not passed to `accelerate launch`" in plain.stderr


@pytest.mark.integration
def test_a_failure_of_the_launcher_itself_is_one_line_under_the_quiet_launcher() -> None:
    """Not a rank's failure but the agent's (here a rendezvous backend torch does not know):
    one `launch:` line naming it, no traceback."""
    command = [sys.executable, "-m", "hornn_dist.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--rdzv_backend", "bogus", "-m", "hornn_dist.train", "configs/demo.toml"]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env(), timeout=240)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.splitlines()[-1].startswith(
        "launch: failed (ValueError: The rendezvous backend 'bogus' is not registered"
    )
