"""launch/slurm.sh decides to requeue from the time left, not from the launcher's exit status.

A preempted or time-limited run exits 1 from `accelerate launch` (torchrun's agent raises
SignalException after forwarding SIGTERM) although its ranks checkpointed and exited 0; the
script must requeue it all the same. Slurm's commands are stand-ins on PATH here: `srun`
exits with the status the real launcher gives, `squeue` reports the time left, `scontrol`
records a requeue.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.train_helpers import REPO

PREEMPTED_LAUNCHER_STATUS = 1  # measured: `accelerate launch` after SIGTERM, 2 CPU ranks


def run_script(tmp_path: Path, srun_status: int, time_left: str, restarts: int = 0):
    """Run launch/slurm.sh with stand-in Slurm commands; return (process, scontrol calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "scontrol_calls"
    stubs = {
        "srun": f"#!/bin/bash\nexit {srun_status}\n",
        "squeue": f"#!/bin/bash\necho '{time_left}'\n",
        "scontrol": (
            "#!/bin/bash\n"
            f'echo "$@" >> {calls}\n'
            "if [[ $1 == show ]]; then echo node1; echo node2; fi\n"
        ),
    }
    for name, text in stubs.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    environ = dict(os.environ)
    environ.update(
        PATH=f"{bin_dir}:{environ['PATH']}",
        SLURM_JOB_ID="4242",
        SLURM_JOB_NODELIST="node[1-2]",
        SLURM_NNODES="2",
        SLURM_RESTART_COUNT=str(restarts),
    )
    proc = subprocess.run(
        ["bash", "launch/slurm.sh", "configs/demo.toml"],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    made = calls.read_text().splitlines() if calls.exists() else []
    return proc, made


def test_a_preempted_run_near_the_limit_is_requeued(tmp_path: Path) -> None:
    proc, calls = run_script(tmp_path, PREEMPTED_LAUNCHER_STATUS, time_left="1:30")
    assert proc.returncode == 0, proc.stderr
    assert "requeue 4242" in calls
    assert "90s left: requeueing" in proc.stdout


@pytest.mark.parametrize("status", [0, PREEMPTED_LAUNCHER_STATUS, 2])
def test_a_run_ending_far_from_the_limit_is_not_requeued(tmp_path: Path, status: int) -> None:
    proc, calls = run_script(tmp_path, status, time_left="5:00:00")
    assert proc.returncode == status
    assert not any(call.startswith("requeue") for call in calls)
    assert f"exited with status {status}" in proc.stdout


def test_requeues_stop_at_max_requeues(tmp_path: Path) -> None:
    proc, calls = run_script(tmp_path, PREEMPTED_LAUNCHER_STATUS, time_left="0:45", restarts=50)
    assert proc.returncode == PREEMPTED_LAUNCHER_STATUS
    assert not any(call.startswith("requeue") for call in calls)
    assert "not requeueing: already restarted 50 times" in proc.stderr
