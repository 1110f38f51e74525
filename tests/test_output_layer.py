"""The output layers of `model.output_layer`: the fused linear + cross-entropy against the plain
layer (float64, gradcheck, bf16), the adaptive softmax's normalised distribution, the model,
the trainer's step, the memory check and the commands (train, evaluate, generate, export)."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hornn_dist.config import config_from_dict, load_config
from hornn_dist.data.pipeline import corpus_folder
from hornn_dist.data.shards import open_corpus
from hornn_dist.models import ModelConfig, build_model
from hornn_dist.models import output_layer as ol
from hornn_dist.models.output_layer import AdaptiveSoftmax, default_cutoffs, fused_cross_entropy
from hornn_dist.models.pretrained import PretrainedLM
from hornn_dist.training.memory import activation_elements
from hornn_dist.training.optim import build_optimizer
from hornn_dist.training.step import TrainStep
from hornn_dist.util.errors import ConfigError
from tests.reference_step import reference_step
from tests.train_helpers import (
    check_ok,
    launch_two_ranks,
    run_here,
    train_into,
    write_tiny_config,
)

V, H = 53, 8


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 7 tokens, softmax blocks of 3 rows: every path of the loop runs at small sizes."""
    monkeypatch.setattr(ol, "MIN_CHUNK_TOKENS", 7)
    monkeypatch.setattr(ol, "CHUNK_ELEMENTS", 7 * V)
    monkeypatch.setattr(ol, "BLOCK_ELEMENTS", 3 * V)


def layer_inputs(tokens: int, bias: bool, dtype=torch.float64, seed: int = 0):
    """Return hidden (N, H), weight (V, H), bias (V,) or None (requiring grad), targets (N,)."""
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, H, generator=gen, dtype=dtype).requires_grad_()
    weight = (torch.randn(V, H, generator=gen, dtype=dtype) * 0.5).requires_grad_()
    b = (torch.randn(V, generator=gen, dtype=dtype) * 0.1).requires_grad_() if bias else None
    targets = torch.randint(0, V, (tokens,), generator=gen)
    return hidden, weight, b, targets


def loss_and_grads(loss_fn, hidden, weight, bias, targets):
    inputs = [t for t in (hidden, weight, bias) if t is not None]
    loss = loss_fn(hidden, weight, bias, targets)
    return loss, torch.autograd.grad(loss, inputs)


def plain(hidden, weight, bias, targets):
    """The plain layer as the model runs it: logits, then a float32 cross-entropy."""
    logits = F.linear(hidden, weight, bias)
    return F.cross_entropy(logits.float() if logits.dtype != torch.float64 else logits, targets)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("tokens", [1, 7, 20, 37])
def test_fused_loss_and_every_gradient_equal_the_plain_layers_in_float64(
    small_chunks, bias, tokens
):
    inputs = layer_inputs(tokens, bias)
    loss, grads = loss_and_grads(fused_cross_entropy, *inputs)
    ref_loss, ref_grads = loss_and_grads(plain, *inputs)
    assert loss.dtype == torch.float64
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-13)


def test_fused_layer_passes_gradcheck(small_chunks):
    hidden, weight, bias, targets = layer_inputs(17, bias=True)
    assert torch.autograd.gradcheck(
        lambda h, w, b: fused_cross_entropy(h, w, b, targets), (hidden, weight, bias)
    )


def test_fused_per_token_losses_equal_the_plain_layers(small_chunks):
    hidden, weight, bias, targets = layer_inputs(23, bias=True)
    with torch.no_grad():
        got = fused_cross_entropy(hidden, weight, bias, targets, reduction="none")
        want = F.cross_entropy(F.linear(hidden, weight, bias), targets, reduction="none")
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="without gradient only"):
        fused_cross_entropy(hidden, weight, bias, targets, reduction="none")


