"""The memory check against the kernel: in a real memory cgroup, the largest
model the check accepts trains and is scored to the end, never OOM-killed; one size more is
refused in one line. Skipped only where the machine forbids creating a memory cgroup."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.train_helpers import REPO, check_ok, env, run_here, write_tiny_config

LIMIT = 512 << 20  # small: the sizes near it train a step in seconds
STEP = 128  # hidden sizes searched, in steps of this (5 trainings from 128 to 4096)


def _new_cgroup(limit: int) -> Path:
    """Return a fresh memory cgroup (v2, else v1) limited to `limit` bytes, or skip."""
    root = Path("/sys/fs/cgroup")
    name = f"hornn_test_{os.getpid()}_{time.monotonic_ns()}"
    choices = []
    if "memory" in _read(root / "cgroup.controllers").split():
        choices.append((root / name, "memory.max", "memory.swap.max"))
    if (root / "memory" / "memory.limit_in_bytes").is_file():
        choices.append(
            (root / "memory" / name, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
        )
    for folder, limit_file, swap_file in choices:
        try:
            folder.mkdir()
            (folder / limit_file).write_text(str(limit))
        except OSError:
            _remove(folder)
            continue
        try:  # no swap, where the kernel counts it: the limit is the memory
            (folder / swap_file).write_text("0" if swap_file == "memory.swap.max" else str(limit))
        except OSError:
            pass
        return folder
    pytest.skip("this machine does not let a test create a memory cgroup")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _remove(folder: Path) -> None:
    for _ in range(100):  # the killed or finished process leaves it a moment later
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


def _train_in(cgroup: Path, config: Path, hidden: int) -> subprocess.CompletedProcess:
    """Return the trainer's run of `config` at `hidden` inside `cgroup` (a real process)."""
    args = [
        sys.executable, "-m", "hornn_dist.train", str(config),
        "--set", f"model.hidden_size={hidden}",
        "--set", f"train.output_dir={config.parent / f'run{hidden}'}",
    ]  # fmt: skip
    join = f'echo $$ > "{cgroup}/cgroup.procs" && exec "$@"'
    return subprocess.run(
        ["sh", "-c", join, "sh", *args], capture_output=True, text=True, cwd=REPO, env=env()
    )


@pytest.mark.integration  # a search of five real trainings, ~10 s each
def test_no_size_the_check_accepts_is_oom_killed(tmp_path):
    config = write_tiny_config(
        tmp_path,
        model={"pooling": "fofe", "order": 3, "hidden_size": 16, "embedding_size": 16},
        train={"max_steps": 2, "checkpoint_every": 0, "epochs": 1},
    )
    check_ok(run_here("hornn_dist.prepare", str(config), "--quiet"))
    cgroup = _new_cgroup(LIMIT)
    try:
        accepted, refused = 1, 4096 // STEP  # in units of STEP: 4096 is refused in 512 MiB
        while refused - accepted > 1:
            middle = (accepted + refused) // 2
            proc = _train_in(cgroup, config, middle * STEP)
            assert proc.returncode in (0, 2), (
                f"hidden_size {middle * STEP} in a {LIMIT >> 20} MiB cgroup: exit "
                f"{proc.returncode} (-9: killed by the kernel)\n{proc.stderr[-2000:]}"
            )
            if proc.returncode == 0:
                accepted = middle
            else:
                (line,) = [s for s in proc.stderr.splitlines() if s.startswith("error")]
                assert "available" in line and "model.hidden_size" in line
                refused = middle
    finally:
        _remove(cgroup)
    assert accepted > 1  # the search found a size that trains in this cgroup
    print(f"{LIMIT >> 20} MiB: hidden_size {accepted * STEP} trains, {refused * STEP} is refused")


@pytest.mark.integration  # a 300 MB word written compressed (seconds), then read in a cgroup
def test_a_small_gz_holding_one_huge_word_is_refused_before_memory_runs_out(tmp_path):
    import gzip

    train = tmp_path / "train.txt.gz"
    with gzip.open(train, "wb", compresslevel=9) as f:  # 300 MB, one word
        f.write(b"hello world\n")
        for _ in range(300):
            f.write(b"a" * (1 << 20))
    assert train.stat().st_size < 1 << 20
    config = write_tiny_config(tmp_path, data={"train": [str(train)]})
    cgroup = _new_cgroup(LIMIT)
    try:
        join = f'echo $$ > "{cgroup}/cgroup.procs" && exec "$@"'
        args = [sys.executable, "-m", "hornn_dist.prepare", str(config), "--quiet"]
        proc = subprocess.run(
            ["sh", "-c", join, "sh", *args], capture_output=True, text=True, cwd=REPO, env=env()
        )
    finally:
        _remove(cgroup)
    assert proc.returncode == 2, f"exit {proc.returncode} (-9: killed)\n{proc.stderr[-2000:]}"
    (line,) = [s for s in proc.stderr.splitlines() if s.startswith("error")]
    assert str(train) in line and "one word may hold" in line
