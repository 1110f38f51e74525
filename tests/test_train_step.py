"""TrainStep: the static-buffer training step (eager on CPU, CUDA graphs on a GPU).

The CPU tests run the same parts that CUDA graphs capture and check them against a plain
step written out here; the CUDA tests (skipped without a GPU) check that replaying the graphs
gives what eager steps give, including after the lr changes (re-capture), with one process
and with the multi-process path (the all-reduce between two graphs or inside one) in a
one-process group. tests/test_step_ranks.py runs that path with two real ranks.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from hornn_dist.config import config_from_dict
from hornn_dist.models import build_model
from hornn_dist.training.optim import build_optimizer
from hornn_dist.training.step import WARMUP_STEPS, TrainStep
from hornn_dist.training.step_setup import (
    graph_unavailable_reason,
    step_for_accelerator,
    uses_fused_sgd,
)
from hornn_dist.util.errors import CheckpointError
from tests.reference_step import reference_step
from tests.train_helpers import reset_accelerate_state

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
V, T, B = 50, 6, 4


@pytest.fixture
def make_accelerator():
    """Return a factory of fresh Accelerators (the shared Accelerate state is reset each time)."""
    from accelerate import Accelerator

    def make(cpu: bool = True, mixed_precision: str = "no"):
        reset_accelerate_state()
        return Accelerator(cpu=cpu, mixed_precision=mixed_precision)

    yield make
    reset_accelerate_state()


def run_config(pooling: str = "fofe", engine: str = "fused", **train):
    """Return a small validated run config."""
    model = {"pooling": pooling, "order": 3, "hidden_size": 16, "embedding_size": 12}
    return config_from_dict(
        {
            "model": {**model, "engine": engine},
            "optim": {"lr": 0.3, "momentum": 0.5, "weight_decay": 1e-5, "max_col_norm": 2.0},
            "train": {"batch_size": B, "bptt": T, **train},
        }
    )


def batches(n: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Return n (x, y) batches of shape (T, B)."""
    gen = torch.Generator().manual_seed(seed)
    data = torch.randint(0, V, (n, T + 1, B), generator=gen)
    return [(d[:-1], d[1:]) for d in data]


def make_step(cfg, accelerator, seed: int = 0) -> TrainStep:
    """Return the trainer's TrainStep over a fresh model (seeded init) on the accelerator's
    device, its optimizer prepared by the accelerator."""
    torch.manual_seed(seed)
    model = build_model(cfg.model, V).to(accelerator.device)
    sgd = build_optimizer(
        model, cfg.optim, fused=uses_fused_sgd(accelerator.mixed_precision, accelerator.device)
    )
    optimizer = accelerator.prepare_optimizer(sgd)
    return step_for_accelerator(cfg, accelerator, model, optimizer, B)


def float64_total_norm(params: list[torch.nn.Parameter]) -> float:
    """Return the global gradient norm summed in float64."""
    return math.sqrt(sum(float(p.grad.double().norm()) ** 2 for p in params))


def float64_path_norms(model) -> list[float]:
    """Return the per-path gradient norms from feedback_path_slices, summed in float64."""
    return [
        math.sqrt(sum(float(param.grad[idx].double().norm()) ** 2 for param, idx in pieces))
        for pieces in model.feedback_path_slices().values()
    ]


@pytest.mark.parametrize("pooling", ["fofe", "gated"])
def test_eager_step_equals_the_reference_step(make_accelerator, pooling):
    """TrainStep's eager step is tests/reference_step.py's plain step, bit for bit: losses,
    weights, carried state; its gradient norms too, and those match a float64 computation."""
    cfg = run_config(pooling)
    step = make_step(cfg, make_accelerator())
    ref = copy.deepcopy(step.core)
    opt = build_optimizer(ref, cfg.optim)
    state = ref.init_state(B, torch.device("cpu"))
    for i, (x, y) in enumerate(batches(5)):
        loss = step.run(x, y, measure=i == 4).clone()
        result = reference_step(ref, opt, x, y, state, cfg.optim, measure=i == 4)
        state = result.state
        assert torch.equal(loss, result.loss)
    for p, q in zip(step.core.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q)
    for buf, s in zip(step.state, state, strict=True):
        assert torch.equal(buf, s)
    norms = step.grad_norms()
    assert list(norms) == step.norm_names
    assert norms["grad_norm/total"] > 0
    assert any(k.startswith("grad_norm/layer0/path3") for k in norms)
    assert [norms[k] for k in step.norm_names] == pytest.approx(result.norms)
    assert int(step.step_id) == 5 and int(step.bad_step) == 0