def test_a_second_backward_through_the_fused_layer_gives_the_same_gradients(small_chunks):
    hidden, weight, bias, targets = layer_inputs(20, bias=True)
    loss = fused_cross_entropy(hidden, weight, bias, targets)
    first = torch.autograd.grad(loss, (hidden, weight, bias), retain_graph=True)
    second = torch.autograd.grad(loss * 2, (hidden, weight, bias))
    for a, b in zip(first, second, strict=True):
        torch.testing.assert_close(2 * a, b, rtol=1e-12, atol=0)


def bf16_errors(loss_fn, tokens: int = 40):
    """Return the relative errors of loss_fn under CPU bf16 autocast from the float64 plain
    layer: (loss, d hidden, d weight, d bias)."""
    inputs = layer_inputs(tokens, bias=True)
    ref_loss, ref_grads = loss_and_grads(plain, *inputs)
    hidden, weight, bias, targets = [
        t.detach().float().requires_grad_() if t.is_floating_point() else t for t in inputs
    ]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(hidden, weight, bias, targets)
    grads = torch.autograd.grad(loss, (hidden, weight, bias))
    ref_loss = ref_loss.detach()
    errors = [float((loss.detach().double() - ref_loss).abs() / ref_loss.abs())]
    for got, want in zip(grads, ref_grads, strict=True):
        assert got.dtype == torch.float32
        errors.append(float((got.double() - want).norm() / want.norm()))
    return errors


def test_fused_layer_under_bf16_is_as_close_to_float64_as_the_plain_layer(small_chunks):
    """Both round the GEMMs' inputs and outputs to bf16 (8 bits): within 2% of float64, and
    the fused layer at most 1.5x the plain layer's error (it rounds dW once, as the plain)."""
    fused = bf16_errors(fused_cross_entropy)
    ref = bf16_errors(plain)
    assert max(fused) < 2e-2, fused
    for got, want in zip(fused, ref, strict=True):
        assert got <= 1.5 * want + 1e-3, (fused, ref)


def small_model_config(output_layer: str, **extra) -> ModelConfig:
    return ModelConfig(
        arch="hornn", pooling="gated", order=2, hidden_size=H, output_layer=output_layer, **extra
    )


@pytest.mark.parametrize("arch", ["hornn", "lstm"])
def test_a_tied_fused_model_has_the_plain_models_loss_and_gradients(small_chunks, arch):
    """The fused layer reads the same weights (the embedding's, tied): one state dict, and in
    float64 the loss and the gradient of every parameter of the plain model's logits under a
    float64 cross-entropy (the plain layer's own loss rounds its logits to float32)."""
    cfg = ModelConfig(arch=arch, order=2, hidden_size=H, tie_weights=True)
    torch.manual_seed(0)
    model = build_model(cfg, V).double()
    fused = build_model(dataclasses.replace(cfg, output_layer="fused"), V).double()
    fused.load_state_dict(model.state_dict())
    assert fused.decoder.weight is fused.embedding.weight
    tokens, targets = torch.randint(0, V, (6, 3)), torch.randint(0, V, (6, 3))
    logits, _ = model(tokens)
    want = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    want.backward()
    got, _ = fused(tokens, targets=targets)
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
    for (name, p), q in zip(model.named_parameters(), fused.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-10, atol=1e-14, msg=name)


