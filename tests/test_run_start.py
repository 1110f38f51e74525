"""How a run starts: its first line names the run folder; a launch that asked for more processes
than it got says so; a process group that never formed names what happened."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hornn_dist import runtime
from hornn_dist.config import load_config
from hornn_dist.training.trainer import Trainer
from hornn_dist.util.errors import DataError
from tests.train_helpers import REPO, check_ok, env, free_port, run_here, write_tiny_config


def test_the_first_line_of_a_run_is_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_tiny_config(tmp_path)
    (tmp_path / "valid.txt").unlink()  # the corpus fails after the first line: no training
    cfg = load_config(config, [f"train.output_dir={tmp_path / 'run'}"])
    with pytest.raises(DataError):
        Trainer(cfg)
    first = capsys.readouterr().err.splitlines()[0]
    assert first.endswith(
        f" INFO run folder {tmp_path / 'run'}: checkpoints/, config.toml, tensorboard/, log "
        "train.log, events metrics.jsonl"
    )


# ---------------------------------------------------------------- the launch's process count

LAUNCH = [sys.executable, "-m", "accelerate.commands.launch"]


@pytest.mark.parametrize(
    ("argv", "asked"),
    [
        ([*LAUNCH, "--num_processes", "2", "--cpu", "-m", "hornn_dist.train", "c.toml"], 2),
        (["/usr/bin/accelerate", "launch", "--num_processes=4", "--cpu", "train.py"], 4),
        (["/usr/bin/accelerate", "launch", "-m", "hornn_dist.train", "--num_processes", "8"], None),
        ([sys.executable, "-m", "hornn_dist.train", "c.toml"], None),
        (["/bin/bash", "run.sh"], None),
    ],
)
def test_the_process_count_a_launch_asked_for_is_read_from_its_command(
    argv: list[str], asked: int | None
) -> None:
    assert runtime.launch_asked_processes(argv) == asked


def test_a_launch_config_file_says_how_many_processes_it_asks_for(tmp_path: Path) -> None:
    yaml = tmp_path / "cpu.yaml"
    yaml.write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nnum_processes: 3\nuse_cpu: true\n"
    )
    argv = ["/usr/bin/accelerate", "launch", "--config_file", str(yaml), "-m", "hornn_dist.train"]
    assert runtime.launch_asked_processes(argv) == 3
    assert runtime.launch_asked_processes([*argv[:2], "--num_processes", "2", *argv[2:]]) == 2


@pytest.mark.integration
def test_accelerate_launch_cpu_with_two_processes_warns_that_one_runs(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path, train={"max_steps": 1, "checkpoint_every": 0})
    cmd = [*LAUNCH, "--num_processes", "2", "--cpu", "--num_machines", "1", "--mixed_precision",
           "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
           "-m", "hornn_dist.train", str(config)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warning = (
        "WARNING the launch asked for 2 processes but Accelerate started 1 (it does so under "
        "--cpu or distributed_type NO); for N processes on CPUs launch with `accelerate launch "
        "--multi_gpu --num_processes N --num_machines 1 --mixed_precision no --dynamo_backend "
        "no` (launch/README.md)"
    )
    said = [line for line in proc.stderr.splitlines() if "the launch asked" in line]
    assert len(said) == 1 and said[0].endswith(warning), proc.stderr
    logged = (tmp_path / "run" / "train.log").read_text().splitlines()
    assert [line for line in logged if line.endswith(warning)], logged[:10]


# ---------------------------------------------------------------- a group that never formed


def test_a_group_that_did_not_form_names_what_happened() -> None:
    err = RuntimeError("Timed out after 11 seconds waiting for clients. 1/2 clients joined.")
    line = runtime.group_start_failure(
        err, {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}, 10
    )
    assert line == (
        "rank 0: the 2 processes did not all join the process group at 10.0.0.1:29500 within "
        "train.collective_timeout = 10 s (Timed out after 11 seconds waiting for clients. 1/2 "
        "clients joined.); a process stopped or failed before it joined (see its log), or "
        "started later than that"
    )
    # a launched rank whose peer was stopped before it joined (gloo's words, measured)
    gloo = RuntimeError("wait timeout after 10000ms, keys: /default_pg/0//cpu//0/1")
    line = runtime.group_start_failure(
        gloo, {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1"}, 10
    )
    assert line.startswith(
        "rank 0: the 2 processes did not all join the process group at 127.0.0.1:?"
    )
    plain = runtime.group_start_failure(ValueError("MASTER_ADDR expected"), {"WORLD_SIZE": "2"}, 10)
    assert plain.endswith(
        "start multi-process runs with `accelerate launch` (see launch/README.md)"
    )


def test_a_group_that_failed_sooner_says_after_how_long_and_which_attempt() -> None:
    """A restarted group whose connection was refused 12 s in says so, and names torchrun's
    attempt, where it claimed the 600 s train.collective_timeout had run out."""
    err = RuntimeError(
        "Gloo connectFullMesh failed with [../gloo/transport/tcp/pair.cc:144] no error; "
        "Connection refused"
    )
    environ = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
               "TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_MAX_RESTARTS": "3"}  # fmt: skip
    line = runtime.group_start_failure(err, environ, 600, waited=12.3)
    assert line.startswith(
        "rank 0: the 2 processes could not form the process group at 127.0.0.1:29500 "
        "(torchrun's restart 1 of 3): after 12 s, within train.collective_timeout = 600 s, a "
        "connection between them failed (Gloo connectFullMesh failed"
    )
    # a timeout word 12 s in is gloo's own connect timeout, not train.collective_timeout's
    late = RuntimeError("Gloo connectFullMesh failed with [pair.h:311] Connect timeout [none]")
    assert "after 12 s, within" in runtime.group_start_failure(late, environ, 600, waited=12.3)
    assert "did not all join" in runtime.group_start_failure(late, environ, 600, waited=601)


@pytest.mark.integration
def test_a_rank_alone_at_the_start_ends_with_that_line(tmp_path: Path) -> None:
    """Rank 0 of 2 whose peer never starts: it says it is waiting, then names what happened."""
    config = write_tiny_config(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rank0 = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}  # fmt: skip
    cmd = [sys.executable, "-m", "hornn_dist.train", str(config), "--set",
           "train.collective_timeout=10"]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=REPO, env=env() | rank0, timeout=120
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: rank 0: the 2 processes did not all join the process group at 127.0.0.1:"
    ), proc.stderr
    assert "accelerate launch" not in errors[0]
    assert "rank 0: waiting for all 2 processes to join the process group" in proc.stderr
    assert os.environ.get("WORLD_SIZE") is None  # the test's own environment untouched


def test_a_run_that_fails_before_writing_anything_leaves_no_run_folder(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path)
    (tmp_path / "valid.txt").unlink()  # fails while the corpus is prepared
    proc = run_here("hornn_dist.train", str(config))
    assert proc.returncode == 2 and "data.valid: no file matches" in proc.stderr
    assert not (tmp_path / "run").exists()
    (tmp_path / "run").mkdir()  # a folder the user made is theirs: kept, empty as it was
    assert run_here("hornn_dist.train", str(config)).returncode == 2
    assert (tmp_path / "run").is_dir()


@pytest.mark.integration
def test_streams_that_two_processes_cannot_share_are_refused_before_the_corpus(
    tmp_path: Path,
) -> None:
    from tests.train_helpers import launch_two_ranks

    config = write_tiny_config(tmp_path, train={"batch_size": 3})
    (tmp_path / "valid.txt").unlink()  # preparing would fail: the layout is checked first
    proc = launch_two_ranks("hornn_dist.train", str(config))
    errors = {line for line in proc.stderr.splitlines() if line.startswith("error:")}
    assert errors == {
        "error: train.batch_size=3 is not divisible by the 2 processes; choose a multiple of 2"
    }, proc.stderr[-3000:]


def test_a_refused_resume_leaves_nothing_behind(tmp_path: Path) -> None:
    """`--resume` of a missing folder, or of a checkpoint of another corpus: one line, and
    no run folder holding only `.lock` (a user's own empty folder stays empty)."""
    config = write_tiny_config(tmp_path)
    out = tmp_path / "run"
    nope = run_here("hornn_dist.train", str(config), "--resume", str(tmp_path / "nope"))
    assert nope.returncode == 2 and "does not exist" in nope.stderr
    assert not out.exists()
    out.mkdir()
    assert run_here("hornn_dist.train", str(config), "--resume", "nope").returncode == 2
    assert list(out.iterdir()) == []
    out.rmdir()
    other = write_tiny_config(tmp_path / "other", data={"add_eos": False})
    trained = tmp_path / "other" / "run"
    check_ok(run_here("hornn_dist.train", str(other), "--set", "train.max_steps=5"))
    proc = run_here("hornn_dist.train", str(config), "--resume", str(trained))
    assert proc.returncode == 2 and f"cannot resume from {trained}" in proc.stderr, proc.stderr
    assert not out.exists()
