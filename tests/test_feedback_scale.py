"""model.feedback_scale: every feedback path W_hn times c, against the float64 reference."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from hornn_dist.config import load_config
from hornn_dist.models import ModelConfig, build_model
from hornn_dist.models.hornn import HornnLayer
from hornn_dist.models.init import recurrent_std
from hornn_dist.training.step_setup import graph_unavailable_reason
from hornn_dist.util.errors import ConfigError
from tests.reference_hornn import reference_layer
from tests.train_helpers import check_ok, final_weights, run_here, write_tiny_config

V, H = 30, 8
POOLINGS = ["sum", "max", "fofe", "gated"]


def config(pooling: str = "fofe", order: int = 3, **kw) -> ModelConfig:
    """Return a tiny two-layer HORNN config (E = 6)."""
    return ModelConfig(
        pooling=pooling, order=order, hidden_size=H, embedding_size=6, num_layers=2, **kw
    )


def seeded(cfg: ModelConfig, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(cfg, V).double().eval()


@pytest.mark.parametrize("order", [1, 3])
@pytest.mark.parametrize("pooling", POOLINGS)
def test_a_scaled_hornn_matches_the_reference_with_c_times_the_pooled_feedback(pooling, order):
    """c multiplies eq. 3-6's pooled feedback (gated's gates r_n keep their W2n), layer by
    layer, in the one-step-at-a-time reference; c = 1 is the paper's model."""
    c = 0.3
    model = seeded(config(pooling, order, feedback_scale=c))
    tokens = torch.randint(0, V, (7, 3))
    got, _ = model(tokens)
    x = model.embedding(tokens)
    for layer in model.layers:
        assert layer.cfg.feedback_scale == c
        x, _ = reference_layer(layer, x, torch.zeros(order, 3, H, dtype=torch.float64))
    want = model.decoder(x)
    assert (got - want).abs().max() <= 1e-12 * want.abs().max()
    plain = seeded(config(pooling, order))
    with torch.no_grad():  # the same weights at c = 1 give other outputs
        for p, q in zip(plain.parameters(), model.parameters(), strict=True):
            p.copy_(q)
    assert (plain(tokens)[0] - got).abs().max() > 1e-3


def test_order_one_at_c_is_the_rnn_fofe_alpha_scaled_it_the_same_init_and_outputs():
    """The RNN with its feedback scaled was FOFE at order 1 (α^1 W_h1); sum at order 1 with
    c = α draws the same weights (the init rule counts c) and computes the same outputs."""
    scaled_sum = seeded(config("sum", 1, feedback_scale=0.2, recurrent_init="scaled"))
    fofe = seeded(config("fofe", 1, alpha=0.2, recurrent_init="scaled"))
    assert recurrent_std(scaled_sum.cfg) == recurrent_std(fofe.cfg)
    for p, q in zip(scaled_sum.parameters(), fofe.parameters(), strict=True):
        assert torch.equal(p, q)
    tokens = torch.randint(0, V, (9, 2))
    a, b = scaled_sum(tokens)[0], fofe(tokens)[0]
    assert (a - b).abs().max() <= 1e-12 * b.abs().max()


def test_the_scaled_init_counts_c_in_each_paths_pool_weight():
    wide = dict(hidden_size=400, recurrent_init="scaled")
    assert recurrent_std(ModelConfig(pooling="sum", **wide)) == pytest.approx(1 / math.sqrt(1200))
    # at c 0.2 the three summed paths start at gain 0.2·√3·0.1·20 < 1: N(0, init_std) as drawn
    assert recurrent_std(ModelConfig(pooling="sum", feedback_scale=0.2, **wide)) == 0.1
    gated = ModelConfig(pooling="gated", feedback_scale=0.8, **wide)  # w_n = 0.8 · σ(0)
    assert recurrent_std(gated) == pytest.approx(1 / math.sqrt(400 * 3 * 0.4**2))