def test_the_fused_models_steps_follow_the_plain_reference_step(small_chunks):
    """The trainer's step on a fused model takes the reference step's (plain) steps, to float32
    rounding: losses and weights after 4 steps."""
    cfg = config_from_dict(
        {
            "model": {"pooling": "fofe", "order": 2, "hidden_size": 16, "output_layer": "fused"},
            "optim": {"lr": 0.3, "momentum": 0.5, "max_col_norm": 2.0},
            "train": {"batch_size": 4, "bptt": 6},
        }
    )
    torch.manual_seed(0)
    model = build_model(cfg.model, V)
    ref = build_model(dataclasses.replace(cfg.model, output_layer="plain"), V)
    ref.load_state_dict(model.state_dict())
    step = TrainStep(
        model,
        build_optimizer(model, cfg.optim),
        device=torch.device("cpu"),
        batch_size=4,
        bptt=6,
        optim=cfg.optim,
        graph_reason="eager",
    )
    opt = build_optimizer(ref, cfg.optim)
    state = ref.init_state(4)
    data = torch.randint(0, V, (4, 7, 4), generator=torch.Generator().manual_seed(1))
    for block in data:
        loss = step.run(block[:-1], block[1:], measure=False).clone()
        result = reference_step(ref, opt, block[:-1], block[1:], state, cfg.optim)
        state = result.state
        torch.testing.assert_close(loss, result.loss, rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def adaptive(cutoffs=(5, 20), div: float = 4.0, tied: bool = False) -> AdaptiveSoftmax:
    """A float64 adaptive softmax with N(0, 0.5) weights; tied, its head's shortlist rows are
    an embedding's (V, H) of its own, reached as `layer.head.embedding`."""
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(V, H).double() if tied else None
    layer = AdaptiveSoftmax(H, V, list(cutoffs), div, embedding).double()
    for p in [*layer.parameters(), *(embedding.parameters() if tied else [])]:
        torch.nn.init.normal_(p, 0.0, 0.5)
    return layer


def every_weight(layer: AdaptiveSoftmax) -> list[torch.Tensor]:
    """Its parameters, and a tied head's embedding matrix last."""
    tied = isinstance(layer.head, ol.TiedHead)
    return [*layer.parameters(), *([layer.head.embedding.weight] if tied else [])]


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("cutoffs", [(), (5,), (5, 20), (1, 2, 52)])
def test_adaptive_log_probabilities_of_every_word_sum_to_one(cutoffs, tied):
    layer = adaptive(cutoffs, tied=tied)
    hidden = torch.randn(30, H, dtype=torch.float64)
    with torch.no_grad():
        log_prob = layer.log_prob(hidden)  # (N, V)
    assert log_prob.shape == (30, V)
    torch.testing.assert_close(log_prob.exp().sum(1), torch.ones(30, dtype=torch.float64))
    targets = torch.arange(30) % V
    nll = layer.nll(hidden, targets)  # only each target's cluster scored
    torch.testing.assert_close(nll, -log_prob.gather(1, targets[:, None]).squeeze(1))


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("cutoffs", [(5, 20), (5, 52)])  # (5, 52): a cluster of 1 word
def test_adaptive_training_loss_through_the_fused_layer_equals_the_mean_nll(
    small_chunks, cutoffs, tied
):
    """mean_loss (the head and each cluster through the fused layer, clusters weighted by their
    share of tokens) is nll(...).mean() in float64, loss and every gradient (tied: the
    embedding's too); a cluster no target falls in is left out."""
    layer = adaptive(cutoffs, tied=tied)
    hidden = torch.randn(40, H, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 52, (40,), generator=torch.Generator().manual_seed(3))
    params = [hidden, *every_weight(layer)]
    got = layer.mean_loss(hidden, targets)
    got_grads = torch.autograd.grad(got, params, allow_unused=True)
    want = layer.nll(hidden, targets).mean()
    want_grads = torch.autograd.grad(want, params, allow_unused=True)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
    for a, b in zip(got_grads, want_grads, strict=True):
        if b is None or not b.any():  # the word-52 cluster: no target in it
            assert a is None or not a.any()
        else:
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


def test_a_cluster_without_tokens_still_gets_a_zero_gradient():
    """A step whose targets miss a cluster gives its weights a zero gradient, not none (the
    gradient exchange waits for every output weight's)."""
    layer = AdaptiveSoftmax(8, 20, [5, 10], 2.0)
    hidden = torch.randn(6, 8, requires_grad=True)
    layer.mean_loss(hidden, torch.tensor([0, 1, 2, 3, 4, 0])).backward()  # the head's words only
    for name, weight in layer.named_parameters():
        assert weight.grad is not None, name
        if name.startswith("tail"):
            assert torch.count_nonzero(weight.grad) == 0, name


def test_a_tied_head_scores_like_an_untied_one_holding_the_embeddings_shortlist_rows():
    """The plain reference: an untied layer whose head is the embedding's first c_1 rows over
    the tied head's cluster rows, the same bias and clusters, gives the same log-probabilities
    and NLL in float64; the embedding's rows past the shortlist play no part."""
    tied = adaptive((5, 20), tied=True)
    embedding = tied.head.embedding
    untied = AdaptiveSoftmax(H, V, [5, 20], 4.0).double()
    with torch.no_grad():
        untied.head.weight.copy_(torch.cat([embedding.weight[:5], tied.head.cluster_weight]))
        untied.head.bias.copy_(tied.head.bias)
        for a, b in zip(untied.tail.parameters(), tied.tail.parameters(), strict=True):
            a.copy_(b)
    hidden = torch.randn(30, H, dtype=torch.float64)
    targets = torch.randint(0, V, (30,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(tied.log_prob(hidden), untied.log_prob(hidden), rtol=0, atol=0)
        torch.testing.assert_close(tied.nll(hidden, targets), untied.nll(hidden, targets))
        before = tied.log_prob(hidden)
        embedding.weight[5:].normal_()  # rows the head does not hold
        torch.testing.assert_close(tied.log_prob(hidden), before, rtol=0, atol=0)
        embedding.weight[:5].mul_(2.0)
        assert not torch.allclose(tied.log_prob(hidden), before)


class TrainingLoss(torch.nn.Module):
    """A tied adaptive layer's `mean_loss`, with the embedding it shares as a module of its own
    (so torch.func.functional_call can put a gradcheck input in its place)."""

    def __init__(self, layer: AdaptiveSoftmax):
        super().__init__()
        self.embedding, self.layer = layer.head.embedding, layer

    def forward(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.layer.mean_loss(hidden, targets)


def test_a_tied_adaptive_head_passes_gradcheck_through_the_embedding(small_chunks):
    """gradcheck (float64) of the training loss in the hidden states, the embedding matrix the
    head shares and the head's own cluster rows."""
    layer = adaptive((5, 20), tied=True)
    holder = TrainingLoss(layer)
    targets = torch.tensor([0, 3, 4, 5, 7, 19, 20, 33, 52, 1, 2, 6])  # every cluster

    def loss(hidden, embedding, cluster_weight):
        weights = {"embedding.weight": embedding, "layer.head.cluster_weight": cluster_weight}
        return torch.func.functional_call(holder, weights, (hidden, targets))

    inputs = (
        torch.randn(12, H, dtype=torch.float64, requires_grad=True),
        layer.head.embedding.weight.detach().clone().requires_grad_(),
        layer.head.cluster_weight.detach().clone().requires_grad_(),
    )
    assert torch.autograd.gradcheck(loss, inputs, eps=1e-6, atol=1e-6)
    _, grad_embedding, _ = torch.autograd.grad(loss(*inputs), inputs)
    assert grad_embedding[:5].abs().sum() > 0  # the head's words: from the loss of every token
    assert not grad_embedding[5:].any()  # the rest: the input side is not in this loss


def test_a_tied_adaptive_model_saves_the_embedding_once_and_holds_c1_times_h_fewer_weights():
    untied = build_model(small_model_config("adaptive", adaptive_cutoffs=[5, 20]), V)
    cfg = small_model_config("adaptive", adaptive_cutoffs=[5, 20], tie_weights=True)
    tied = build_model(cfg, V)
    count = sum(p.numel() for p in tied.parameters())
    assert count == sum(p.numel() for p in untied.parameters()) - 5 * H
    keys = tied.state_dict().keys()
    assert "embedding.weight" in keys and "decoder.head.cluster_weight" in keys
    assert not any(k.startswith("decoder.head.weight") for k in keys)
    again = build_model(cfg, V)
    again.load_state_dict(copy.deepcopy(tied.state_dict()))  # strict
    assert torch.equal(again.decoder.head.weight, tied.decoder.head.weight)
    assert "shortlist tied to the embedding" in repr(tied.decoder)
    copied = copy.deepcopy(tied)  # one embedding in the copy too, not the original's
    assert copied.decoder.head.embedding is copied.embedding


def test_adaptive_clusters_project_to_hidden_over_div_to_the_i_and_the_head_has_a_bias():
    layer = AdaptiveSoftmax(64, 1000, [100, 400], 4.0)
    assert layer.head.weight.shape == (102, 64) and layer.head.bias.shape == (102,)
    assert [tuple(t[0].weight.shape) for t in layer.tail] == [(16, 64), (4, 64)]
    assert [tuple(t[1].weight.shape) for t in layer.tail] == [(300, 16), (600, 4)]
    # parameters: head 64*102 + 102, clusters 64*16 + 16*300 + 64*4 + 4*600
    assert sum(p.numel() for p in layer.parameters()) == 6630 + 5824 + 2656


def test_an_adaptive_model_scores_its_targets_with_a_normalised_distribution():
    cfg = small_model_config("adaptive", adaptive_cutoffs=[5, 20])
    torch.manual_seed(0)
    model = build_model(cfg, V).double().eval()
    tokens, targets = torch.randint(0, V, (5, 3)), torch.randint(0, V, (5, 3))
    log_prob, _ = model(tokens)  # (T, B, V): what generate and a cross-entropy read
    torch.testing.assert_close(log_prob.exp().sum(-1), torch.ones(5, 3, dtype=torch.float64))
    nll, _ = model(tokens, targets=targets, reduction="none")
    torch.testing.assert_close(nll, -log_prob.gather(2, targets[..., None]).squeeze(2))
    mean, _ = model(tokens, targets=targets)
    torch.testing.assert_close(mean, nll.mean())


def test_coverage_cutoffs_are_where_the_leading_ids_reach_90_and_98_percent():
    """A plain count: the fewest leading ids whose tokens reach each share, in [1, V)."""
    assert ol.DEFAULT_CUTOFF_COVERAGE == (0.9, 0.98)
    assert ol.coverage_cutoffs([50, 30, 10, 5, 3, 2]) == [3, 5]  # 90 of 100, then 98
    assert ol.coverage_cutoffs([50, 30, 9, 5, 3, 2, 1]) == [4, 6]  # 89 < 90 at three ids
    assert ol.coverage_cutoffs([95, 4, 1]) == [1, 2]
    assert ol.coverage_cutoffs([99, 1]) == [1]  # both shares at id 1: one cluster
    assert ol.coverage_cutoffs([1]) == []  # a one-word vocabulary: the head alone


def test_an_adaptive_run_saves_the_cutoffs_its_training_counts_give(tmp_path):
    """`model.adaptive_cutoffs = []` trains with the cutoffs of the training split's counts
    (over several shards), saved in the run's config.toml, which a resume and evaluate use."""
    write_tiny_config(
        tmp_path, train_words=2000, data={"shard_tokens": 300},
        model={"output_layer": "adaptive"}, train={"max_steps": 4},
    )  # fmt: skip
    run = tmp_path / "run"
    check_ok(train_into(tmp_path, run))
    saved = load_config(run / "config.toml")
    corpus = open_corpus(corpus_folder(saved.data))
    train = corpus.split("train")
    assert len(train._files) > 1  # the counts span shards
    counts = np.bincount(train.read(0, len(train)), minlength=corpus.vocab_size)
    assert train.id_counts(corpus.vocab_size).tolist() == counts.tolist()
    share = np.cumsum(counts) / counts.sum()
    expected = sorted({int(np.argmax(share >= s - 1e-12)) + 1 for s in (0.9, 0.98)})
    assert saved.model.adaptive_cutoffs == [c for c in expected if c < corpus.vocab_size]
    assert saved.model.adaptive_cutoffs != default_cutoffs(corpus.vocab_size)
    check_ok(train_into(tmp_path, run, "--set", "train.max_steps=6"))  # resumes: same shapes
    assert load_config(run / "config.toml").model.adaptive_cutoffs == saved.model.adaptive_cutoffs
    check_ok(run_here("hornn_dist.evaluate", str(run), "--split", "test"))


def test_default_cutoffs_are_five_and_twenty_percent_of_the_vocabulary():
    """What a run saved with [] before the trainer resolved cutoffs from counts was built with."""
    assert default_cutoffs(44_000) == [2200, 8800]
    assert default_cutoffs(267_735) == [13387, 53547]
    assert default_cutoffs(10) == [2]  # 0.5 rounds to 0: no cluster there
    assert default_cutoffs(3) == [1] and default_cutoffs(2) == []  # [] one softmax, the head
    model = build_model(small_model_config("adaptive"), 1000)
    assert model.decoder.cutoffs == [50, 200]


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"output_layer": "big"}, "model.output_layer must be one of plain, fused, adaptive"),
        ({"output_layer": "adaptive", "adaptive_cutoffs": [20, 5]},
         "model.adaptive_cutoffs must be increasing word ids >= 1, got [20, 5]"),
        ({"output_layer": "adaptive", "adaptive_cutoffs": [0, 5]},
         "model.adaptive_cutoffs must be increasing word ids >= 1"),
        ({"adaptive_cutoffs": [5]},
         'model.adaptive_cutoffs applies to model.output_layer = "adaptive" only'),
        ({"output_layer": "adaptive", "adaptive_cutoffs": ["5"]},
         "model.adaptive_cutoffs must be a list of integers"),
        ({"output_layer": "adaptive", "adaptive_div_value": 0.5},
         "model.adaptive_div_value must be in [1, 64], got 0.5"),
        ({"output_layer": "adaptive", "tie_weights": True, "embedding_size": 16},
         "model.tie_weights = true needs model.embedding_size equal to model.hidden_size"),
    ],
)  # fmt: skip
def test_each_new_key_is_refused_out_of_range_in_one_line(model, message):
    with pytest.raises(ConfigError) as err:
        config_from_dict({"model": model})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_cutoffs_past_the_vocabulary_are_refused_where_the_model_is_built():
    cfg = small_model_config("adaptive", adaptive_cutoffs=[5, 60])
    with pytest.raises(
        ConfigError, match=r"model.adaptive_cutoffs must be below the vocabulary size 53"
    ):
        build_model(cfg, V)


