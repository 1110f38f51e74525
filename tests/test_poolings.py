"""A pooling is one entry of models/poolings.py: a pooling added here, in the test alone, builds,
runs every engine that has its kernel exactly as the plain loop does, trains, and stands in the
report's tables and plots; an unknown pooling or a missing kernel fails when the config is read."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from PIL import Image

from hornn_dist.models import ModelConfig
from hornn_dist.models.hornn import HornnLayer
from hornn_dist.models.poolings import (
    PAPER_POOLINGS,
    Pooling,
    get_pooling,
    pooling_names,
    register_pooling,
    unregister_pooling,
)
from hornn_dist.models.recurrence import fused_scan, loop_scan
from hornn_dist.util.errors import ConfigError
from tests.train_helpers import check_ok, markdown_table, run_here, write_tiny_config


def _mean(n: object, order: int, alpha: float) -> object:
    return 1.0 / order + 0 * n  # k_n = 1/N: the paths' mean (a tensor for a tensor n)


@pytest.fixture
def mean_pooling():
    """The paths' mean (sum pooling with k_n = 1/N), registered for one test."""
    spec = register_pooling(Pooling("mean", "Mean HORNN", "the paths' mean", coefficient=_mean))
    yield spec
    unregister_pooling("mean")
    assert "mean" not in pooling_names()


def test_the_papers_four_are_registered_in_its_order() -> None:
    assert PAPER_POOLINGS == ("sum", "max", "fofe", "gated") == pooling_names()[:4]
    assert [get_pooling(p).label for p in PAPER_POOLINGS] == [
        "HORNN",
        "Max HORNN",
        "FOFE HORNN",
        "Gated HORNN",
    ]
    assert get_pooling("sum").summed and not get_pooling("fofe").summed
    assert [get_pooling(p).triton_code for p in PAPER_POOLINGS] == [0, 2, 1, 3]


def test_an_unknown_pooling_fails_when_the_config_is_read() -> None:
    with pytest.raises(ConfigError, match=r"model.pooling must be one of sum, max, fofe, gated"):
        ModelConfig(pooling="mean").validate()
    with pytest.raises(ValueError, match="pooling must be one of"):  # the loop has no fallback
        loop_scan(torch.zeros(2, 1, 3), torch.zeros(2, 1, 3), torch.zeros(3, 6), "x", 0.5, "tanh")


def test_an_engine_without_the_poolings_kernel_fails_when_the_config_is_read() -> None:
    register_pooling(Pooling("looponly", "Loop HORNN", "a test's", engines=("loop",)))
    try:
        with pytest.raises(ConfigError) as err:
            ModelConfig(pooling="looponly", engine="fused").validate()
        assert str(err.value) == (
            "model.engine = 'fused' has no kernel for model.pooling = 'looponly'; set "
            "model.engine to one of auto, loop"
        )
        layer = HornnLayer(4, cfg=ModelConfig(pooling="looponly", hidden_size=3, order=2))
        assert layer.plan.engine == "loop"  # auto runs the engine it has
    finally:
        unregister_pooling("looponly")


def _plain_mean(xp: torch.Tensor, history: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """h_t = tanh(xp_t + (1/N) Σ_n h_{t-n} W_hn), one step and one path at a time."""
    N, _, H = history.shape
    h = list(history.detach().unbind(0))  # h[-1] is h_{t-1}
    out = []
    for t in range(xp.shape[0]):
        pooled = sum(h[-n] @ w.detach()[:, (n - 1) * H : n * H] for n in range(1, N + 1)) / N
        h.append(torch.tanh(xp.detach()[t] + pooled))
        out.append(h[-1])
    return torch.stack(out)


@pytest.mark.parametrize("order", [1, 3])
def test_a_new_pooling_runs_the_fused_engine_as_the_loop_and_the_float64_reference(
    mean_pooling, order: int
) -> None:
    torch.manual_seed(0)
    T, B, H = 5, 2, 4
    xp = torch.randn(T, B, H, dtype=torch.float64, requires_grad=True)
    history = torch.randn(order, B, H, dtype=torch.float64, requires_grad=True)
    w = (0.4 * torch.randn(H, order * H, dtype=torch.float64)).requires_grad_()
    fused = fused_scan(xp, history, w, "mean", 0.5, "tanh")
    loop = loop_scan(xp, history, w, "mean", 0.5, "tanh")
    assert torch.allclose(fused, loop, rtol=1e-12, atol=1e-12)
    assert torch.allclose(fused, _plain_mean(xp, history, w), rtol=1e-12, atol=1e-12)
    gx, gh, gw = torch.autograd.grad(fused.sum(), (xp, history, w))
    lx, lh, lw = torch.autograd.grad(loop.sum(), (xp, history, w))
    assert all(
        torch.allclose(a, b, rtol=1e-10, atol=1e-12) for a, b in ((gx, lx), (gh, lh), (gw, lw))
    )
    assert torch.autograd.gradcheck(
        lambda x, h, ww: fused_scan(x, h, ww, "mean", 0.5, "tanh"), (xp, history, w)
    )


@pytest.mark.integration  # trains two tiny runs, reports and plots them
def test_a_new_pooling_trains_and_stands_in_the_report_and_its_plot(
    mean_pooling, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    for order in (2, 3):
        config = write_tiny_config(
            tmp_path / f"data{order}",
            model={"pooling": "mean", "order": order},
            train={"max_steps": 6, "checkpoint_every": 0},
        )
        check_ok(
            run_here(
                "hornn_dist.train",
                str(config),
                "--set",
                f"train.output_dir={runs / f'mean{order}'}",
            )
        )
    report = run_here("hornn_dist.report", str(runs), "--layout", "orders")
    assert report.returncode == 0, report.stderr[-3000:]
    markdown = (runs / "report" / "report.md").read_text()
    rows = {row["model"]: row for row in markdown_table(markdown, "## Test perplexity by order")}
    assert set(rows) == {"Mean HORNN"}
    for order in ("2nd", "3rd"):
        assert math.isfinite(float(rows["Mean HORNN"][f"{order} order: ours"]))
    with Image.open(runs / "report" / "orders.png") as image:
        image.load()
        assert image.format == "PNG" and image.width > 100
