"""Optimiser pieces and metrics: lr schedules, gradient clipping, perplexity, gradient norms."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
import torch

from hornn_dist.config import OptimConfig
from hornn_dist.models import ModelConfig
from hornn_dist.run.on_resume import SCHEDULE, on_resume
from hornn_dist.run.resume import apply_changed_settings, stop_stands
from hornn_dist.training.metrics import perplexity, total_grad_norm
from hornn_dist.training.optim import (
    LrSchedule,
    build_optimization,
    build_optimizer,
    clip_gradients,
    keep_fused,
    resolve_clip,
)
from hornn_dist.util.errors import ConfigError


def schedule(**overrides: object) -> LrSchedule:
    """Return a schedule built from an OptimConfig with `overrides` (no stopping rule, and the
    rule without halve_before_stop, unless given)."""
    settings = {"stop_improvement": 0.0, "halve_before_stop": False, **overrides}
    return LrSchedule.from_config(OptimConfig(**settings))


def run_epochs(sched: LrSchedule, valid_losses: list[float]) -> list[float]:
    """Return the lr for the next epoch after each of the given validation losses."""
    return [sched.end_epoch(loss) for loss in valid_losses]


def params_with_grads(*grads: torch.Tensor) -> list[torch.nn.Parameter]:
    """Return parameters whose .grad are copies of `grads`."""
    params = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros_like(g))
        p.grad = g.clone()
        params.append(p)
    return params


# ---------------------------------------------------------------- lr schedules


def test_plateau_halves_only_when_the_validation_loss_does_not_decrease() -> None:
    sched = schedule(lr=1.0, schedule="plateau", min_lr=0.0)
    lrs = run_epochs(sched, [6.0, 5.0, 5.0, 4.0, 4.5, 4.4, 3.0])
    # 5.0 -> 5.0 is no decrease; 4.0 -> 4.5 is a rise; 4.5 -> 4.4 decreases again.
    assert lrs == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.25]


def test_plateau_with_halve_below_also_halves_on_a_small_gain() -> None:
    paper = schedule(lr=1.0, schedule="plateau", min_lr=0.0)
    rnnlm = schedule(lr=1.0, schedule="plateau", min_lr=0.0, halve_below=0.01)
    losses = [6.0, 5.0, 4.98, 4.5, 4.6]  # 5.0 -> 4.98 lowers the loss by 0.4%, under 1%
    assert run_epochs(paper, losses) == [1.0, 1.0, 1.0, 1.0, 0.5]
    assert run_epochs(rnnlm, losses) == [1.0, 1.0, 0.5, 0.5, 0.25]


def test_halve_below_then_stop_needs_the_slow_epochs_after_the_halving() -> None:
    sched = schedule(
        lr=1.0, schedule="plateau", min_lr=0.0, halve_below=0.01, stop_improvement=0.01
    )
    # 5.0 -> 4.99 halves (no halving before it, so it does not count towards the stop);
    # 4.99 -> 4.98 and 4.98 -> 4.97 are slow after a halving: each halves, the second stops.
    run_epochs(sched, [5.0, 4.99, 4.98])
    assert not sched.stopped and sched.lr == 0.25
    sched.end_epoch(4.97)
    assert sched.stopped.startswith("converged: epoch 4") and sched.lr == 0.125


def test_plateau_compares_with_the_previous_epoch_not_the_best() -> None:
    sched = schedule(lr=1.0, schedule="plateau", min_lr=0.0)
    # 5.5 is worse than the best (5.0) but better than the previous epoch (6.0): no halving.
    assert run_epochs(sched, [5.0, 6.0, 5.5]) == [1.0, 0.5, 0.5]


def test_fixed_then_halve_is_the_text8_recipe() -> None:
    sched = schedule(lr=0.5, schedule="fixed_then_halve", halve_after=5, min_lr=0.0)
    # Validation losses are ignored; epochs 1-5 use 0.5, then 0.25, 0.125, ...
    lrs_used = [sched.lr] + run_epochs(sched, [5.0, 4.0, 9.0, 3.0, 3.0, 2.0, 2.5, 1.0])
    assert lrs_used == [0.5] * 5 + [0.25, 0.125, 0.0625, 0.03125]


def test_fixed_then_halve_after_zero_epochs_halves_every_epoch() -> None:
    sched = schedule(lr=0.8, schedule="fixed_then_halve", halve_after=0, min_lr=0.0)
    assert run_epochs(sched, [1.0, 1.0, 1.0]) == [0.4, 0.2, 0.1]


def test_newbob_keeps_the_lr_until_a_plateau_then_halves_every_epoch() -> None:
    sched = schedule(lr=1.0, schedule="newbob", min_lr=0.0)
    # 5.0 -> 5.2 does not decrease: the first halving; from then on every epoch halves,
    # improving or not (plateau would keep 0.5 after 5.2 -> 4.0).
    assert run_epochs(sched, [6.0, 5.0, 5.2, 4.0, 3.0]) == [1.0, 1.0, 0.5, 0.25, 0.125]


def test_newbob_with_halve_below_starts_halving_on_a_small_gain_and_stops_like_rnnlm() -> None:
    sched = schedule(
        lr=1.0,
        schedule="newbob",
        min_lr=0.0,
        halve_below=0.01,
        stop_improvement=0.01,
        stop_patience=1,
    )
    # 5.0 -> 4.99 (0.2%) starts the halving; 4.99 -> 4.5 halves again though it gained 10%;
    # 4.5 -> 4.49 is slow after a halving, and under patience 1 ends the run.
    assert run_epochs(sched, [5.0, 4.99, 4.5]) == [1.0, 0.5, 0.25]
    assert not sched.stopped
    sched.end_epoch(4.49)
    assert sched.stopped.startswith("converged: epoch 4")


def test_newbob_resumes_from_its_state_dict_mid_halving() -> None:
    a = schedule(lr=1.0, schedule="newbob", min_lr=0.0)
    run_epochs(a, [5.0, 5.5])
    b = schedule(lr=1.0, schedule="newbob", min_lr=0.0)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert run_epochs(b, [4.0, 3.0]) == run_epochs(a, [4.0, 3.0]) == [0.25, 0.125]


def test_halve_patience_halves_after_that_many_failed_epochs_in_a_row() -> None:
    once = schedule(lr=1.0, schedule="plateau", min_lr=0.0)
    twice = schedule(lr=1.0, schedule="plateau", min_lr=0.0, halve_patience=2)
    # 5.0 -> 5.1 fails once; 4.0 passes and resets the count; 4.2, 4.3 fail twice in a row:
    # the halving; the count starts again, so 4.4 alone does not halve.
    losses = [5.0, 5.1, 4.0, 4.2, 4.3, 4.4, 3.0]
    assert run_epochs(once, losses) == [1.0, 0.5, 0.5, 0.25, 0.125, 0.0625, 0.0625]
    assert run_epochs(twice, losses) == [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5]


def test_halve_patience_resumes_mid_count_from_its_state_dict() -> None:
    a = schedule(lr=1.0, schedule="plateau", min_lr=0.0, halve_patience=3)
    run_epochs(a, [5.0, 5.1, 5.2])  # two failed epochs counted
    b = schedule(lr=1.0, schedule="plateau", min_lr=0.0, halve_patience=3)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert run_epochs(b, [5.3, 5.4]) == run_epochs(a, [5.3, 5.4]) == [0.5, 0.5]


@pytest.mark.parametrize(
    "settings,words",
    [
        ({"halve_patience": 0}, ["optim.halve_patience", "1"]),
        (
            {"halve_patience": 2, "schedule": "fixed_then_halve"},
            ["optim.halve_patience = 2", "fixed_then_halve", "optim.halve_after"],
        ),
    ],
)
def test_a_bad_halve_patience_is_one_line_naming_the_keys(settings: dict, words: list) -> None:
    with pytest.raises(ConfigError) as excinfo:
        OptimConfig(**settings).validate()
    message = str(excinfo.value)
    assert "\n" not in message and all(word in message for word in words), message


@pytest.mark.parametrize("kind", ["plateau", "fixed_then_halve", "newbob"])
def test_min_lr_is_a_floor(kind: str) -> None:
    sched = schedule(lr=0.5, schedule=kind, halve_after=0, min_lr=0.1)
    # A rising validation loss makes plateau halve every epoch too.
    lrs = run_epochs(sched, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert lrs[-3:] == [0.1, 0.1, 0.1]
    assert min(lrs) == 0.1


def test_min_lr_above_the_initial_lr_never_raises_it() -> None:
    sched = schedule(lr=0.01, schedule="fixed_then_halve", halve_after=0, min_lr=0.1)
    assert run_epochs(sched, [1.0, 1.0]) == [0.01, 0.01]


def test_state_dict_round_trip_through_json_continues_identically() -> None:
    a = schedule(lr=0.5, schedule="plateau", min_lr=0.01)
    run_epochs(a, [5.0, 4.0, 4.2])
    state = json.loads(json.dumps(a.state_dict()))  # as stored in trainer_state.json
    b = schedule(lr=9.0, schedule="fixed_then_halve", halve_after=1, min_lr=0.0)
    b.load_state_dict(state)
    assert b.state_dict() == a.state_dict() and b.cfg.schedule == "plateau"
    more = [4.1, 4.3, 3.0, 3.0]
    assert run_epochs(b, more) == run_epochs(a, more)


def test_fresh_state_dict_survives_json_with_an_infinite_previous_loss() -> None:
    a = schedule(lr=0.5, schedule="plateau")
    b = schedule(lr=0.1, schedule="plateau")
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.previous_valid == math.inf and b.state_dict() == a.state_dict()
    assert b.end_epoch(3.0) == 0.5  # the first epoch never halves on a finite loss


def test_convergence_waits_for_a_halving_then_stops_on_a_small_improvement() -> None:
    sched = schedule(lr=1.0, schedule="plateau", min_lr=0.0, stop_improvement=0.01, stop_patience=1)
    # 6.0 -> 5.99 improves by 0.17% but no halving yet: go on; 5.99 -> 6.1 halves the lr;
    # 6.1 -> 5.0 improves by 18%: go on; 5.0 -> 4.98 improves by 0.4% < 1%: converged.
    lrs = run_epochs(sched, [6.0, 5.99, 6.1, 5.0])
    assert lrs == [1.0, 1.0, 0.5, 0.5] and not sched.stopped
    sched.end_epoch(4.98)
    assert sched.stopped.startswith("converged: epoch 5 lowered the validation loss by 0.400%")
    assert "optim.stop_improvement = 0.01" in sched.stopped and sched.lr == 0.5


def test_convergence_after_a_halving_includes_a_worse_epoch() -> None:
    sched = schedule(
        lr=1.0, schedule="plateau", min_lr=0.0, stop_improvement=0.001, stop_patience=1
    )
    run_epochs(sched, [5.0, 5.2])  # halved once
    assert not sched.stopped
    # the worse epoch stops the run and still halves (a resume under a longer patience goes on so)
    assert sched.end_epoch(5.3) == 0.25 and "after 1 lr halving(s)" in sched.stopped


def test_patience_needs_that_many_small_epochs_in_a_row() -> None:
    sched = schedule(lr=1.0, schedule="plateau", min_lr=0.0, stop_improvement=0.01)
    assert sched.cfg.stop_patience == OptimConfig.stop_patience == 2
    # 5.0 -> 5.2 halves; 5.19 is small (1 in a row); 4.0 is not (0); 3.99 small (1); 3.98 (2)
    for loss in [5.0, 5.2, 5.19, 4.0, 3.99]:
        sched.end_epoch(loss)
        assert not sched.stopped, loss
    assert sched.small_epochs == 1
    sched.end_epoch(3.98)
    assert sched.stopped.startswith("converged: epoch 6 lowered the validation loss by 0.251%")
    assert "(2 epochs in a row, optim.stop_patience = 2), after 1 lr halving(s)" in sched.stopped


def test_a_stop_under_patience_1_stands_only_under_patience_1() -> None:
    rule = OptimConfig(
        lr=1.0, min_lr=0.0, stop_improvement=0.01, stop_patience=1, halve_before_stop=False
    )
    sched = LrSchedule.from_config(rule)
    run_epochs(sched, [5.0, 5.2, 5.19])  # a rise halves; one slow epoch after it stops
    assert sched.stopped
    state = json.loads(json.dumps(sched.state_dict()))  # as stored in trainer_state.json
    assert stop_stands(state, rule) is True
    assert stop_stands(state, OptimConfig(**{**rule.__dict__, "stop_patience": 2})) is False


def test_halve_before_stop_halves_a_streak_at_one_lr_and_stops_when_that_does_not_help() -> None:
    assert OptimConfig().halve_before_stop is True  # the default
    losses = [5.0, 5.2, 4.0, 3.995, 3.99]  # a rise halves; 4.0 -> 3.995 -> 3.99: two slow epochs
    plain = schedule(lr=1.0, schedule="plateau", min_lr=0.0, stop_improvement=0.01)
    patient = schedule(
        lr=1.0, schedule="plateau", min_lr=0.0, stop_improvement=0.01, halve_before_stop=True
    )
    assert run_epochs(plain, losses) == [1.0, 0.5, 0.5, 0.5, 0.5] and plain.stopped
    # the streak trained at 0.5 throughout: 0.25 gets its try instead of the stop
    assert run_epochs(patient, losses) == [1.0, 0.5, 0.5, 0.5, 0.25] and not patient.stopped
    assert patient.end_epoch(3.989) == 0.25  # slow at 0.25 too: a lower lr did not help
    assert "(3 epochs in a row, optim.stop_patience = 2), after 2 lr halving(s)" in patient.stopped
    patient = schedule(
        lr=1.0, schedule="plateau", min_lr=0.0, stop_improvement=0.01, halve_before_stop=True
    )
    run_epochs(patient, [*losses, 3.5])  # the halving helped: the streak ends, training goes on
    assert patient.small_epochs == 0 and not patient.stopped and patient.lr == 0.25


def test_halve_before_stop_lets_a_streak_that_was_halved_during_it_stop() -> None:
    sched = schedule(
        lr=1.0, schedule="plateau", min_lr=0.0, stop_improvement=0.01, halve_before_stop=True
    )
    # 4.0 -> 4.1 rises (slow, and halves 0.5 -> 0.25); 4.1 -> 4.099 is slow at 0.25: stop
    run_epochs(sched, [5.0, 5.2, 4.0, 4.1, 4.099])
    assert sched.stopped.startswith("converged: epoch 5") and sched.lr == 0.25


def test_halve_before_stop_at_min_lr_ends_the_run_there() -> None:
    sched = schedule(
        lr=1.0, schedule="plateau", min_lr=0.5, stop_improvement=0.01, halve_before_stop=True
    )
    run_epochs(sched, [5.0, 5.2, 4.0, 3.999, 3.998])  # the second slow epoch at 0.5
    assert "already at optim.min_lr = 0.5" in sched.stopped


def test_a_min_lr_stop_stands_under_any_patience() -> None:
    sched = schedule(
        lr=0.5,
        schedule="fixed_then_halve",
        halve_after=0,
        min_lr=0.25,
        stop_patience=1,
        stop_improvement=1e-9,
    )
    run_epochs(sched, [4.0, 3.0])
    assert "already at optim.min_lr" in sched.stopped
    cfg = OptimConfig(schedule="fixed_then_halve", halve_after=0, min_lr=0.25, stop_patience=5)
    assert stop_stands(sched.state_dict(), cfg) is True


def test_a_halving_due_at_min_lr_ends_the_run() -> None:
    # only the min_lr rule can fire: every epoch improves a lot
    sched = schedule(
        lr=0.5, schedule="fixed_then_halve", halve_after=0, min_lr=0.25, stop_improvement=1e-9
    )
    assert run_epochs(sched, [4.0, 3.0]) == [0.25, 0.25]
    assert "already at optim.min_lr = 0.25" in sched.stopped


def test_no_stopping_rule_runs_every_epoch() -> None:
    sched = schedule(lr=1.0, schedule="plateau", min_lr=0.5, stop_improvement=0.0)
    run_epochs(sched, [5.0, 5.0, 5.0, 5.0, 5.0])
    assert sched.lr == 0.5 and not sched.stopped


def test_the_schedule_owns_the_optimizers_lr_through_every_change() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    opt = torch.optim.SGD(
        [{"params": model[0].parameters()}, {"params": model[1].parameters()}], lr=7.0
    )
    sched = schedule(lr=1.0, schedule="fixed_then_halve", halve_after=0).drive(opt)
    lrs = lambda: [g["lr"] for g in opt.param_groups]  # noqa: E731
    assert lrs() == [1.0, 1.0]  # bound: the schedule's lr at once
    sched.end_epoch(1.0)
    assert lrs() == [0.5, 0.5]  # an epoch's halving, with no call to copy it
    saved = sched.state_dict()
    sched.end_epoch(1.0)
    opt.load_state_dict(opt.state_dict())  # as a resume loads it: new group dicts
    sched.load_state_dict(saved)
    assert lrs() == [0.5, 0.5]  # a restored state
    sched.set_lr(0.1)
    assert lrs() == [0.1, 0.1]  # a resume's changed optim.lr


def test_build_optimization_builds_the_optimizer_and_its_schedule_from_one_config() -> None:
    model = torch.nn.Linear(3, 2)
    cfg = OptimConfig(lr=0.3, schedule="fixed_then_halve", halve_after=1, min_lr=0.0)
    opt, sched = build_optimization(model, cfg)
    sched.end_epoch(1.0)
    assert sched.lr == opt.param_groups[0]["lr"] == 0.15


def test_build_optimizer_uses_the_config() -> None:
    model = torch.nn.Linear(3, 2)
    opt = build_optimizer(model, OptimConfig(lr=0.3, momentum=0.5, weight_decay=1e-3))
    group = opt.param_groups[0]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.3, 0.5, 1e-3)
    assert len(group["params"]) == 2
    assert group["fused"] is None and not opt.state  # SGD's own first step copies the gradient


@pytest.mark.parametrize("weight_decay", [0.0, 1e-5])
def test_fused_sgd_on_cpu_takes_foreach_sgds_steps_bit_for_bit(weight_decay: float) -> None:
    """The trainer's CPU SGD is fused (step_setup.uses_fused_sgd) because it is the same
    arithmetic: equal parameters and momentum after steps with momentum and weight decay,
    gradients of every sign and scale, one of them a view into a flat buffer (several ranks)."""
    gen = torch.Generator().manual_seed(0)
    shapes = [(300, 17), (17,), (5, 5, 3)]
    start = [torch.randn(s, generator=gen) * 3 for s in shapes]
    cfg = OptimConfig(lr=5.0, momentum=0.5, weight_decay=weight_decay)
    runs = []
    for fused in (False, True):
        module = torch.nn.ParameterList([torch.nn.Parameter(t.clone()) for t in start])
        params = list(module)
        sgd = build_optimizer(module, cfg, fused=fused)
        flat = torch.empty(sum(p.numel() for p in params))
        for k in range(4):
            g = torch.Generator().manual_seed(10 + k)
            flat.copy_(torch.randn(flat.shape, generator=g) * 10.0 ** (k - 2))
            offset = 0
            for p in params:
                p.grad = flat[offset : offset + p.numel()].view_as(p)
                offset += p.numel()
            sgd.step()
        runs.append((params, [sgd.state[p]["momentum_buffer"] for p in params]))
    (plain, plain_bufs), (fused_params, fused_bufs) = runs
    assert sgd.param_groups[0]["fused"] is True
    for a, b in zip(plain + plain_bufs, fused_params + fused_bufs, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(plain[0], start[0])  # the steps moved the weights


def test_fused_sgd_starts_with_zero_momentum_and_keeps_the_runs_choice_on_resume() -> None:
    model = torch.nn.Linear(3, 2)
    cfg = OptimConfig(lr=0.3, momentum=0.5)
    fused = build_optimizer(model, cfg, fused=True)
    assert fused.param_groups[0]["fused"] is True and fused._step_supports_amp_scaling
    assert all(
        torch.equal(s["momentum_buffer"], torch.zeros_like(p)) for p, s in fused.state.items()
    )
    plain = build_optimizer(model, cfg)
    plain.load_state_dict(fused.state_dict())
    assert plain.param_groups[0]["fused"] is True  # the checkpoint's choice came with its state
    keep_fused(plain, False)
    assert plain.param_groups[0]["fused"] is None
    fused.load_state_dict(plain.state_dict())
    keep_fused(fused, True)
    assert fused.param_groups[0]["fused"] is True


# ---------------------------------------------------------------- gradient clipping


def test_value_clipping_clips_each_element() -> None:
    a = torch.tensor([-10.0, -1.0, 0.5, 3.0])
    b = torch.tensor([[7.0, -0.2], [2.0, -2.5]])
    params = params_with_grads(a, b)
    clip_gradients(params, OptimConfig(clip=2.0, clip_mode="value"))
    assert torch.equal(params[0].grad, torch.tensor([-2.0, -1.0, 0.5, 2.0]))
    assert torch.equal(params[1].grad, torch.tensor([[2.0, -0.2], [2.0, -2.0]]))


def test_norm_clipping_rescales_to_the_global_norm() -> None:
    a, b = torch.tensor([3.0, 0.0]), torch.tensor([[0.0], [4.0]])  # global norm 5
    params = params_with_grads(a, b)
    clip_gradients(params, OptimConfig(clip=1.0, clip_mode="norm"))
    assert torch.allclose(params[0].grad, a / 5, atol=1e-6)
    assert torch.allclose(params[1].grad, b / 5, atol=1e-6)
    assert math.isclose(float(total_grad_norm(params)), 1.0, rel_tol=1e-5)


def test_norm_clipping_leaves_small_gradients_alone() -> None:
    a = torch.tensor([0.3, -0.4])
    params = params_with_grads(a)
    clip_gradients(params, OptimConfig(clip=1.0, clip_mode="norm"))
    assert torch.equal(params[0].grad, a)


@pytest.mark.parametrize("mode", ["value", "norm"])
def test_clip_zero_is_a_no_op(mode: str) -> None:
    a = torch.tensor([100.0, -300.0])
    params = params_with_grads(a)
    clip_gradients(params, OptimConfig(clip=0.0, clip_mode=mode))
    assert torch.equal(params[0].grad, a)


@pytest.mark.parametrize(
    ("model", "mode", "clip"),
    [
        (ModelConfig(arch="rnn"), "norm", 1.0),
        (ModelConfig(pooling="sum", order=1), "norm", 1.0),
        (ModelConfig(pooling="sum", order=3), "norm", 0.5),
        (ModelConfig(pooling="sum", order=2), "norm", 0.5),
        (ModelConfig(pooling="max"), "norm", 1.0),
        (ModelConfig(pooling="fofe"), "norm", 1.0),
        (ModelConfig(pooling="gated"), "norm", 1.0),
        (ModelConfig(arch="lstm", pooling="sum"), "norm", 1.0),
        (ModelConfig(arch="gru"), "norm", 1.0),
    ],
)
def test_auto_clip_is_the_global_norm_1_but_for_summed_paths(
    model: ModelConfig, mode: str, clip: float
) -> None:
    resolved = resolve_clip(model, OptimConfig())
    assert (resolved.clip_mode, resolved.clip) == (mode, clip)
    assert resolved.lr == OptimConfig().lr  # nothing else changes
    explicit = OptimConfig(clip=1.0, clip_mode="norm")
    assert resolve_clip(model, explicit) is explicit


def test_unresolved_auto_clip_is_refused() -> None:
    with pytest.raises(ValueError, match="resolve_clip"):
        clip_gradients(params_with_grads(torch.tensor([9.0])), OptimConfig())


def test_a_clip_under_auto_is_one_line_naming_both_keys() -> None:
    with pytest.raises(ConfigError) as info:
        OptimConfig(clip=5.0).validate()
    message = str(info.value)
    assert "optim.clip = 5" in message and "optim.clip_mode" in message and "\n" not in message
    OptimConfig(clip=5.0, clip_mode="value").validate()


def test_clipping_skips_parameters_without_gradients() -> None:
    params = params_with_grads(torch.tensor([9.0]))
    params.append(torch.nn.Parameter(torch.ones(2)))
    clip_gradients(params, OptimConfig(clip=1.0, clip_mode="value"))
    clip_gradients(params, OptimConfig(clip=1.0, clip_mode="norm"))
    assert torch.allclose(params[0].grad, torch.tensor([1.0])) and params[1].grad is None


# ---------------------------------------------------------------- metrics


def test_perplexity_is_exp_of_the_mean_in_float64() -> None:
    count = 100_000_000  # a text8-sized token count
    mean = 4.6051701859880914  # ln(100)
    loss_sum = mean * count
    assert perplexity(loss_sum, count) == pytest.approx(math.exp(mean), rel=1e-12)
    assert perplexity(loss_sum, count) == pytest.approx(100.0, rel=1e-12)
    # Sums kept as float64 tensors (as evaluation reduces them) give the same float.
    value = perplexity(torch.tensor(loss_sum, dtype=torch.float64), torch.tensor(count))
    assert isinstance(value, float) and value == pytest.approx(100.0, rel=1e-12)


def test_perplexity_edges() -> None:
    assert perplexity(0.0, 10) == 1.0
    assert perplexity(10_000.0, 1) == math.inf
    assert math.isnan(perplexity(math.nan, 3))
    with pytest.raises(ValueError, match="count=0"):
        perplexity(1.0, 0)


def test_total_grad_norm_equals_the_norm_of_the_concatenated_grads() -> None:
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(shape, generator=gen) for shape in [(3, 4), (7,), (2, 2, 2), ()]]
    params = params_with_grads(*grads)
    params.append(torch.nn.Parameter(torch.ones(5)))  # no grad: ignored
    expected = torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))
    got = total_grad_norm(params)
    assert got.dim() == 0
    assert torch.allclose(got, expected, rtol=1e-6)


def test_total_grad_norm_without_gradients_is_zero() -> None:
    assert float(total_grad_norm([torch.nn.Parameter(torch.ones(2))])) == 0.0
    assert float(total_grad_norm([])) == 0.0


def test_total_grad_norm_matches_a_float64_reference() -> None:
    gen = torch.Generator().manual_seed(1)
    shapes = [(40, 30), (30,), (5, 6, 7), (), (1000,)]
    grads = [torch.randn(shape, generator=gen) * 10.0**i for i, shape in enumerate(shapes)]
    params = params_with_grads(*grads)
    params.insert(2, torch.nn.Parameter(torch.ones(4)))  # no grad: skipped
    want = math.sqrt(sum(float(g.double().norm()) ** 2 for g in grads))
    got = total_grad_norm(iter(params))  # any iterable of parameters
    assert got.dim() == 0 and got.dtype == torch.float32
    assert float(got) == pytest.approx(want, rel=1e-6)


def test_newbob_under_halve_patience_2_keeps_the_lr_through_one_noisy_epoch() -> None:
    """A run at lr 5 whose epoch 4 alone lowers the validation loss by less than 0.3%: under
    rnnlm's rule (patience 1) that one epoch begins newbob's halving; patience 2 keeps lr 5
    through the 10 epochs, halves only after two such epochs in a row, and then every epoch."""
    check_patience_2_keeps_lr_5([5.0, 4.8, 4.7, 4.699, 4.6, 4.55, 4.5, 4.45, 4.42, 4.4])


def check_patience_2_keeps_lr_5(losses: list[float]) -> None:
    """Ten epochs whose 4th alone gains under 0.3%: rnnlm's rule halves after it, newbob at
    patience 2 keeps lr 5 through all ten, then halves after two such epochs, then every epoch."""
    rnnlm = schedule(lr=5.0, schedule="newbob", halve_below=0.003)
    patient = schedule(lr=5.0, schedule="newbob", halve_below=0.003, halve_patience=2)
    assert run_epochs(rnnlm, losses)[:4] == [5.0, 5.0, 5.0, 2.5]
    assert run_epochs(patient, losses) == [5.0] * 10
    assert patient.end_epoch(losses[-1]) == 5.0 and patient.end_epoch(losses[-1]) == 2.5
    assert patient.end_epoch(4.0) == 1.25  # newbob: every epoch after the first halving


@dataclass
class PatientOptim(OptimConfig):
    """The [optim] section with one schedule key more, declared here and nowhere else."""

    halve_cap: int = on_resume(SCHEDULE, 9)  # a key of this test: the schedule follows it


def test_a_new_schedule_key_is_held_saved_and_followed_by_the_schedule() -> None:
    """An [optim] key of way `schedule` is in the schedule's section, its state dict and so
    its checkpoint, and a resume's change of it is applied and named: one field, no copy."""
    sched = LrSchedule.from_config(PatientOptim(halve_cap=4))
    sched.end_epoch(5.0)
    state = sched.state_dict()
    assert state["halve_cap"] == 4 and state["epochs_done"] == 1

    restored = LrSchedule.from_config(PatientOptim())  # this run's default: 9
    restored.load_state_dict(state)
    assert restored.cfg.halve_cap == 4 and restored.state_dict() == state
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=sched.lr)
    notes = apply_changed_settings(PatientOptim(halve_cap=4), PatientOptim(), restored, optimizer)
    assert notes == ["optim.halve_cap 4 -> 9"] and restored.cfg.halve_cap == 9
    assert restored.epochs_done == 1 and restored.lr == sched.lr  # the history stays