def test_set_reads_cutoffs_as_a_toml_list():
    cfg = load_config(None, ["model.output_layer=adaptive", "model.adaptive_cutoffs=[10, 40]"])
    assert cfg.model.adaptive_cutoffs == [10, 40]
    assert "adaptive_cutoffs = [10, 40]" in cfg.to_toml()
    assert cfg.flat()["model.adaptive_cutoffs"] == "10,40"


def test_the_memory_check_counts_the_chosen_output_layer():
    def elements(layer: str, **extra) -> int:
        cfg = ModelConfig(arch="lstm", hidden_size=1024, output_layer=layer, **extra)
        return activation_elements(cfg, 267_735, batch=64, bptt=35)

    plain, fused, adapt = elements("plain"), elements("fused"), elements("adaptive")
    assert fused < plain / 4 and adapt < plain
    base = activation_elements(ModelConfig(arch="lstm", hidden_size=1024), 267_735, 64, 35)
    assert plain - base == 0 and plain > 3 * 64 * 35 * 267_735


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("layer", ["plain", "fused", "adaptive"])
def test_a_model_with_each_output_layer_round_trips_through_a_hub_folder(tmp_path, layer, tie):
    cfg = small_model_config(layer, tie_weights=tie, embedding_size=H)
    torch.manual_seed(0)
    model = PretrainedLM(cfg, V).eval()
    model.save_pretrained(tmp_path)
    back = PretrainedLM.from_pretrained(tmp_path)
    assert back.cfg == cfg and back.state_dict().keys() == model.state_dict().keys()
    tokens = torch.randint(0, V, (4, 1))
    with torch.no_grad():
        assert torch.equal(back(tokens)[0], model(tokens)[0])


