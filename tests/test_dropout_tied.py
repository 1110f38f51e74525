"""model.dropout and model.tie_weights in the language model: placement, determinism, sharing, errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from hornn_dist.models import ModelConfig, RecurrentLM, build_model, column_normalize_
from hornn_dist.models.pretrained import PretrainedLM
from hornn_dist.sweeps.sweep_file import read_sweep
from hornn_dist.util.errors import ConfigError
from tests.reference_hornn import reference_stack
from tests.train_helpers import REPO

V, H = 30, 8
ARCHS = [("hornn", "fofe"), ("hornn", "gated"), ("rnn", "sum"), ("lstm", "sum"), ("gru", "sum")]


def config(arch: str = "hornn", pooling: str = "fofe", **kw) -> ModelConfig:
    """Return a tiny two-layer config (E = 6 unless tied)."""
    kw.setdefault("embedding_size", 0 if kw.get("tie_weights") else 6)
    return ModelConfig(arch=arch, pooling=pooling, order=3, hidden_size=H, num_layers=2, **kw)


def seeded(cfg: ModelConfig, seed: int = 0) -> RecurrentLM:
    torch.manual_seed(seed)
    return build_model(cfg, V)


def composed(model: RecurrentLM, tokens: torch.Tensor, p: float) -> torch.Tensor:
    """Return the logits of the model's modules called one by one, dropping at p (training)
    where Zaremba et al. drop: after the embedding, between layers, before the output."""
    x = F.dropout(model.embedding(tokens), p) if p else model.embedding(tokens)
    if model.rnn is not None:
        x, _ = model.rnn(x)  # its own dropout between its layers
    for i, layer in enumerate(model.layers):
        x, _ = layer(F.dropout(x, p) if p and i else x)
    return model.decoder(F.dropout(x, p) if p else x)


@pytest.mark.parametrize("arch,pooling", ARCHS)
def test_dropout_0_is_the_model_without_dropout_bit_for_bit(arch, pooling):
    model = seeded(config(arch, pooling))
    assert seeded(config(arch, pooling, dropout=0.5)).state_dict().keys() == (
        model.state_dict().keys()
    )
    for key, value in seeded(config(arch, pooling, dropout=0.5)).state_dict().items():
        assert torch.equal(value, model.state_dict()[key]), key  # dropout draws nothing at init
    model.train()
    tokens = torch.randint(0, V, (7, 3))
    rng = torch.get_rng_state()
    logits, _ = model(tokens)
    assert torch.equal(torch.get_rng_state(), rng)  # no draw from the generator either
    assert torch.equal(logits, composed(model, tokens, 0.0))


@pytest.mark.parametrize("arch,pooling", ARCHS)
def test_dropout_eval_is_deterministic_and_training_draws_new_masks(arch, pooling):
    model = seeded(config(arch, pooling, dropout=0.4))
    plain = seeded(config(arch, pooling))
    tokens = torch.randint(0, V, (6, 3))
    model.eval()
    with torch.no_grad():
        first, second = model(tokens)[0], model(tokens)[0]
        assert torch.equal(first, second)
        assert torch.equal(first, plain.eval()(tokens)[0])  # eval: dropout is the identity
    model.train()
    with torch.no_grad():
        assert not torch.equal(model(tokens)[0], model(tokens)[0])


@pytest.mark.parametrize("arch,pooling", [*ARCHS, ("hornn", "sum"), ("hornn", "max")])
def test_dropout_only_on_the_non_recurrent_connections(arch, pooling):
    model = seeded(config(arch, pooling, dropout=0.3)).train()
    tokens = torch.randint(0, V, (6, 3))
    torch.manual_seed(7)
    got, _ = model(tokens)
    torch.manual_seed(7)  # the same masks, drawn in the same order at the same places
    assert torch.equal(got, composed(model, tokens, 0.3))


@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("engine", ["fused", "loop"])
@pytest.mark.parametrize("pooling", ["sum", "max", "fofe", "gated"])
def test_every_engine_matches_the_float64_reference_in_the_lm(engine, pooling, dropout):
    """Eval mode (dropout 0.3 is then the identity): embedding -> eq. 3-7 reference -> output."""
    model = seeded(config("hornn", pooling, engine=engine, dropout=dropout)).double().eval()
    tokens = torch.randint(0, V, (5, 2))
    x = model.embedding(tokens)
    histories = [torch.zeros(3, 2, H, dtype=torch.float64) for _ in model.layers]
    want = model.decoder(reference_stack(list(model.layers), x, histories)[0])
    got, _ = model(tokens)
    assert (got - want).abs().max() <= 1e-10 * want.abs().max()


def test_engines_agree_in_training_mode_with_dropout():
    fused = seeded(config("hornn", "gated", dropout=0.3)).double().train()
    loop = seeded(config("hornn", "gated", dropout=0.3, engine="loop")).double().train()
    tokens = torch.randint(0, V, (6, 3))
    torch.manual_seed(3)
    a, _ = fused(tokens)
    torch.manual_seed(3)
    b, _ = loop(tokens)
    assert torch.allclose(a, b, atol=1e-12)


@pytest.mark.parametrize("arch,pooling", ARCHS)
def test_tied_weights_are_one_tensor_saved_once(arch, pooling, tmp_path):
    model = seeded(config(arch, pooling, tie_weights=True))
    assert model.decoder.weight is model.embedding.weight
    assert model.decoder.weight.data_ptr() == model.embedding.weight.data_ptr()
    untied = seeded(config(arch, pooling, embedding_size=H))
    assert model.num_parameters() == untied.num_parameters() - V * H
    keys = set(model.state_dict())
    assert "decoder.weight" not in keys and keys == set(untied.state_dict()) - {"decoder.weight"}
    save_file(model.state_dict(), str(tmp_path / "w.safetensors"))  # refuses shared tensors
    back = seeded(config(arch, pooling, tie_weights=True), seed=1)
    back.load_state_dict(load_file(str(tmp_path / "w.safetensors")))  # strict
    assert back.decoder.weight is back.embedding.weight
    tokens = torch.randint(0, V, (5, 2))
    with torch.no_grad():
        assert torch.equal(back(tokens)[0], model(tokens)[0])


def test_tied_weights_train_as_one_matrix():
    model = seeded(config(tie_weights=True))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    tokens = torch.randint(0, V, (6, 3))
    logits, _ = model(tokens)
    F.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    optimizer.step()
    assert model.decoder.weight is model.embedding.weight  # still one after an update
    column_normalize_(model, 0.01)
    assert torch.linalg.vector_norm(model.embedding.weight, dim=1).max() <= 0.01 * (1 + 1e-6)


def test_tied_hub_round_trip(tmp_path):
    model = PretrainedLM(config(tie_weights=True), V)
    model.save_pretrained(tmp_path)
    back = PretrainedLM.from_pretrained(tmp_path)
    assert back.cfg == model.cfg and back.decoder.weight is back.embedding.weight
    for key, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key


def locked(x: torch.Tensor, p: float) -> torch.Tensor:
    """Return x (T, B, F) times one Bernoulli(1 - p) / (1 - p) mask per stream and feature,
    the same at every step: the reference of model.dropout_mask = "sequence"."""
    keep = 1.0 - p
    return x * (torch.empty(1, *x.shape[1:], dtype=x.dtype).bernoulli_(keep) / keep)


def composed_locked(model: RecurrentLM, tokens: torch.Tensor, p: float) -> torch.Tensor:
    """`composed` with a sequence mask at each place dropout drops."""
    x = locked(model.embedding(tokens), p)
    for i, layer in enumerate(model.layers):
        x, _ = layer(locked(x, p) if i else x)
    return model.decoder(locked(x, p))


@pytest.mark.parametrize("pooling", ["fofe", "gated", "max"])
def test_a_sequence_mask_matches_its_float64_reference(pooling):
    model = seeded(config("hornn", pooling, dropout=0.4, dropout_mask="sequence")).double()
    tokens = torch.randint(0, V, (6, 3))
    model.train()
    torch.manual_seed(11)
    got, _ = model(tokens)
    torch.manual_seed(11)  # the same masks, drawn in the same order at the same places
    want = composed_locked(model, tokens, 0.4)
    assert (got - want).abs().max() <= 1e-12 * want.abs().max()
    model.eval()
    plain = seeded(config("hornn", pooling)).double().eval()
    rng = torch.get_rng_state()
    with torch.no_grad():
        assert torch.equal(model(tokens)[0], plain(tokens)[0])  # eval: the identity
    assert torch.equal(torch.get_rng_state(), rng)  # and no draw


def test_a_sequence_mask_is_the_same_at_every_step_and_keeps_the_mean():
    model = seeded(config(dropout=0.25, dropout_mask="sequence")).train()
    ones = torch.ones(5, 400, 64)
    dropped = model._drop(ones)
    assert torch.equal(dropped, dropped[:1].expand_as(dropped))  # one mask for the window
    assert dropped.unique().tolist() == [0.0, pytest.approx(1 / 0.75)]
    assert abs(dropped.mean().item() - 1.0) < 0.02  # E[mask] = 1: no rescaling at eval
    step = seeded(config(dropout=0.25)).train()._drop(ones)  # "step": a new mask per token
    assert not torch.equal(step, step[:1].expand_as(step))


@pytest.mark.parametrize(
    "kw,words",
    [
        ({"dropout_mask": "time"}, ["model.dropout_mask", "step", "sequence"]),
        ({"dropout": 1.0}, ["model.dropout", "[0, 1)"]),
        ({"dropout": -0.1}, ["model.dropout", "[0, 1)"]),
        ({"tie_weights": True, "embedding_size": 6}, ["model.embedding_size", "model.hidden_size"]),
    ],
)
def test_bad_dropout_or_tying_is_one_line_naming_the_keys(kw, words):
    with pytest.raises(ConfigError) as excinfo:
        build_model(config(**kw), V)
    message = str(excinfo.value)
    assert "\n" not in message and all(word in message for word in words), message
    if "tie_weights" in kw:
        assert "model.tie_weights" in message


def test_the_dropout_sweep_pairs_runs_that_differ_by_dropout_alone_at_equal_budget():
    runs = {r.name: r.config for r in read_sweep(REPO / "configs/sweeps/demo_dropout.toml").runs}
    assert len(runs) == 4
    for model in ("hornn3-fofe", "lstm"):
        off, on = runs[f"{model}-dropout0.0"], runs[f"{model}-dropout0.2"]
        assert (off.model.dropout, on.model.dropout) == (0.0, 0.2)
        on.model.dropout = 0.0
        assert on.model == off.model and on.optim == off.optim
        assert on.train.epochs == off.train.epochs and off.optim.stop_improvement == 0


def test_a_sequence_mask_runs_the_step_eagerly_until_cuda_graphs_have_run_it():
    from types import SimpleNamespace

    from hornn_dist.config import load_config
    from hornn_dist.training.step_setup import graph_unavailable_reason

    on_cuda = SimpleNamespace(device=torch.device("cuda"))  # only its device is read
    cfg = load_config(None, ["model.dropout=0.5", 'model.dropout_mask="sequence"'])
    assert graph_unavailable_reason(cfg, on_cuda) == (
        'model.dropout_mask = "sequence" (not yet run under CUDA graphs)'
    )
    step = load_config(None, ["model.dropout=0.5"])
    assert graph_unavailable_reason(step, on_cuda) is None
