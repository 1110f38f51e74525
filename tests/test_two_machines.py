"""Two "machines" on one host, as a multi-node run sees them: two `accelerate launch`es with
--num_machines 2, one CPU process each (gloo), each preparing the corpus into its own cache
(data.cache_shared = false), one shared output_dir. They train like one process with the same
global batch; a killed machine ends the other with one line; the relaunch resumes exactly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hornn_dist.run.checkpoint import list_checkpoints
from hornn_dist.run.run_state import TrainerState
from tests.train_helpers import (
    check_ok,
    children,
    final_weights,
    free_port,
    read_until,
    run_here,
    start,
    write_tiny_config,
)

# two machines on one host: real launches, a kill and a resume
pytestmark = pytest.mark.integration

STEPS = 18  # crosses the epoch end at 14; checkpoints at 5, 10, 14, 15 and the end
TIMEOUT = 20  # train.collective_timeout of the two-machine runs


def _machine(config: Path, out: Path, rank: int, port: int, *extra: str) -> list[str]:
    """Return the launch command of machine `rank` of 2 (one process, its own cache)."""
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "2",
        "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1",
        "--main_process_port", str(port), "--mixed_precision", "no", "--dynamo_backend", "no",
        "-m", "hornn_dist.train", str(config),
        "--set", f"train.output_dir={out}", "--set", f"train.max_steps={STEPS}",
        "--set", "data.cache_shared=false", "--set", f"data.cache_dir={out.parent}/cache{rank}",
        "--set", f"train.collective_timeout={TIMEOUT}", *extra,
    ]  # fmt: skip


def _both(config: Path, out: Path, port: int) -> list[subprocess.Popen]:
    return [start(_machine(config, out, rank, port)) for rank in (0, 1)]


def _finish(machines: list[subprocess.Popen]) -> list[str]:
    """Wait for both machines; return their stderr after checking each exited 0."""
    logs = [m.communicate(timeout=300)[1] for m in machines]
    for machine, log in zip(machines, logs, strict=True):
        assert machine.returncode == 0, log[-4000:]
    return logs


def _close(weights: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> None:
    assert weights.keys() == other.keys()
    for key in weights:
        torch.testing.assert_close(weights[key], other[key], rtol=1e-4, atol=1e-5)


@pytest.mark.timeout(900)
def test_two_machines_on_one_host_train_like_one_process_and_resume_exactly(
    tmp_path: Path,
) -> None:
    config = write_tiny_config(tmp_path)
    one = tmp_path / "one"
    check_ok(
        run_here(
            "hornn_dist.train", str(config), "--set", f"train.output_dir={one}",
            "--set", f"train.max_steps={STEPS}", "--set", f"data.cache_dir={tmp_path}/cache1p",
        )
    )  # fmt: skip

    straight = tmp_path / "straight"
    main_log, _ = _finish(_both(config, straight, port=free_port()))
    assert main_log.count("data: prepared") == 1  # machine 0's; machine 1 logs warnings only
    assert len(list((tmp_path / "cache1").glob("tiny-*/manifest.json"))) == 1  # its own copy
    state = TrainerState.read(list_checkpoints(straight)[-1])
    assert state.world_size == 2 and state.step == STEPS and state.test
    _close(final_weights(straight), final_weights(one))

    killed = tmp_path / "killed"
    machines = _both(config, killed, port=free_port())
    lines = read_until(machines[0], "step 6: loss", timeout=300)
    assert "step 6: loss" in lines[-1], "".join(lines)[-3000:]
    [worker] = children(machines[1])
    subprocess.run(["kill", "-KILL", str(worker)], check=True)  # machine 1's training process
    rest = machines[0].communicate(timeout=TIMEOUT + 120)[1]
    machines[1].communicate(timeout=120)
    log = "".join(lines) + rest
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, log[-4000:]
    assert re.search(r"rank 0: the other processes did not answer while .* at step \d+", errors[0])
    assert "train.collective_timeout = 20 s" in errors[0]
    assert not re.search(r'File ".*hornn_dist', log)
    assert machines[1].returncode != 0
    last = list_checkpoints(killed)[-1]
    last_step = TrainerState.read(last).step
    assert last_step < STEPS

    main_log, _ = _finish(_both(config, killed, port=free_port()))
    # the newest checkpoint that verifies: `last`, or an older one if the kill left it unverified
    resumed_from = re.search(r"resuming from (\S+) \(step (\d+),", main_log)
    assert resumed_from, main_log[-4000:]
    assert Path(resumed_from[1]).resolve().parent == last.resolve().parent, main_log[-4000:]
    assert 0 < int(resumed_from[2]) <= last_step, main_log[-4000:]
    resumed, uninterrupted = final_weights(killed), final_weights(straight)
    for key in uninterrupted:
        assert torch.equal(resumed[key], uninterrupted[key]), key
    assert (
        TrainerState.read(list_checkpoints(killed)[-1]).valid_history
        == TrainerState.read(list_checkpoints(straight)[-1]).valid_history
    )