@pytest.mark.parametrize("layer", ["fused", "adaptive"])
def test_train_evaluate_generate_and_export_run_with_each_output_layer(tmp_path, layer):
    """The real commands on a tiny corpus: the run's test perplexity is what evaluate and the
    exported model card say, and generate samples words."""
    write_tiny_config(tmp_path, model={"output_layer": layer}, train={"max_steps": 6})
    run = tmp_path / "run"
    trained = train_into(tmp_path, run)
    check_ok(trained)
    scored = run_here("hornn_dist.evaluate", str(run), "--split", "test")
    check_ok(scored)
    ppl = scored.stdout.split("ppl ")[-1].strip()
    sampled = run_here("hornn_dist.generate", str(run), "--prompt", "w1 w2", "--tokens", "4",
                       "--seed", "1")  # fmt: skip
    check_ok(sampled)
    assert sampled.stdout.startswith("w1 w2 ") and len(sampled.stdout) > len("w1 w2 ")
    exported = run_here("hornn_dist.export", str(run), str(tmp_path / "hub"))
    check_ok(exported)
    assert f"(test ppl {ppl})" in exported.stdout
    back = PretrainedLM.from_pretrained(tmp_path / "hub")
    assert back.cfg.output_layer == layer


def test_a_plain_and_a_fused_model_share_one_state_dict():
    plain_model = build_model(small_model_config("plain"), V)
    fused_model = build_model(small_model_config("fused"), V)
    fused_model.load_state_dict(copy.deepcopy(plain_model.state_dict()))  # strict
    assert plain_model.state_dict().keys() == fused_model.state_dict().keys()


