"""`model.recurrent_init`: the feedback weights' std per arch and pooling, the rest untouched."""

from __future__ import annotations

import math

import pytest
import torch

from hornn_dist.config import load_config
from hornn_dist.models import ModelConfig, build_model
from hornn_dist.models.init import describe, recurrent_std
from hornn_dist.util.errors import ConfigError

V, H = 40, 64


def model_of(arch: str, pooling: str, order: int, init: str, seed: int = 0, std: float = 0.5):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        arch=arch,
        pooling=pooling,
        order=order,
        hidden_size=H,
        recurrent_init=init,
        alpha=0.5,
        init_std=std,
    )
    return cfg, build_model(cfg, V)


def feedback_blocks(model) -> list[torch.Tensor]:
    """Return each feedback matrix (HORNN path blocks W_hn^T, or the torch RNN's weight_hh)."""
    if model.arch == "hornn":
        layer = model.layers[0]
        return [layer.weight_hh[:, layer.path_block(n)] for n in range(1, layer.order + 1)]
    return [p for name, p in model.rnn.named_parameters() if name.startswith("weight_hh")]


# sum of squared path weights at init: 1 per path for sum/max/rnn, (α^n)² for fofe, ¼ for gated
@pytest.mark.parametrize(
    ("arch", "pooling", "order", "sum_w2"),
    [
        ("hornn", "sum", 1, 1.0),
        ("hornn", "sum", 3, 3.0),
        ("hornn", "max", 4, 4.0),
        ("hornn", "fofe", 3, 0.25 + 0.0625 + 0.015625),
        ("hornn", "gated", 2, 0.5),
        ("rnn", "sum", 3, 1.0),
    ],
)
def test_scaled_draws_each_feedback_path_at_one_over_sqrt_h_sum_w2(arch, pooling, order, sum_w2):
    cfg, model = model_of(arch, pooling, order, "scaled")
    want = 1 / math.sqrt(H * sum_w2)
    assert recurrent_std(cfg) == pytest.approx(want)
    for block in feedback_blocks(model):
        assert block.std().item() == pytest.approx(want, rel=0.06)
    for name, p in model.named_parameters():  # everything else is N(0, init_std) or zero
        if "bias" in name:
            assert p.abs().sum() == 0, name
        elif "weight_hh" not in name:
            assert p.std().item() == pytest.approx(0.5, rel=0.06), name
    if pooling == "gated":  # the gates' W2n keep init_std
        layer = model.layers[0]
        gates = layer.weight_hh[:, order * H :]
        assert gates.std().item() == pytest.approx(0.5, rel=0.06)


def test_scaled_never_raises_the_gain_above_init_std():
    # FOFE-3 (α 0.6) and gated-3 at H 128 have a pooled gain under 1 at N(0, 0.1): kept as drawn
    for pooling in ("fofe", "gated"):
        cfg = ModelConfig(pooling=pooling, hidden_size=128, recurrent_init="scaled")
        assert recurrent_std(cfg) == 0.1
        assert "gain <= 1 already" in describe(cfg)
        torch.manual_seed(3)
        scaled = build_model(cfg, V)
        torch.manual_seed(3)
        paper = build_model(
            ModelConfig(pooling=pooling, hidden_size=128, recurrent_init="paper"), V
        )
        assert all(
            torch.equal(p, q) for p, q in zip(scaled.parameters(), paper.parameters(), strict=True)
        )
    # at H 400 the same FOFE-3 would start at gain 1.46: capped to 1
    cfg = ModelConfig(pooling="fofe", hidden_size=400, recurrent_init="scaled")
    assert recurrent_std(cfg) == pytest.approx(1 / math.sqrt(400 * (0.36 + 0.6**4 + 0.6**6)))


def test_scaled_gives_the_pooled_feedback_a_gain_near_one():
    # the point of the rule: a sum of 3 paths starts with the gain of one N(0, 1/H) matrix
    _, model = model_of("hornn", "sum", 3, "scaled", std=0.1)
    pooled = sum(feedback_blocks(model))
    radius = torch.linalg.eigvals(pooled.double()).abs().max().item()
    assert 0.8 < radius < 1.2
    _, paper = model_of("hornn", "sum", 3, "paper", std=0.1)
    assert torch.linalg.eigvals(sum(feedback_blocks(paper)).double()).abs().max().item() > 1.2


@pytest.mark.parametrize(
    ("arch", "pooling"), [("hornn", "sum"), ("hornn", "gated"), ("rnn", "sum"), ("lstm", "sum")]
)
def test_paper_draws_the_same_weights_as_before_the_option(arch, pooling):
    # "paper" is the init before the option: one normal_ stream at init_std, bit for bit
    _, model = model_of(arch, pooling, 3, "paper", std=0.1)
    _, ref = model_of(arch, pooling, 3, "paper", std=0.1)
    torch.manual_seed(7)
    model.reset_parameters()
    torch.manual_seed(7)
    with torch.no_grad():  # the old RecurrentLM.reset_parameters
        for name, p in ref.named_parameters():
            p.zero_() if "bias" in name.rsplit(".", 1)[-1] else p.normal_(0.0, 0.1)
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_lstm_and_gru_keep_init_std_under_scaled():
    for arch in ("lstm", "gru"):
        cfg, model = model_of(arch, "sum", 3, "scaled")
        assert recurrent_std(cfg) == 0.5
        assert "every weight ~ N(0, 0.5)" in describe(cfg)
        for block in feedback_blocks(model):
            assert block.std().item() == pytest.approx(0.5, rel=0.06)


def test_describe_names_the_rule_and_the_resolved_std():
    cfg = ModelConfig(pooling="sum", order=3, hidden_size=128, recurrent_init="scaled")
    assert describe(cfg).startswith("init scaled: feedback paths ~ N(0, 0.05103)")


def test_bad_recurrent_init_is_one_line_naming_the_key():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["model.recurrent_init=orthogonal"])
    message = str(info.value)
    assert "model.recurrent_init" in message and "paper, scaled" in message
    assert "\n" not in message
