"""torchrun's own restarts (`accelerate launch --max_restarts N`): after a rank is killed, the
restarted ranks form their process group and resume from the last checkpoint by themselves,
bit for bit as an uninterrupted run (real launches, a real SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.train_helpers import (
    REPO,
    check_ok,
    children,
    env,
    final_weights,
    free_port,
    launch_two_ranks,
    prepared_tiny,
    run_events,
    wait_for_step,
)

# the trainer's CLI, with a restarted rank 1 that starts 5 s after rank 0, as on a slower
# node: rank 0 looks up the group's addresses first (where the last attempt's were still to be
# read, the restarted group never formed)
LATE_RANK_1 = """
import os, sys, time
if os.environ.get("RANK") == "1" and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
    time.sleep(5)
from hornn_dist import train
from hornn_dist.runtime import run_cli
run_cli(train.main, sys.argv[1:])
"""


def rank_pid(launcher: subprocess.Popen, rank: int) -> int:
    """Return the PID of the launcher's worker of global rank `rank`."""
    for pid in children(launcher):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in environ:
            return pid
    raise AssertionError(f"no worker of rank {rank} under the launcher {launcher.pid}")


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_killed_rank_comes_back_under_torchruns_restarts(tmp_path: Path) -> None:
    """Rank 1 SIGKILLed at step 12 under `--max_restarts 1`: the agent restarts both ranks,
    which resume from the last checkpoint and end where an uninterrupted run ends, where they
    failed to form their group (Gloo connectFullMesh: Connection refused, or no answer)."""
    folder = prepared_tiny(tmp_path, train={"epochs": 100, "collective_timeout": 60})
    config, steps = str(folder / "config.toml"), ["--set", "train.max_steps=40"]
    straight = folder / "straight"
    check_ok(
        launch_two_ranks(
            "hornn_dist.train", config, "--set", f"train.output_dir={straight}", *steps
        )
    )
    script = tmp_path / "late_rank_1.py"
    script.write_text(LATE_RANK_1)
    out, log = folder / "restarted", tmp_path / "launch.log"
    cmd = [sys.executable, "-m", "accelerate.commands.launch",
           "--config_file", "launch/cpu_2proc.yaml", "--main_process_port", str(free_port()),
           "--max_restarts", "1", str(script), config, "--set", f"train.output_dir={out}",
           *steps]  # fmt: skip
    with open(log, "w") as stderr:
        launcher = subprocess.Popen(  # the script imports this checkout's package
            cmd,
            cwd=REPO,
            env=env() | {"PYTHONPATH": str(REPO)},
            stdout=stderr,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        wait_for_step(out, 12, launcher)
        os.kill(rank_pid(launcher, 1), signal.SIGKILL)
        code = launcher.wait(timeout=180)
    finally:
        if launcher.poll() is None:  # the launcher and its ranks, started here
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    text = log.read_text()
    assert code == 0, text[-4000:]
    first, restarted = run_events(out, "start")  # one launch, two starts of its ranks
    assert first["step"] == 0 and restarted["started"].startswith("resumed from ")
    assert restarted["step"] >= 10 and "training ended at step 40" in text
    got, want = final_weights(out), final_weights(straight)
    assert all(torch.equal(got[k], want[k]) for k in want)
