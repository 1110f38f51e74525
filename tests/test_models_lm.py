"""Tests of the language-model API: shapes, state, parameter counts, per-path norms, max-norm."""

from __future__ import annotations

import copy

import pytest
import torch

from hornn_dist.models import ModelConfig, RecurrentLM, build_model, column_normalize_, plan_for
from hornn_dist.models.max_norm import max_norm_vectors
from hornn_dist.util.errors import ConfigError

V, H, E = 50, 8, 6
ARCH_CASES = [
    ("hornn", "sum"),
    ("hornn", "max"),
    ("hornn", "fofe"),
    ("hornn", "gated"),
    ("rnn", "sum"),
    ("lstm", "sum"),
    ("gru", "sum"),
]


def small_config(arch: str, pooling: str = "fofe", **kw) -> ModelConfig:
    """Return the config of a tiny model of the given arch."""
    return ModelConfig(
        arch=arch, pooling=pooling, order=3, hidden_size=H, embedding_size=E, num_layers=2, **kw
    )


def small(arch: str, pooling: str = "fofe", **kw) -> RecurrentLM:
    """Return a tiny model of the given arch (seeded init)."""
    torch.manual_seed(0)
    return build_model(small_config(arch, pooling, **kw), V)


def state_shapes(arch: str, B: int) -> list[tuple[int, ...]]:
    if arch == "hornn":
        return [(3, B, H), (3, B, H)]
    if arch == "lstm":
        return [(2, B, H), (2, B, H)]
    return [(2, B, H)]


@pytest.mark.parametrize("arch,pooling", ARCH_CASES)
def test_forward_shapes_and_state(arch, pooling):
    model = small(arch, pooling)
    tokens = torch.randint(0, V, (7, 4))
    logits, state = model(tokens)
    assert logits.shape == (7, 4, V)
    assert isinstance(state, tuple)
    assert [tuple(s.shape) for s in state] == state_shapes(arch, 4)
    assert all(s.requires_grad for s in state)  # returned un-detached
    zeros = model.init_state(4, "cpu")
    assert [tuple(s.shape) for s in zeros] == state_shapes(arch, 4)
    assert all(s.abs().sum() == 0 for s in zeros)
    again, state2 = model(tokens, zeros)
    assert torch.allclose(again, logits)
    detached = RecurrentLM.detach_state(state)
    assert isinstance(detached, tuple) and not any(s.requires_grad for s in detached)
    logits3, _ = model(tokens, detached)  # carried state is accepted
    assert logits3.shape == (7, 4, V)


@pytest.mark.parametrize("arch,pooling", ARCH_CASES)
def test_chunks_with_carried_state_equal_whole(arch, pooling):
    model = small(arch, pooling).double()
    tokens = torch.randint(0, V, (9, 3))
    whole, state = model(tokens)
    a, s1 = model(tokens[:4])
    b, s2 = model(tokens[4:], RecurrentLM.detach_state(s1))
    assert torch.allclose(torch.cat([a, b]), whole, atol=1e-12)
    for x, y in zip(s2, state, strict=True):
        assert torch.allclose(x, y, atol=1e-12)


@pytest.mark.parametrize(
    "arch,pooling,paper",
    [
        ("rnn", "sum", 8.3e6),
        ("hornn", "sum", 8.6e6),
        ("hornn", "max", 8.6e6),
        ("hornn", "fofe", 8.6e6),
        ("lstm", "sum", 9.3e6),
        ("hornn", "gated", 9.6e6),
    ],
)
def test_parameter_counts_match_paper(arch, pooling, paper):
    cfg = ModelConfig(arch=arch, pooling=pooling, order=3, hidden_size=400, num_layers=1)
    model = build_model(cfg, 10_000)
    assert abs(model.num_parameters() - paper) / paper <= 0.03


@pytest.mark.parametrize("arch,pooling", ARCH_CASES)
def test_init_is_normal_with_zero_biases(arch, pooling):
    model = small(arch, pooling, init_std=0.05)
    for name, p in model.named_parameters():
        if "bias" in name:
            assert p.abs().sum() == 0, name
        else:
            assert 0.03 < p.std().item() < 0.07, name


def _hand_norms(model: RecurrentLM) -> dict[str, float]:
    """Return the per-path gradient norms computed by hand from the documented layout."""
    want = {}
    if model.arch == "hornn":
        for li, layer in enumerate(model.layers):
            N = layer.order
            for n in range(1, N + 1):
                block = layer.weight_hh.grad[:, (n - 1) * H : n * H]
                want[f"layer{li}/path{n}"] = block.norm().item()
            if layer.cfg.pooling == "gated":
                for n in range(1, N + 1):
                    w1 = layer.weight_ih.grad[:, n * H : (n + 1) * H]
                    w2 = layer.weight_hh.grad[:, (N + n - 1) * H : (N + n) * H]
                    want[f"layer{li}/gate{n}"] = (w1.norm() ** 2 + w2.norm() ** 2).sqrt().item()
    else:
        for li in range(model.num_layers):
            want[f"layer{li}/path1"] = getattr(model.rnn, f"weight_hh_l{li}").grad.norm().item()
    return want


