"""Preparation under `accelerate launch`: one process prepares, the others wait while its
heartbeat moves (longer than any collective timeout), a stalled preparing process ends them
with one line, and a failed preparation ends every process with the same one line (2 real
ranks, gloo)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from hornn_dist.config import load_config
from hornn_dist.data.pipeline import default_workers
from hornn_dist.prepare import parse_args
from hornn_dist.util.errors import ConfigError
from tests.train_helpers import (
    REPO,
    children,
    env,
    read_until,
    start,
    two_rank_command,
    write_tiny_config,
)

# real 2-process launches that wait for one preparation
pytestmark = pytest.mark.integration


def _launch(args: list[str], timeout: int) -> subprocess.CompletedProcess:
    cmd = two_rank_command("hornn_dist.train", *args)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env(), timeout=timeout)


def test_workers_default_to_the_cores_this_process_may_use() -> None:
    assert parse_args(["c.toml"]).workers is None
    import os

    assert default_workers() == len(os.sched_getaffinity(0))


# rank 0's real preparation of the tiny corpus, held 12 s (longer than the 10 s collective
# timeout) by a sleep: the heartbeat thread beats meanwhile, as through a long preparation,
# and the cores stay free for the other tests
_SLOW = """
import sys, time
from hornn_dist import train
from hornn_dist.data import prepare_wait
from hornn_dist.runtime import run_cli

real_prepare = prepare_wait.prepare_corpus
def slow_prepare(*args, **kwargs):
    time.sleep(12)
    return real_prepare(*args, **kwargs)
prepare_wait.prepare_corpus = slow_prepare
run_cli(train.main, sys.argv[1:])
"""


def _script_command(script: Path, args: list[str]) -> list[str]:
    """Return the 2-rank launch of `script` (a train entry point) with the train `args`."""
    command = two_rank_command("hornn_dist.train", *args)
    at = command.index("-m", command.index("--main_process_port"))
    return [*command[:at], str(script), *command[at + 2 :]]


@pytest.mark.timeout(300)
def test_ranks_wait_for_a_preparation_longer_than_the_collective_timeout(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path)
    script = tmp_path / "slow.py"
    script.write_text(_SLOW)
    args = [str(config), "--set", "train.collective_timeout=10", "--set", "train.max_steps=3"]
    proc = subprocess.run(
        _script_command(script, args), capture_output=True, text=True, cwd=REPO, env=env(),
        timeout=240,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "rank 1: waiting for rank 0 to prepare" in log, log[-4000:]
    assert "its heartbeat moved" in log and "data.prepare_timeout = 600 s" in log
    assert not list((tmp_path / "cache").glob("*.heartbeat"))  # removed once prepared
    waited = float(re.search(r"rank 1: \S+ is prepared; waited ([0-9.]+) s", log).group(1))
    assert waited > 10, f"preparation took {waited} s, not longer than the timeout: {log[-3000:]}"
    assert "step 3" in log and "Traceback" not in log


@pytest.mark.timeout(300)
def test_a_failed_preparation_ends_every_rank_with_the_same_line(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path)
    bad = tmp_path / "train.txt"
    bad.write_bytes(bad.read_bytes() + b"w1 \xff\xfe w2\n")
    args = [str(config), "--set", "data.errors='strict'", "--set", "train.collective_timeout=10"]
    proc = _launch(args, timeout=240)
    log = proc.stdout + proc.stderr
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0, log[-4000:]
    assert len(errors) == 1, log[-4000:]  # from the main process; rank 1's in torchrun's summary
    assert f"traceback : {errors[0]}" in log  # rank 1's error file: the same line
    assert "invalid UTF-8" in errors[0] and str(bad) in errors[0]
    # the launcher prints its own traceback (ChildFailedError) when a rank exits non-zero;
    # the ranks print none
    assert not re.search(r'File ".*hornn_dist', log) and "did not answer" not in log


_STALL = """
import os, signal, sys
from hornn_dist import train
from hornn_dist.data import prepare_wait
from hornn_dist.runtime import run_cli

real_prepare = prepare_wait.prepare_corpus
def stop_while_preparing(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGSTOP)  # the preparing process, heartbeat thread and all
    return real_prepare(*args, **kwargs)
prepare_wait.prepare_corpus = stop_while_preparing
run_cli(train.main, sys.argv[1:])
"""


@pytest.mark.timeout(300)
def test_a_stalled_preparing_rank_ends_the_waiting_one_with_one_line(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path)
    script = tmp_path / "stall.py"
    script.write_text(_STALL)
    args = [str(config), "--set", "data.prepare_timeout=5", "--set", "train.max_steps=3"]
    proc = start(_script_command(script, args))
    try:
        lines = read_until(proc, "error:", timeout=200)
        workers = children(proc)
    finally:
        for pid in children(proc):  # the stopped rank 0: its SIGTERM from the launcher waits
            subprocess.run(["kill", "-KILL", str(pid)], check=False)
        _, rest = proc.communicate(timeout=120)
    log = "".join(lines) + rest
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, log[-4000:]
    assert "rank 1: rank 0 preparing" in errors[0] and "data.prepare_timeout = 5" in errors[0]
    stood = int(re.search(r"has not moved for (\d+) s", errors[0]).group(1))
    assert 5 <= stood <= 8, errors[0]
    assert workers, "the stopped rank was gone before the waiting one gave up"
    assert not re.search(r'File ".*hornn_dist', log)


def test_prepare_timeout_is_bounded() -> None:
    assert load_config(None).data.prepare_timeout == 600
    for bad in ("0", "4", "604801"):
        with pytest.raises(
            ConfigError,
            match=f"data.prepare_timeout must be between 5 and 604800 seconds, got {bad}",
        ):
            load_config(None, [f"data.prepare_timeout={bad}"])