def test_the_reference_steps_norms_are_the_float64_norms_before_the_clip():
    cfg = run_config("gated")
    torch.manual_seed(0)
    model = build_model(cfg.model, V)
    opt = build_optimizer(model, cfg.optim)
    state = model.init_state(B, torch.device("cpu"))
    x, y = batches(1)[0]
    probe = copy.deepcopy(model)  # the same forward and backward, no update
    logits, _ = probe(x, state)
    F.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()
    params = [p for p in probe.parameters() if p.requires_grad]
    exact = [float64_total_norm(params), *float64_path_norms(probe)]
    tight = dataclasses.replace(cfg.optim, clip_mode="norm", clip=0.05)  # a clip that binds
    assert exact[0] > tight.clip
    result = reference_step(model, opt, x, y, state, tight, measure=True)
    assert result.norms == pytest.approx(exact, rel=1e-6)  # measured before the clip


def test_norms_only_when_measured_and_state_reset(make_accelerator):
    step = make_step(run_config(), make_accelerator())
    (x, y), (x2, y2) = batches(2)
    step.run(x, y, measure=False)
    assert step.norms.abs().sum() == 0
    assert any(buf.abs().sum() > 0 for buf in step.state)  # the history is carried
    step.run(x2, y2, measure=True)
    assert (step.norms > 0).all()
    step.reset_state()
    assert all(buf.abs().sum() == 0 for buf in step.state)


def test_first_non_finite_step_is_recorded(make_accelerator):
    step = make_step(run_config(), make_accelerator())
    data = batches(4)
    step.run(*data[0], measure=False)
    with torch.no_grad():
        step.core.decoder.weight.fill_(math.inf)
    for x, y in data[1:]:
        step.run(x, y, measure=False)
    assert not torch.isfinite(step.loss)
    assert int(step.bad_step) == 2  # the first bad one, not the last


def test_state_dict_round_trips_history_and_step_count(make_accelerator):
    step = make_step(run_config(), make_accelerator())
    buffers = [buf.data_ptr() for buf in step.state]
    saved = tuple(torch.randn_like(buf) for buf in step.state)
    step.load_state_dict({"history": saved, "steps": 41})
    assert [buf.data_ptr() for buf in step.state] == buffers  # copied in, not replaced
    assert all(torch.equal(a, b) for a, b in zip(step.state, saved, strict=True))
    assert int(step.step_id) == 41
    again = step.state_dict()
    assert again["steps"] == 41
    assert all(torch.equal(a, b) for a, b in zip(again["history"], saved, strict=True))
    with pytest.raises(CheckpointError, match="holds 2 state tensors, this model carries 1"):
        step.load_state_dict({"history": saved * 2, "steps": 0})
    wide = tuple(torch.zeros(*buf.shape[:-2], 2 * buf.shape[-2], buf.shape[-1]) for buf in saved)
    with pytest.raises(CheckpointError, match="resume with the checkpoint's train.batch_size"):
        step.load_state_dict({"history": wide, "steps": 0})


def test_reshard_joins_the_saving_ranks_streams_and_slices_this_ranks():
    # two saving ranks of 2 streams each (batch at dim 1), resumed by 4 ranks and by 1
    saved = [{"history": (torch.arange(8.0).view(1, 2, 4) + 100 * r,), "steps": 7} for r in (0, 1)]
    whole = torch.cat([s["history"][0] for s in saved], dim=1)  # (1, 4, 4)
    for rank in range(4):
        mine = TrainStep.reshard(saved, rank, 4)
        assert mine["steps"] == 7 and torch.equal(mine["history"][0], whole[:, rank : rank + 1])
    assert torch.equal(TrainStep.reshard(saved, 0, 1)["history"][0], whole)
    with pytest.raises(CheckpointError, match="4 streams, which 3 processes cannot share"):
        TrainStep.reshard(saved, 0, 3)


def test_graph_reason_names_what_rules_it_out(make_accelerator):
    acc = make_accelerator()
    assert graph_unavailable_reason(run_config(), acc) == "not on CUDA"
    off = run_config(cuda_graph=False)
    assert graph_unavailable_reason(off, acc) == "train.cuda_graph = false"
    step = make_step(off, acc)
    assert step.describe() == "eager (train.cuda_graph = false)"
    with pytest.raises(ValueError, match="a CUDA graph needs a CUDA device, not cpu"):
        bare_step(run_config(), graph_reason=None)


