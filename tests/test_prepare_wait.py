"""Preparation under `accelerate launch`: one process prepares, the others wait with no timeout,
and a failed preparation ends every process with the same one line (2 real ranks, gloo)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from hornn_dist.data.pipeline import default_workers
from hornn_dist.prepare import build_parser
from tests.train_helpers import REPO, env, two_rank_command, write_tiny_config

SLOW_BYTES = 120_000_000  # about 15 s of preparation on one core here (8 s for 60 MB)


def _generate(path: Path, size: int) -> None:
    spec = importlib.util.spec_from_file_location(
        "prepare_speed", REPO / "benchmarks/prepare_speed.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate(path, size)


def _launch(args: list[str], port: int, timeout: int) -> subprocess.CompletedProcess:
    # one core for both ranks: the preparing process gets one worker and takes long enough
    cmd = ["taskset", "-c", "0", *two_rank_command("hornn_dist.train", *args, port=port)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env(), timeout=timeout)


def test_workers_default_to_the_cores_this_process_may_use() -> None:
    assert build_parser().parse_args(["c.toml"]).workers is None
    import os

    assert default_workers() == len(os.sched_getaffinity(0))


@pytest.mark.timeout(400)
def test_ranks_wait_for_a_preparation_longer_than_the_collective_timeout(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path)
    big = tmp_path / "big.txt"
    _generate(big, SLOW_BYTES)
    args = [str(config), "--set", f"data.train=['{big}']", "--set", "data.max_vocab=500"]
    args += ["--set", "train.collective_timeout=10", "--set", "train.max_steps=3"]
    proc = _launch(args, port=29691, timeout=360)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "rank 1: waiting for rank 0 to prepare" in log, log[-4000:]
    assert "no timeout applies" in log
    waited = float(re.search(r"rank 1: \S+ is prepared; waited ([0-9.]+) s", log).group(1))
    assert waited > 10, f"preparation took {waited} s, not longer than the timeout: {log[-3000:]}"
    assert "step 3" in log and "Traceback" not in log


@pytest.mark.timeout(300)
def test_a_failed_preparation_ends_every_rank_with_the_same_line(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path)
    bad = tmp_path / "train.txt"
    bad.write_bytes(bad.read_bytes() + b"w1 \xff\xfe w2\n")
    args = [str(config), "--set", "data.errors='strict'", "--set", "train.collective_timeout=10"]
    proc = _launch(args, port=29692, timeout=240)
    log = proc.stdout + proc.stderr
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0, log[-4000:]
    assert len(errors) == 1, log[-4000:]  # from the main process; rank 1's in torchrun's summary
    assert f"traceback : {errors[0]}" in log  # rank 1's error file: the same line
    assert "invalid UTF-8" in errors[0] and str(bad) in errors[0]
    # the launcher prints its own traceback (ChildFailedError) when a rank exits non-zero;
    # the ranks print none
    assert not re.search(r'File ".*hornn_dist', log) and "did not answer" not in log