@pytest.mark.parametrize("arch,pooling", ARCH_CASES)
def test_path_grad_norms(arch, pooling):
    model = small(arch, pooling)
    tokens = torch.randint(0, V, (6, 3))
    logits, _ = model(tokens[:-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tokens[1:].reshape(-1))
    loss.backward()
    norms = model.path_grad_norms()
    want = _hand_norms(model)
    assert set(norms) == set(want)
    for key, value in want.items():
        assert norms[key].item() == pytest.approx(value, rel=1e-5), key
        assert value > 0, key
    slices = model.feedback_path_slices()
    assert set(slices) == set(want)
    for pieces in slices.values():
        for param, idx in pieces:
            assert isinstance(param, torch.nn.Parameter)
            assert param.grad[idx].dim() == 2


def test_path_grad_norms_before_backward_are_zero():
    norms = small("hornn", "gated").path_grad_norms()
    assert len(norms) == 2 * (3 + 3) and all(v.item() == 0 for v in norms.values())


def float64_path_norms(model: RecurrentLM) -> dict[str, float]:
    """Return each path's gradient norm from its slices, in float64 (missing grads count 0)."""
    want = {}
    for key, pieces in model.feedback_path_slices().items():
        squares = [
            param.grad[idx].double().norm() ** 2 for param, idx in pieces if param.grad is not None
        ]
        want[key] = float(sum(squares, torch.zeros((), dtype=torch.float64)).sqrt())
    return want


def backward_once(model: RecurrentLM) -> None:
    """Run one LM loss backward on a tiny random batch."""
    tokens = torch.randint(0, V, (6, 3))
    logits, _ = model(tokens[:-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tokens[1:].reshape(-1))
    loss.backward()


@pytest.mark.parametrize("arch,pooling", ARCH_CASES)
def test_path_grad_norm_vector_matches_a_float64_reference(arch, pooling):
    model = small(arch, pooling)
    before = model.path_grad_norm_vector()
    assert before.shape == (len(model.feedback_path_slices()),) and not before.any()
    assert all(v.item() == 0 for v in model.path_grad_norms().values())
    backward_once(model)
    vector = model.path_grad_norm_vector()
    norms = model.path_grad_norms()
    want = float64_path_norms(model)
    assert vector.dtype == torch.float32 and vector.shape == (len(want),)
    assert list(norms) == list(want)  # the keys of feedback_path_slices, in its order
    assert torch.equal(torch.stack(list(norms.values())), vector)
    for key, value in want.items():
        assert value > 0, key
        assert norms[key].dim() == 0
        assert norms[key].item() == pytest.approx(value, rel=1e-6), key


def test_gate_norm_with_one_gradient_missing():
    model = small("hornn", "gated")
    backward_once(model)
    model.layers[0].weight_ih.grad = None  # the W1n pieces: the gate norms are |W2n grad| alone
    norms = model.path_grad_norms()
    for key, value in float64_path_norms(model).items():
        assert norms[key].item() == pytest.approx(value, rel=1e-6), key


def test_path_grad_norms_of_a_float64_model():
    model = small("hornn", "gated").double()
    backward_once(model)
    vector = model.path_grad_norm_vector()
    assert vector.dtype == torch.float32
    want = torch.tensor(list(float64_path_norms(model).values()), dtype=torch.float32)
    assert torch.allclose(vector, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("arch,pooling", ARCH_CASES)
def test_column_normalize_caps_norms(arch, pooling):
    model = small(arch, pooling, init_std=1.0)
    biases = {n: p.detach().clone() for n, p in model.named_parameters() if "bias" in n}
    before = {id(w): w.detach().clone() for w, _ in max_norm_vectors(model)}
    column_normalize_(model, 1.5)
    for w, dim in max_norm_vectors(model):
        norms = torch.linalg.vector_norm(w, dim=dim)
        assert norms.max().item() <= 1.5 + 1e-5
        old = before[id(w)]
        old_norms = torch.linalg.vector_norm(old, dim=dim, keepdim=True)
        small_ones = (old_norms <= 1.5).expand_as(old)
        assert torch.equal(w[small_ones], old[small_ones])  # vectors under the cap untouched
    for name, p in model.named_parameters():
        if name in biases:
            assert torch.equal(p, biases[name])
    # the hidden-to-hidden vectors are per unit and per path block: columns of weight_hh
    if arch == "hornn":
        w = model.layers[0].weight_hh
        assert torch.linalg.vector_norm(w, dim=0).max().item() <= 1.5 + 1e-5


def old_column_normalize_(model: RecurrentLM, max_norm: float) -> None:
    """The formula column_normalize_ used before it was shortened: the bitwise reference."""
    with torch.no_grad():
        for weight, dim in max_norm_vectors(model):
            norms = torch.linalg.vector_norm(weight, dim=dim, keepdim=True)
            weight.mul_((max_norm / norms.clamp_min(1e-12)).clamp(max=1.0))


# 1.7 and 2.9: x.reciprocal() * x is not 1 in float32 there (below-cap factors must stay 1)
@pytest.mark.parametrize("max_norm", [1.5, 1.7, 2.0, 2.9, 3.3, 1e-13])
@pytest.mark.parametrize("arch,pooling", [("hornn", "gated"), ("hornn", "fofe"), ("lstm", "sum")])
def test_column_normalize_is_bitwise_the_old_formula(arch, pooling, max_norm):
    model = small(arch, pooling, init_std=1.0)
    with torch.no_grad():
        for w, dim in max_norm_vectors(model):  # spread the norms around the cap
            scale = torch.rand(w.shape[1 - dim], generator=torch.Generator().manual_seed(1))
            w.mul_(2 * scale.unsqueeze(dim) * (max_norm / w.shape[dim] ** 0.5))
            w.select(1 - dim, 0).zero_()  # a zero vector
            w.select(1 - dim, 1).mul_(1e-14)  # one under the old 1e-12 floor
    ref = copy.deepcopy(model)
    spread = [torch.linalg.vector_norm(w, dim=dim) / max_norm for w, dim in max_norm_vectors(model)]
    if max_norm > 1e-6:
        assert all((s < 1).any() and (s > 1).any() for s in spread)
    column_normalize_(model, max_norm)
    old_column_normalize_(ref, max_norm)
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_column_normalize_noop_when_disabled():
    model = small("hornn", init_std=1.0)
    before = [p.detach().clone() for p in model.parameters()]
    column_normalize_(model, 0.0)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_column_normalize_reaches_a_wrapped_model():
    # A wrapper with a `.module`, as DDP's (benchmarks' eager-ddp rows) or a user's: max-norm
    # reaches the bare model inside. A plain wrapper, not DDP: an in-process gloo group here
    # could hang in ProcessGroupGloo's destructor at teardown.
    class Wrapper(torch.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

    model = small("hornn", "gated", init_std=1.0)
    column_normalize_(Wrapper(model), 1.0)
    for w, dim in max_norm_vectors(model):
        assert torch.linalg.vector_norm(w, dim=dim).max().item() <= 1.0 + 1e-5


@pytest.mark.parametrize("engine", ["fused", "loop"])
def test_engines_agree_in_the_lm(engine):
    fused = small("hornn", "gated").double()
    other = small("hornn", "gated", engine=engine).double()
    other.load_state_dict(fused.state_dict())
    tokens = torch.randint(0, V, (6, 3))
    a, _ = fused(tokens)
    b, _ = other(tokens)
    a.pow(2).sum().backward()
    b.pow(2).sum().backward()
    assert torch.allclose(a, b, atol=1e-12)
    for p, q in zip(fused.parameters(), other.parameters(), strict=True):
        assert torch.allclose(p.grad, q.grad, atol=1e-12)


@pytest.mark.parametrize("pooling", ["sum", "max", "fofe", "gated"])
def test_cpu_autocast_lm_forward(pooling):
    model = small("hornn", pooling)
    tokens = torch.randint(0, V, (5, 2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, state = model(tokens)
    assert torch.isfinite(logits.float()).all()
    assert all(s.dtype == torch.float32 for s in state)
    logits.float().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize(
    "kw,key",
    [
        ({"arch": "transformer"}, "model.arch"),
        ({"pooling": "avg"}, "model.pooling"),
        ({"order": 0}, "model.order"),
        ({"alpha": 1.2}, "model.alpha"),
        ({"engine": "cudnn"}, "model.engine"),
        ({"arch": "rnn", "activation": "sigmoid"}, "model.activation"),
    ],
)
def test_build_model_rejects_bad_config(kw, key):
    with pytest.raises(ConfigError) as excinfo:
        build_model(ModelConfig(**kw), V)
    assert key in str(excinfo.value) and "\n" not in str(excinfo.value)


def test_build_model_rejects_bad_vocab():
    with pytest.raises(ConfigError, match="vocab_size"):
        build_model(ModelConfig(), 0)


def test_bad_state_length():
    model = small("hornn")
    with pytest.raises(ValueError, match="one history per layer"):
        model(torch.randint(0, V, (3, 2)), (torch.zeros(3, 2, H),))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("precision", ["fp32", "autocast", "fp16"])
@pytest.mark.parametrize("arch,pooling", ARCH_CASES)
def test_cuda_lm_bf16_agrees_with_fp32(arch, pooling, precision):
    """With the plan the trainer makes for a bf16 CUDA run (engine "auto": triton here)."""
    cfg = small_config(arch, pooling, recurrence_precision=precision)
    torch.manual_seed(0)
    model = build_model(cfg, V, plan_for(cfg, "cuda", 4, "bf16")).cuda()
    tokens = torch.randint(0, V, (10, 4), device="cuda")
    ref, _ = model(tokens)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits, state = model(tokens)
    err = (logits.float() - ref).norm() / ref.norm()
    assert err.item() <= 1e-2