def bare_step(cfg, seed: int = 0, **kwargs) -> TrainStep:
    """Return a TrainStep over a fresh model (seeded init) with no Accelerator around it."""
    torch.manual_seed(seed)
    model = build_model(cfg.model, V)
    optimizer = build_optimizer(model, cfg.optim)
    plain = dict(device=torch.device("cpu"), batch_size=B, bptt=T, optim=cfg.optim)
    return TrainStep(model, optimizer, **{**plain, "graph_reason": "eager", **kwargs})


@pytest.mark.parametrize(
    ("pooling", "order", "mode", "clip"),
    [("sum", 3, "norm", 0.5), ("sum", 1, "norm", 1.0), ("max", 3, "norm", 1.0)],
)
def test_the_step_resolves_clip_mode_auto_for_its_model(pooling, order, mode, clip):
    cfg = run_config(pooling)
    cfg.model.order = order
    assert cfg.optim.clip_mode == "auto"
    step = bare_step(cfg)
    assert (step.optim.clip_mode, step.optim.clip) == (mode, clip)
    explicit = dataclasses.replace(cfg.optim, clip_mode="value", clip=1.0)
    assert bare_step(cfg, optim=explicit).optim is explicit  # an explicit mode is kept as is


def test_a_bare_step_takes_the_same_steps_as_the_trainers(make_accelerator):
    """The step without Accelerate (as benchmarks/throughput.py builds it) is the trainer's."""
    cfg = run_config("gated")
    ours, bare = make_step(cfg, make_accelerator()), bare_step(cfg)
    for i, (x, y) in enumerate(batches(4)):
        assert torch.equal(ours.run(x, y, measure=i % 2 == 1), bare.run(x, y, measure=i % 2 == 1))
    for p, q in zip(ours.core.parameters(), bare.core.parameters(), strict=True):
        assert torch.equal(p, q)
    assert torch.equal(ours.norms, bare.norms) and torch.equal(ours.state[0], bare.state[0])


def test_backward_unscale_and_autocast_are_called_where_the_step_needs_them():
    calls = []

    def backward(loss):
        calls.append(("backward", torch.is_autocast_enabled("cpu")))
        loss.backward()

    def unscale():
        calls.append(("unscale", all(p.grad is not None for p in step.params)))

    def autocast():
        calls.append(("autocast", None))
        return torch.autocast("cpu", dtype=torch.bfloat16)

    step = bare_step(run_config(), backward=backward, unscale=unscale, autocast=autocast)
    loss = step.run(*batches(1)[0], measure=False)
    assert calls == [("autocast", None), ("backward", False), ("unscale", True)]
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(p.grad is None for p in step.params)  # zeroed after the SGD step


@pytest.mark.parametrize(("precision", "dtype"), [("bf16", torch.bfloat16), ("no", torch.float32)])
def test_the_trainers_step_runs_its_forward_under_accelerates_autocast(
    make_accelerator, precision, dtype
):
    """The model is not Accelerate's prepared one: the step's autocast hook is what casts."""
    step = make_step(run_config(), make_accelerator(mixed_precision=precision))
    seen = []
    step.core.decoder.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    loss = step.run(*batches(1)[0], measure=False)
    assert seen == [dtype]
    assert loss.dtype == torch.float32 and torch.isfinite(loss)


def steps_with_the_lr_halved(step: TrainStep, data: list) -> torch.Tensor:
    """Run `step` on every batch, halving the lr before the 9th (the schedule at an epoch end:
    a graph must be captured again); return the losses."""
    losses = []
    for i, (x, y) in enumerate(data):
        if i == 8:
            for group in step.optimizer.param_groups:
                group["lr"] /= 2
        losses.append(step.run(x, y, measure=True).clone())
    torch.cuda.synchronize()
    return torch.stack(losses)


def _graph_vs_eager(
    make_accelerator, pooling: str, precision: str, rtol: float, engine: str = "fused"
) -> None:
    data = batches(12, seed=3)
    results = []
    for use_graph in (True, False):
        acc = make_accelerator(cpu=False, mixed_precision=precision)
        step = make_step(run_config(pooling, engine, cuda_graph=use_graph), acc)
        assert step.use_graph is use_graph
        results.append((step, steps_with_the_lr_halved(step, data), step.norms.clone()))
    (graphed, g_loss, g_norms), (eager, e_loss, e_norms) = results
    assert graphed.captures == 2 and eager.captures == 0
    assert graphed.eager_steps == WARMUP_STEPS
    torch.testing.assert_close(g_loss, e_loss, rtol=rtol, atol=1e-6)
    torch.testing.assert_close(g_norms, e_norms, rtol=rtol, atol=1e-6)
    for p, q in zip(graphed.core.parameters(), eager.core.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=rtol, atol=1e-6)
    for a, b in zip(graphed.state, eager.state, strict=True):
        torch.testing.assert_close(a, b, rtol=rtol, atol=1e-6)


