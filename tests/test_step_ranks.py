"""Two ranks averaging their flat gradients step as DDP's two ranks do, and as one process.

`tests/step_ranks.py` trains the runs under a real 2-process `accelerate launch` (gloo; on
CUDA both ranks share the one GPU) and saves them; these tests compare what it saved.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.train_helpers import check_ok, launch_two_ranks

# a real 2-process launch of the step
pytestmark = pytest.mark.integration


# gloo sometimes aborts a rank early ("terminate called without an active exception", SIGABRT):
# 4 times in about 46 launches of this test on the loaded 2-core CI machine, not yet traced
# (the rank dies early in the launch, with no Python traceback). One more launch then, so
# that this flake alone does not fail the suite; any other failure fails at once.
GLOO_ABORT = "terminate called without an active exception"


def _launch(out: Path, device: str) -> dict[str, list[dict]]:
    out.mkdir()
    proc = launch_two_ranks("tests.step_ranks", str(out), "--device", device)
    if proc.returncode != 0 and GLOO_ABORT in proc.stderr:
        for stale in out.iterdir():
            stale.unlink()
        proc = launch_two_ranks("tests.step_ranks", str(out), "--device", device)
    check_ok(proc)
    runs: dict[str, list[dict]] = {}
    for path in sorted(out.glob("*.rank*.pt")):
        name, rank = path.stem.split(".rank")
        runs.setdefault(name, []).insert(int(rank), torch.load(path))
    return runs


def _assert_close_params(got: list[torch.Tensor], want: list[torch.Tensor], **tol) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, **tol)


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory) -> dict[str, list[dict]]:
    return _launch(tmp_path_factory.mktemp("ranks") / "cpu", "cpu")


def test_flat_all_reduce_steps_exactly_as_ddp(cpu_runs):
    assert sorted(cpu_runs) == ["ddp", "flat", "one"]
    for rank in (0, 1):
        ddp, flat = cpu_runs["ddp"][rank], cpu_runs["flat"][rank]
        assert torch.equal(flat["losses"], ddp["losses"])
        for a, b in zip(flat["params"], ddp["params"], strict=True):
            assert torch.equal(a, b)


def test_two_ranks_hold_the_same_weights_and_step_like_one_process(cpu_runs):
    rank0, rank1 = cpu_runs["flat"]
    for a, b in zip(rank0["params"], rank1["params"], strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(rank0["losses"], rank1["losses"])  # each rank trains its own streams
    one = cpu_runs["one"][0]
    mean = (rank0["losses"] + rank1["losses"]) / 2  # one process's loss: the mean over 2b streams
    torch.testing.assert_close(one["losses"], mean, rtol=1e-5, atol=1e-6)
    _assert_close_params(one["params"], rank0["params"], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_two_processes_on_one_gpu_replaying_graphs_step_as_eager_and_as_one(tmp_path):
    runs = _launch(tmp_path / "cuda", "cuda")
    assert sorted(runs) == ["ddp", "flat", "graphed", "one"]
    for rank in (0, 1):
        flat, graphed = runs["flat"][rank], runs["graphed"][rank]
        torch.testing.assert_close(graphed["losses"], flat["losses"], rtol=1e-5, atol=1e-6)
        _assert_close_params(graphed["params"], flat["params"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(
            flat["losses"], runs["ddp"][rank]["losses"], rtol=1e-5, atol=1e-6
        )
    rank0, rank1 = runs["graphed"]
    for a, b in zip(rank0["params"], rank1["params"], strict=True):
        assert torch.equal(a, b)
    mean = (rank0["losses"] + rank1["losses"]) / 2
    torch.testing.assert_close(runs["one"][0]["losses"], mean, rtol=1e-4, atol=1e-5)
    _assert_close_params(runs["one"][0]["params"], rank0["params"], rtol=1e-4, atol=1e-5)
