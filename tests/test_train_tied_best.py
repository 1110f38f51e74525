"""Real runs of a tied, dropout model on the tiny corpus: the run's test score is its best
checkpoint's (what `evaluate` gives on checkpoints/best), tied weights survive save, exact
resume and export."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hornn_dist.models.pretrained import PretrainedLM
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.loading import load_model, open_prepared_corpus, resolve_trained
from hornn_dist.run.run_state import TrainerState
from hornn_dist.runtime import build_accelerator
from hornn_dist.sweeps.results import read_run
from hornn_dist.training.scoring import EvalResult, score_split
from tests.train_helpers import check_ok, final_weights, run_here, scalars, write_tiny_config

TIED = {"embedding_size": 0, "tie_weights": True, "dropout": 0.3}
K_STEPS, K_FIRST = (
    30,
    7,
)  # as tests/test_train.py: two epoch ends (14 steps each), resumed mid-epoch


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tied")
    config = write_tiny_config(folder, model=TIED)
    check_ok(run_here("hornn_dist.prepare", str(config)))
    return folder


def train(workdir: Path, name: str, *extra: str):
    out = f"train.output_dir={workdir / name}"
    return run_here("hornn_dist.train", str(workdir / "config.toml"), "--set", out, *extra)


@pytest.fixture(scope="module")
def straight(workdir: Path) -> Path:
    check_ok(train(workdir, "straight", "--set", f"train.max_steps={K_STEPS}"))
    return workdir / "straight"


@pytest.fixture(scope="module")
def kicked(workdir: Path) -> tuple[Path, str]:
    """A run whose best checkpoint is not its last: two epochs, then 4 steps at a 100× lr."""
    check_ok(train(workdir, "kicked", "--set", "train.max_steps=28"))
    second = train(workdir, "kicked", "--set", "train.max_steps=32", "--set", "optim.lr=30")
    check_ok(second)
    return workdir / "kicked", second.stderr


def evaluated(target: Path) -> tuple[Path, EvalResult]:
    """Return the checkpoint `evaluate TARGET --split test` scores and its result, computed by
    the pieces the command runs (the command prints rounded numbers)."""
    folder, cfg = resolve_trained(target)
    accelerator = build_accelerator(cfg.train.mixed_precision)
    corpus = open_prepared_corpus(cfg.data, accelerator, splits=["test"], prepare=False)
    model = load_model(folder, cfg, corpus, accelerator.device)
    train = cfg.train
    return folder, score_split(
        model, corpus, "test", accelerator, train.eval_batch_size, train.bptt
    )


def test_the_runs_test_score_is_its_best_checkpoints_and_the_last_is_beside_it(
    kicked: tuple[Path, str],
) -> None:
    run, log = kicked
    state = TrainerState.read(ckpt.list_checkpoints(run)[-1])
    assert state.step == 32 and state.best_checkpoint == "step_00000028"
    assert state.test_checkpoint == "step_00000028"
    test, last = EvalResult.from_record(state.test), EvalResult.from_record(state.test_last)

    folder, at_best = evaluated(run / "checkpoints" / "best")
    assert folder.name == "step_00000028"
    assert at_best.loss_sum == test.loss_sum and at_best.tokens == test.tokens
    folder, at_newest = evaluated(run)  # a run directory: its newest checkpoint
    assert folder.name == "step_00000032" and at_newest.loss_sum == last.loss_sum
    assert last.ppl > test.ppl  # the lr kick made the last weights worse

    cli = run_here("hornn_dist.evaluate", str(run / "checkpoints" / "best"), "--split", "test")
    check_ok(cli)
    assert "(step 28: the best by validation, whose test score the run reports)" in cli.stdout
    assert f"loss {test.loss:.4f} ppl {test.ppl:.2f}" in cli.stdout
    cli = run_here("hornn_dist.evaluate", str(run), "--split", "test")
    check_ok(cli)
    assert "(step 32: the newest, the last weights; the best by validation is step_00000028" in (
        cli.stdout
    )
    assert f"loss {last.loss:.4f} ppl {last.ppl:.2f}" in cli.stdout
    assert (
        f"ppl {test.ppl:.2f} on the best checkpoint by validation (step_00000028); "
        f"the last weights (step 32): loss {last.loss:.4f}, ppl {last.ppl:.2f}"
    ) in log
    board = scalars(run)
    assert board["test/ppl"][-1] == (28, pytest.approx(test.ppl))  # at the weights it scored
    assert board["test/ppl_last"][-1] == (32, pytest.approx(last.ppl))
    record = read_run(run)
    assert record is not None and record.finished and record.test_checkpoint == "step_00000028"
    assert (record.test_ppl, record.last_test_ppl) == (test.ppl, last.ppl)


def test_tied_weights_are_saved_once_and_resume_bit_exact(workdir: Path, straight: Path) -> None:
    weights = final_weights(straight)
    assert "decoder.weight" not in weights and "embedding.weight" in weights
    check_ok(train(workdir, "resumed", "--set", f"train.max_steps={K_FIRST}"))
    # its best checkpoint is its last, scored from the weights in memory before it is saved
    state = TrainerState.read(ckpt.list_checkpoints(workdir / "resumed")[-1])
    assert state.test_checkpoint == f"step_{K_FIRST:08d}" and state.test == state.test_last
    folder, at_best = evaluated(workdir / "resumed" / "checkpoints" / "best")
    assert folder.name == state.test_checkpoint
    assert at_best.loss_sum == EvalResult.from_record(state.test).loss_sum
    second = train(workdir, "resumed", "--set", f"train.max_steps={K_STEPS}")
    check_ok(second)
    assert f"step_{K_FIRST:08d}" in second.stderr  # resumed mid-epoch, dropout masks and all
    resumed = final_weights(workdir / "resumed")
    assert resumed.keys() == weights.keys()
    for key in weights:
        assert torch.equal(resumed[key], weights[key]), key
    state = TrainerState.read(ckpt.list_checkpoints(straight)[-1])
    assert all(math.isfinite(v["ppl"]) for v in state.valid_history)


def test_tied_export_round_trip(straight: Path) -> None:
    out = straight.parent / "tied_hub"
    check_ok(run_here("hornn_dist.export", str(straight), str(out)))
    assert set(load_file(str(out / "model.safetensors"))) == set(final_weights(straight))
    model = PretrainedLM.from_pretrained(out)
    assert model.decoder.weight is model.embedding.weight and model.cfg.dropout == 0.3
    folder, cfg = resolve_trained(straight)
    corpus = open_prepared_corpus(cfg.data, build_accelerator("no"), splits=(), prepare=False)
    reference = load_model(folder, cfg, corpus, "cpu")
    assert reference.decoder.weight is reference.embedding.weight
    tokens = torch.tensor(corpus.encode("w1 w2 w3\nw4 w5 w1 w7")).view(-1, 1)  # (T, 1)
    with torch.no_grad():
        assert torch.equal(model(tokens)[0], reference(tokens)[0])
    assert "tied to the output layer, dropout 0.3 in training" in (out / "README.md").read_text()