@cuda
@pytest.mark.parametrize("pooling", ["sum", "max", "fofe", "gated"])
def test_cuda_graph_replay_equals_eager_steps(make_accelerator, pooling):
    _graph_vs_eager(make_accelerator, pooling, "no", rtol=1e-5)


@cuda
def test_cuda_graph_replay_equals_eager_steps_bf16(make_accelerator):
    _graph_vs_eager(make_accelerator, "fofe", "bf16", rtol=1e-2)


@cuda
def test_cuda_graph_replay_equals_eager_steps_fp16(make_accelerator):
    """fp16's GradScaler with fused SGD: unscale, overflow check, skip and scale update in the graph."""
    _graph_vs_eager(make_accelerator, "fofe", "fp16", rtol=1e-2)


@cuda
@pytest.mark.parametrize("pooling", ["sum", "max", "fofe", "gated"])
def test_cuda_graph_replay_equals_eager_steps_triton(make_accelerator, pooling):
    pytest.importorskip("triton")
    _graph_vs_eager(make_accelerator, pooling, "no", rtol=1e-5, engine="triton")


@cuda
@pytest.mark.parametrize("tiles", [None, (16, 16, 32, 4, 4)])
def test_cuda_graph_replay_equals_eager_steps_triton_bf16(make_accelerator, monkeypatch, tiles):
    """Also with K split over programs: the arrival counters and partials live in the graph."""
    pytest.importorskip("triton")
    from hornn_dist.models import triton_tiles

    monkeypatch.setenv(triton_tiles.TILES_ENV, "x".join(map(str, tiles)))
    _graph_vs_eager(make_accelerator, "max", "bf16", rtol=1e-2, engine="triton")