@pytest.mark.parametrize("pooling", POOLINGS)
def test_feedback_scale_gradients_pass_gradcheck(pooling):
    torch.manual_seed(0)
    layer = HornnLayer(3, 4, order=2, pooling=pooling, feedback_scale=0.4).double()
    x = torch.randn(4, 2, 3, dtype=torch.float64, requires_grad=True)
    weight_hh = layer.weight_hh.detach().clone()
    if pooling == "max":  # keep clear of ties, where max has no derivative
        weight_hh = weight_hh * 3
    weight_hh.requires_grad_(True)

    def run(x: torch.Tensor, weight_hh: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(layer, {"weight_hh": weight_hh}, (x,))[0]

    assert torch.autograd.gradcheck(run, (x, weight_hh), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("value", [0.0, -0.5, 10.5, math.nan])
def test_a_bad_feedback_scale_is_one_line_naming_the_key_and_its_range(value):
    with pytest.raises(ConfigError) as excinfo:
        build_model(config(feedback_scale=value), V)
    message = str(excinfo.value)
    assert "\n" not in message and "model.feedback_scale" in message and "(0, 10]" in message
    with pytest.raises(ConfigError, match=r"^model.feedback_scale must be in \(0, 10\]"):
        HornnLayer(3, 4, feedback_scale=value)  # a layer alone: the same key, the same words


def torch_rnn_reference(model, tokens: torch.Tensor, c: float) -> torch.Tensor:
    """Return the logits of a torch rnn/lstm/gru LM with every weight_hh times c, from the
    module's weights by the textbook cell equations, step by step in float64."""
    x = model.embedding(tokens)  # (T, B, E)
    params = dict(model.rnn.named_parameters())
    for layer in range(model.num_layers):
        w_ih, w_hh = params[f"weight_ih_l{layer}"], c * params[f"weight_hh_l{layer}"]
        b_ih, b_hh = params[f"bias_ih_l{layer}"], params[f"bias_hh_l{layer}"]
        h = torch.zeros(x.shape[1], model.hidden_size, dtype=x.dtype)
        cell = torch.zeros_like(h)
        out = []
        for x_t in x:
            gi, gh = x_t @ w_ih.T + b_ih, h @ w_hh.T + b_hh
            if model.arch == "rnn":
                h = torch.tanh(gi + gh)
            elif model.arch == "lstm":
                i, f, g, o = (gi + gh).chunk(4, 1)
                cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(cell)
            else:  # gru
                (ir, iz, in_), (hr, hz, hn) = gi.chunk(3, 1), gh.chunk(3, 1)
                r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
                h = (1 - z) * torch.tanh(in_ + r * hn) + z * h
            out.append(h)
        x = torch.stack(out)  # (T, B, H)
    return model.decoder(x)


@pytest.mark.parametrize("arch", ["rnn", "lstm", "gru"])
def test_a_scaled_torch_rnn_matches_the_cell_equations_with_c_times_weight_hh(arch):
    """The feedback scale on torch's modules (the knob the HORNNs and the RNN row have): every
    layer's weight_hh, all gates' blocks, times c in the forward; the parameters untouched."""
    c = 0.3
    cfg = ModelConfig(arch=arch, hidden_size=H, embedding_size=6, num_layers=2)
    model = seeded(ModelConfig(**{**cfg.__dict__, "feedback_scale": c}))
    tokens = torch.randint(0, V, (5, 3))
    got, _ = model(tokens)
    want = torch_rnn_reference(model, tokens, c)
    assert (got - want).abs().max() <= 1e-12 * want.abs().max()
    plain = seeded(cfg)  # the same draw: c changes the forward, not the weights (LSTM, GRU)
    if arch != "rnn":
        pairs = zip(plain.parameters(), model.parameters(), strict=True)
        assert all(torch.equal(a, b) for a, b in pairs)
    assert not torch.allclose(plain(tokens)[0], got)


@pytest.mark.parametrize("arch", ["rnn", "lstm", "gru"])
def test_a_scaled_torch_rnns_gradients_pass_gradcheck(arch):
    from torch.func import functional_call

    cfg = ModelConfig(arch=arch, hidden_size=4, embedding_size=3, feedback_scale=0.4)
    model = seeded(cfg)
    tokens = torch.randint(0, V, (4, 2))
    weight = dict(model.named_parameters())["rnn.weight_hh_l0"].detach().clone()

    def run(weight_hh: torch.Tensor) -> torch.Tensor:
        return functional_call(model, {"rnn.weight_hh_l0": weight_hh}, (tokens,))[0]

    assert torch.autograd.gradcheck(run, (weight.requires_grad_(),), eps=1e-6, atol=1e-6)


def test_the_scaled_init_counts_the_rnns_scale_and_leaves_the_lstms_draw() -> None:
    wide = {"hidden_size": 400, "recurrent_init": "scaled"}
    assert recurrent_std(ModelConfig(arch="rnn", **wide)) == 1 / math.sqrt(400)
    assert recurrent_std(ModelConfig(arch="rnn", feedback_scale=0.2, **wide)) == 0.1  # capped
    assert recurrent_std(ModelConfig(arch="rnn", feedback_scale=0.04, **wide)) == 0.1
    assert recurrent_std(ModelConfig(arch="lstm", feedback_scale=0.2, **wide)) == 0.1


def test_feedback_scale_is_in_the_models_words_and_runs_eagerly_until_graphs_ran_it():
    cfg = load_config(None, ["model.feedback_scale=0.2", "model.pooling=gated"])
    assert cfg.model.describe().endswith(", feedback scaled by 0.2")
    assert cfg.model.label() == "hornn/gated order 3, feedback x0.2"
    assert "feedback" not in load_config(None, []).model.describe()
    assert load_config(None, []).model.label() == "hornn/fofe order 3"
    on_cuda = SimpleNamespace(device=torch.device("cuda"))  # only its device is read
    assert graph_unavailable_reason(cfg, on_cuda) == (
        "model.feedback_scale != 1 (not yet run under CUDA graphs)"
    )


@pytest.mark.integration
def test_a_scaled_run_says_so_at_start_and_resumes_bit_for_bit(tmp_path):
    """The scale is part of the model a checkpoint holds: stopped and resumed, a run at c 0.3
    ends with the weights of the same run trained straight, and its log names the scale."""
    config = str(write_tiny_config(tmp_path))
    check_ok(run_here("hornn_dist.prepare", config))

    def train(name: str, steps: int, scale: str = "0.3"):
        sets = [f"train.output_dir={tmp_path / name}", f"train.max_steps={steps}"]
        sets += ["model.pooling=max", f"model.feedback_scale={scale}"]
        return run_here("hornn_dist.train", config, *(a for s in sets for a in ("--set", s)))

    check_ok(train("straight", 12))
    check_ok(train("resumed", 5))
    second = train("resumed", 12)
    check_ok(second)
    assert (
        "resuming from" in second.stderr and "hornn/max order 3, feedback x0.3 (" in second.stderr
    )
    straight, resumed = final_weights(tmp_path / "straight"), final_weights(tmp_path / "resumed")
    for key in straight:
        assert torch.equal(straight[key], resumed[key]), key
    plain = train("plain", 12, "1")
    check_ok(plain)
    assert "hornn/max order 3 (" in plain.stderr and "feedback x" not in plain.stderr
    other = final_weights(tmp_path / "plain")["layers.0.weight_hh"]
    assert not torch.equal(other, straight["layers.0.weight_hh"])
