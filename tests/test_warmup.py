"""The lr warmup (`optim.warmup_steps`): the lr each step trains at, and a resume inside it."""

from __future__ import annotations

import pytest
import torch

from hornn_dist.config import OptimConfig
from hornn_dist.training.optim import LrSchedule, build_optimization
from hornn_dist.util.errors import ConfigError
from tests.train_helpers import check_ok, final_weights, prepared_tiny, run_events, train_into


def stepped_lrs(warmup: int, steps: int, lr: float = 4.0) -> list[float]:
    """Return the lr the optimizer holds at each of the first `steps` steps."""
    model = torch.nn.Linear(2, 2)
    cfg = OptimConfig(lr=lr, momentum=0.0, warmup_steps=warmup)
    optimizer, schedule = build_optimization(model, cfg)
    out = []
    for step in range(1, steps + 1):
        schedule.start_step(step)
        out.append(optimizer.param_groups[0]["lr"])
    return out


def test_the_lr_rises_linearly_over_the_warmup_then_holds() -> None:
    assert stepped_lrs(4, 6) == [1.0, 2.0, 3.0, 4.0, 4.0, 4.0]


def test_no_warmup_leaves_the_lr_alone_from_the_first_step() -> None:
    assert stepped_lrs(0, 3) == [4.0, 4.0, 4.0]


def test_a_halving_during_the_warmup_scales_the_warmed_lr() -> None:
    model = torch.nn.Linear(2, 2)
    cfg = OptimConfig(
        lr=4.0, momentum=0.0, warmup_steps=10, schedule="fixed_then_halve", halve_after=0
    )
    optimizer, schedule = build_optimization(model, cfg)
    schedule.start_step(5)
    schedule.end_epoch(1.0)  # halves the schedule's lr: 2, of which the warmup gives half
    assert schedule.lr == 2.0 and optimizer.param_groups[0]["lr"] == pytest.approx(1.0)
    schedule.start_step(10)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2.0)


def test_the_warmup_is_no_state_of_the_schedule() -> None:
    sched = LrSchedule.from_config(OptimConfig(warmup_steps=100))
    sched.start_step(3)
    assert "warmup" not in sched.state_dict()


def test_a_negative_warmup_is_one_line_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"optim.warmup_steps must be in \[0, "):
        OptimConfig(warmup_steps=-1).validate()


@pytest.mark.integration  # trains 3 tiny runs of 12 steps
def test_a_resume_inside_the_warmup_trains_the_straight_run_bit_for_bit(tmp_path) -> None:
    folder = prepared_tiny(tmp_path, optim={"warmup_steps": 9})
    straight, resumed = folder / "straight", folder / "resumed"
    check_ok(train_into(folder, straight, "--set", "train.max_steps=12"))
    check_ok(train_into(folder, resumed, "--set", "train.max_steps=5"))
    check_ok(train_into(folder, resumed, "--set", "train.max_steps=12"))
    lrs = {e["step"]: e["lr"] for e in run_events(straight, "train")}
    assert lrs[2] == pytest.approx(0.3 * 2 / 9) and lrs[10] == pytest.approx(0.3), lrs
    a, b = final_weights(straight), final_weights(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