@pytest.mark.parametrize("pooling", ["max", "gated"])
def test_triton_engine_steps_match_the_fused_engine(make_accelerator, pooling):
    """The trainer's step with engine "triton" (interpreted on CPU, compiled on CUDA)."""
    pytest.importorskip("triton")
    from hornn_dist.models.triton_scan import unavailable_reason

    cpu = not torch.cuda.is_available()
    if unavailable_reason("cpu" if cpu else "cuda") is not None:
        pytest.skip(unavailable_reason("cpu" if cpu else "cuda"))
    runs = []
    for engine in ("fused", "triton"):
        step = make_step(run_config(pooling, engine, cuda_graph=False), make_accelerator(cpu=cpu))
        losses = torch.stack([step.run(x, y, measure=True).clone() for x, y in batches(4)])
        runs.append((losses, step.norms.clone(), list(step.core.parameters())))
    (f_loss, f_norms, f_params), (t_loss, t_norms, t_params) = runs
    torch.testing.assert_close(t_loss, f_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(t_norms, f_norms, rtol=1e-4, atol=1e-6)
    for p, q in zip(t_params, f_params, strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


@pytest.fixture
def one_process_group(tmp_path):
    """Return a function that joins a one-process torch.distributed group; leave it after."""

    def join(backend: str) -> None:
        url = f"file://{tmp_path / 'group'}"
        dist.init_process_group(backend, init_method=url, rank=0, world_size=1)

    yield join
    if dist.is_initialized():
        dist.destroy_process_group()


def test_the_multi_process_path_in_one_process_takes_the_same_steps(one_process_group):
    """reduce=True scales by 1/1 and all-reduces over one process: the steps do not change."""
    one_process_group("gloo")
    cfg = run_config("gated")
    alone, reducing = bare_step(cfg), bare_step(cfg, reduce=True)
    assert reducing.processes == 1 and "averaged over 1 processes" in reducing.describe()
    for i, (x, y) in enumerate(batches(4)):
        assert torch.equal(alone.run(x, y, measure=i == 3), reducing.run(x, y, measure=i == 3))
    for p, q in zip(alone.core.parameters(), reducing.core.parameters(), strict=True):
        assert torch.equal(p, q)
    assert torch.equal(alone.norms, reducing.norms)
    assert alone.flat_grad is None and all(p.grad is None for p in alone.params)
    assert int(torch.count_nonzero(reducing.flat_grad)) == 0  # zeroed after the SGD step
    flat = reducing.flat_grad.untyped_storage().data_ptr()
    assert all(p.grad.untyped_storage().data_ptr() == flat for p in reducing.params)  # views


@cuda
def test_cuda_graphs_with_the_all_reduce_between_equal_eager_steps(one_process_group):
    """Replayed graphs of the multi-process path equal its eager steps (NCCL, one process)."""
    one_process_group("nccl")
    cfg, data = run_config("gated"), batches(12, seed=3)
    device = torch.device("cuda")
    results = []
    for graph_reason in (None, "eager"):
        torch.manual_seed(0)
        model = build_model(cfg.model, V).to(device)
        step = TrainStep(
            model, build_optimizer(model, cfg.optim), device=device, batch_size=B,
            bptt=T, optim=cfg.optim, graph_reason=graph_reason, reduce=True,
        )  # fmt: skip
        results.append((step, steps_with_the_lr_halved(step, data)))
    (graphed, g_loss), (eager, e_loss) = results
    assert graphed.captures == 2 and len(graphed.graphs) == 2
    torch.testing.assert_close(g_loss, e_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(graphed.norms, eager.norms, rtol=1e-5, atol=1e-6)
    for p, q in zip(graphed.core.parameters(), eager.core.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def scaled_step(cfg, init_scale: float, loss_factor: torch.Tensor | None = None):
    """Return a bare step as the trainer builds it under fp16 (fused SGD inside Accelerate's
    optimizer with a real GradScaler, here torch's CPU one) and the scaler; `loss_factor`
    multiplies the scaled loss (inf: an overflow)."""
    from accelerate.optimizer import AcceleratedOptimizer

    torch.manual_seed(0)
    model = build_model(cfg.model, V)
    sgd = build_optimizer(model, cfg.optim, fused=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    factor = torch.ones(()) if loss_factor is None else loss_factor
    step = TrainStep(
        model, AcceleratedOptimizer(sgd, device_placement=False, scaler=scaler),
        device=torch.device("cpu"), batch_size=B, bptt=T, optim=cfg.optim, graph_reason="eager",
        backward=lambda loss: (scaler.scale(loss) * factor).backward(),
        unscale=lambda: scaler.unscale_(sgd),
    )  # fmt: skip
    return step, scaler


def test_fused_sgd_under_a_gradient_scaler_steps_as_plain_sgd(make_accelerator):
    make_accelerator()  # AcceleratedOptimizer reads the Accelerate state
    cfg = run_config("gated")
    plain, (scaled, scaler) = bare_step(cfg), scaled_step(cfg, init_scale=2.0**10)
    for i, (x, y) in enumerate(batches(5)):
        torch.testing.assert_close(
            scaled.run(x, y, measure=i == 4), plain.run(x, y, measure=i == 4), rtol=1e-6, atol=1e-7
        )
    for p, q in zip(scaled.core.parameters(), plain.core.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(scaled.norms, plain.norms, rtol=1e-6, atol=1e-7)  # unscaled
    assert scaler.get_scale() == 2.0**10  # no overflow: the scale grows only after 2000 steps


def test_an_overflowing_step_is_skipped_and_the_scale_backs_off(make_accelerator):
    make_accelerator()
    cfg = run_config("gated")
    cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, max_col_norm=0.0))
    overflow = torch.tensor(math.inf)  # the scaled loss overflows: every gradient is inf or nan
    step, scaler = scaled_step(cfg, init_scale=2.0**10, loss_factor=overflow)
    before = [p.detach().clone() for p in step.core.parameters()]
    sgd = step.optimizer.optimizer
    data = batches(4)
    step.run(*data[0], measure=False)
    assert all(torch.equal(p, b) for p, b in zip(step.core.parameters(), before, strict=True))
    assert all(int(torch.count_nonzero(s["momentum_buffer"])) == 0 for s in sgd.state.values())
    assert scaler.get_scale() == 2.0**9 and int(step.bad_step) == 0  # the loss was finite
    overflow.fill_(1.0)
    for x, y in data[1:]:
        step.run(x, y, measure=False)
    assert scaler.get_scale() == 2.0**9  # finite steps: no back-off (growth after 2000)
    assert all(not torch.equal(p, b) for p, b in zip(step.core.parameters(), before, strict=True))
    assert all(torch.isfinite(p).all() for p in step.core.parameters())
