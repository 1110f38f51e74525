"""`model.engine = "triton"` through the real CLI, kernels interpreted on CPU: a file of its own
so that the full tier's workers run it beside test_train's other runs (it is the slowest)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.test_train import _out, _train
from tests.train_helpers import check_ok, final_weights, run_here, scalars, write_tiny_config

# a real training run, resumed once, with the kernels under Triton's interpreter
pytestmark = pytest.mark.integration

K_STEPS = 16  # crosses the first epoch's end at 14 (the interpreter is slow: fewer than test_train)
K_FIRST = 5  # stop mid-epoch 0, resume to K_STEPS


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """test_train's tiny corpus, prepared."""
    folder = tmp_path_factory.mktemp("train_triton")
    check_ok(run_here("hornn_dist.prepare", str(write_tiny_config(folder))))
    return folder


@pytest.fixture(scope="module")
def straight_1(workdir: Path) -> Path:
    """A straight one-process run of the fused engine, as test_train's."""
    check_ok(_train(workdir, "straight1", "--set", f"train.max_steps={K_STEPS}"))
    return _out(workdir, "straight1")


def test_triton_engine_trains_like_fused(workdir: Path, straight_1: Path) -> None:
    """`model.engine = "triton"` through the real CLI (kernels interpreted on CPU), resumed once."""
    pytest.importorskip("triton")
    name = "triton1"
    engine = ("--set", "model.engine=triton")
    check_ok(_train(workdir, name, *engine, "--set", f"train.max_steps={K_FIRST}"))
    second = _train(workdir, name, *engine, "--set", f"train.max_steps={K_STEPS}")
    check_ok(second)
    assert "resuming from" in second.stderr
    got, want = final_weights(_out(workdir, name)), final_weights(straight_1)
    for key in want:  # the same model and data; the engines sum in different orders
        torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-5)
    ppl = dict(scalars(_out(workdir, name))["test/ppl"])[K_STEPS]
    assert ppl == pytest.approx(dict(scalars(straight_1)["test/ppl"])[K_STEPS], rel=1e-4)