@pytest.mark.parametrize("layer", ["fused", "adaptive", "adaptive-tied"])
def test_the_gradient_exchange_sends_each_output_layers_weights_early(layer):
    """Several processes all-reduce the output layer's gradients first (training/exchange.py):
    the fused layer's are the plain layer's (tied: the embedding's, late), the adaptive
    softmax's are its head's and clusters'; the untied embedding may travel as rows, the
    embedding a tied head shares never (its shortlist rows get every token's gradient)."""
    from hornn_dist.training.exchange import plan_exchange

    tie = layer != "adaptive"
    output_layer = layer.removesuffix("-tied")
    model = build_model(small_model_config(output_layer, tie_weights=tie, embedding_size=H), V)
    plan = plan_exchange(model, tokens=24, processes=2, reduce_dtype="fp32")
    plain = build_model(small_model_config("plain", tie_weights=tie, embedding_size=H), V)
    if layer == "fused":
        assert plan == plan_exchange(plain, tokens=24, processes=2, reduce_dtype="fp32")
        assert plan.early == ("decoder.bias",)
    else:
        names = {n for n, _ in model.decoder.named_parameters(prefix="decoder")}
        head = "decoder.head.cluster_weight" if tie else "decoder.head.weight"
        assert set(plan.early) == names and head in names
        assert not set(plan.late) & names
        assert (plan.rows == "embedding.weight") is (not tie)
        assert ("embedding.weight" in plan.late) is tie


@pytest.mark.integration
@pytest.mark.parametrize("layer", ["fused", "adaptive", "adaptive-tied"])
def test_two_ranks_train_with_each_output_layer(tmp_path, layer):
    """A real 2-process launch (gloo): the ranks exchange the output layer's gradients, the
    adaptive softmax's untied embedding as rows (tied: whole), and the run trains to its end."""
    tie = layer.endswith("-tied")
    model = {"output_layer": layer.removesuffix("-tied"), "tie_weights": tie}
    if tie:
        model["embedding_size"] = 0  # = hidden_size, as tying needs
    config = write_tiny_config(tmp_path, model=model, train={"max_steps": 4})
    proc = launch_two_ranks("hornn_dist.train", str(config))
    check_ok(proc)
    assert "training ended at step 4" in proc.stderr
