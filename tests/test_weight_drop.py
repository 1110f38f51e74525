"""model.weight_drop: DropConnect on the recurrent weights, against float64 references."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from hornn_dist.config import load_config
from hornn_dist.models import ModelConfig, RecurrentLM, build_model
from hornn_dist.models.hornn import HornnLayer
from hornn_dist.training.step_setup import graph_unavailable_reason
from hornn_dist.util.errors import ConfigError
from tests.reference_hornn import reference_layer
from tests.train_helpers import check_ok, final_weights, run_here, write_tiny_config

V, H = 30, 8
POOLINGS = ["sum", "max", "fofe", "gated"]


def config(arch: str = "hornn", pooling: str = "fofe", order: int = 3, **kw) -> ModelConfig:
    """Return a tiny two-layer config (E = 6)."""
    return ModelConfig(
        arch=arch, pooling=pooling, order=order, hidden_size=H, embedding_size=6, num_layers=2, **kw
    )


def seeded(cfg: ModelConfig, seed: int = 0) -> RecurrentLM:
    torch.manual_seed(seed)
    return build_model(cfg, V).double()


def with_feedback(layer: HornnLayer, weight_hh: torch.Tensor) -> HornnLayer:
    """Return a copy of layer whose weight_hh is the given tensor (for the reference)."""
    twin = copy.deepcopy(layer)
    twin.weight_hh = torch.nn.Parameter(weight_hh.detach().clone())
    return twin


@pytest.mark.parametrize("order", [1, 3])
@pytest.mark.parametrize("pooling", POOLINGS)
def test_a_hornn_under_weight_drop_matches_the_paper_reference_with_dropped_matrices(
    pooling, order
):
    """Each layer's weight_hh (every W_hn, and gated's W2n) times one mask for the window,
    scaled by 1/(1-p), through the one-step-at-a-time eq. 3-7 reference (order 1: the RNN)."""
    p = 0.4
    model = seeded(config("hornn", pooling, order, weight_drop=p)).train()
    tokens = torch.randint(0, V, (6, 3))
    torch.manual_seed(11)
    got, _ = model(tokens)
    torch.manual_seed(11)  # the masks, drawn layer by layer as the model draws them
    dropped = [F.dropout(layer.weight_hh, p) for layer in model.layers]
    x = model.embedding(tokens)
    for layer, weight_hh in zip(model.layers, dropped, strict=True):
        history = torch.zeros(order, 3, H, dtype=torch.float64)
        x, _ = reference_layer(with_feedback(layer, weight_hh), x, history)
    want = model.decoder(x)
    assert (got - want).abs().max() <= 1e-12 * want.abs().max()
    zeros = (dropped[0] == 0).float().mean().item()
    assert 0.25 < zeros < 0.55  # p of the entries, each layer its own mask
    assert not torch.equal(dropped[0] == 0, dropped[1][:, : dropped[0].shape[1]] == 0)


@pytest.mark.parametrize("arch", ["rnn", "lstm", "gru"])
def test_torch_rnns_under_weight_drop_match_the_module_with_dropped_weight_hh(arch):
    p = 0.3
    model = seeded(config(arch, weight_drop=p)).train()
    tokens = torch.randint(0, V, (6, 3))
    torch.manual_seed(5)
    got, _ = model(tokens)
    torch.manual_seed(5)
    twin = copy.deepcopy(model.rnn)
    with torch.no_grad():  # in named_parameters order, as the model draws them
        for name, param in twin.named_parameters():
            if name.startswith("weight_hh"):
                param.copy_(F.dropout(param, p))
    want = model.decoder(twin(model.embedding(tokens))[0])
    assert torch.equal(got, want)
    for name, param in model.rnn.named_parameters():  # the parameters themselves untouched
        assert torch.equal(param, dict(seeded(config(arch)).rnn.named_parameters())[name])


@pytest.mark.parametrize("arch,pooling", [("hornn", "gated"), ("hornn", "fofe"), ("lstm", "sum")])
def test_weight_drop_is_off_in_eval_and_at_0_and_draws_nothing(arch, pooling):
    plain = seeded(config(arch, pooling)).eval()
    model = seeded(config(arch, pooling, weight_drop=0.5)).eval()
    tokens = torch.randint(0, V, (5, 2))
    with torch.no_grad():
        rng = torch.get_rng_state()
        want = plain(tokens)[0]
        assert torch.equal(model(tokens)[0], want)  # eval: the weights as they are
        assert torch.equal(plain.train()(tokens)[0], want)  # weight_drop 0 in training
        assert torch.equal(torch.get_rng_state(), rng)  # and no draw in either
        model.train()
        assert not torch.equal(model(tokens)[0], model(tokens)[0])  # a new mask each forward


@pytest.mark.parametrize("pooling", POOLINGS)
def test_weight_drop_gradients_pass_gradcheck(pooling):
    """The gradient reaches the kept entries of weight_hh, scaled by 1/(1-p), none the dropped."""
    torch.manual_seed(0)
    layer = HornnLayer(3, 4, order=2, pooling=pooling, weight_drop=0.3).double().train()
    x = torch.randn(4, 2, 3, dtype=torch.float64)

    def run(weight_hh: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(2)  # the same mask at every call
        return torch.func.functional_call(layer, {"weight_hh": weight_hh}, (x,))[0]

    weight_hh = layer.weight_hh.detach().clone().requires_grad_(True)
    if pooling == "max":  # keep clear of ties, where max has no derivative
        weight_hh = (weight_hh * 3).detach().requires_grad_(True)
    assert torch.autograd.gradcheck(run, (weight_hh,), eps=1e-6, atol=1e-6)
    run(weight_hh).sum().backward()
    torch.manual_seed(2)
    kept = F.dropout(torch.ones_like(weight_hh), 0.3) != 0
    assert weight_hh.grad[~kept].abs().max() == 0 and weight_hh.grad[kept].abs().max() > 0


@pytest.mark.parametrize("value", [1.0, -0.1, 2])
def test_a_bad_weight_drop_is_one_line_naming_the_key_and_its_range(value):
    with pytest.raises(ConfigError) as excinfo:
        build_model(config(weight_drop=value), V)
    message = str(excinfo.value)
    assert "\n" not in message and "model.weight_drop" in message and "[0, 1)" in message
    with pytest.raises(ConfigError, match=r"^model.weight_drop must be in \[0, 1\)"):
        HornnLayer(3, 4, weight_drop=value)  # a layer alone: the same key, the same words


def test_weight_drop_runs_the_step_eagerly_until_cuda_graphs_have_run_it():
    on_cuda = SimpleNamespace(device=torch.device("cuda"))  # only its device is read
    cfg = load_config(None, ["model.weight_drop=0.2"])
    assert graph_unavailable_reason(cfg, on_cuda) == (
        "model.weight_drop > 0 (not yet run under CUDA graphs)"
    )


@pytest.mark.integration
def test_a_run_under_weight_drop_and_dropout_resumes_bit_for_bit(tmp_path):
    """The masks come from the generators a checkpoint saves: stopped mid-epoch and resumed, a
    run with weight drop (and dropout) ends with the weights of the same run trained straight."""
    config = str(write_tiny_config(tmp_path))
    check_ok(run_here("hornn_dist.prepare", config))
    drop = ["--set", "model.weight_drop=0.3", "--set", "model.dropout=0.2"]

    def train(name: str, steps: int, *extra: str):
        out = f"train.output_dir={tmp_path / name}"
        return run_here(
            "hornn_dist.train", config, *extra, "--set", out, "--set", f"train.max_steps={steps}"
        )

    check_ok(train("straight", 20, *drop))
    check_ok(train("resumed", 7, *drop))
    second = train("resumed", 20, *drop)
    check_ok(second)
    assert "resuming from" in second.stderr
    straight, resumed = final_weights(tmp_path / "straight"), final_weights(tmp_path / "resumed")
    assert straight.keys() == resumed.keys()
    for key in straight:
        assert torch.equal(straight[key], resumed[key]), key
    check_ok(train("dropout_only", 20, "--set", "model.dropout=0.2"))  # the same but weight drop
    other = final_weights(tmp_path / "dropout_only")
    assert not torch.equal(other["layers.0.weight_hh"], straight["layers.0.weight_hh"])
