"""The shipped large-corpus configs carry their PTB row's recipe (only the size, the
regularisation and the schedule's phase are the corpus's), configs inherit through `base`, and
a run whose model was switched on another model's recipe is told in its first line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hornn_dist.config import load_config
from hornn_dist.sweeps.sweep_file import read_sweep
from hornn_dist.util.errors import ConfigError
from tests.train_helpers import REPO, run_here, write_tiny_config

CONFIGS = REPO / "configs"
PTB_TEXT8_WIKITEXT103 = ("ptb", "text8", "wikitext103")  # the headline at each corpus's size
# what a corpus's config may set apart from its PTB row's: the size, the regularisation, the
# schedule's phase and the run's own bookkeeping; every other [model] and [optim] key is PTB's
CORPUS_KEYS = {
    "model": {"hidden_size", "embedding_size", "num_layers", "init_std", "dropout", "weight_drop"}
    | {"output_layer", "adaptive_cutoffs", "adaptive_div_value"},  # how a vocabulary is scored
    "optim": {"halve_after", "min_lr", "weight_decay"},
}
# and what a vocabulary's scoring needs: an adaptive softmax (WikiText-103's) is never tied
SIZE_KEYS = {
    "wikitext103": {"model": {"tie_weights"}},
    "wikitext103_rnn": {"model": {"tie_weights"}},
    "wikitext103_lstm": {"optim": {"lr"}},  # PTB's lr 20 diverges at 2 x 1024 (its config)
}


@pytest.mark.parametrize(
    "corpus,ptb",
    [
        ("text8", "ptb"),
        ("text8_rnn", "ptb_rnn"),
        ("text8_lstm", "ptb_lstm"),
        ("wikitext103", "ptb"),
        ("wikitext103_rnn", "ptb_rnn"),
        ("wikitext103_lstm", "ptb_lstm"),
    ],
)
def test_a_corpus_config_is_its_ptb_rows_recipe(corpus: str, ptb: str) -> None:
    mine = load_config(CONFIGS / f"{corpus}.toml").to_dict()
    row = load_config(CONFIGS / f"{ptb}.toml").to_dict()
    for section, keys in CORPUS_KEYS.items():
        differ = {k for k in row[section] if mine[section][k] != row[section][k]}
        keys = keys | SIZE_KEYS.get(corpus, {}).get(section, set())
        assert differ <= keys, (
            f"{corpus}.toml's [{section}] {sorted(differ - keys)} are not {ptb}.toml's"
        )


def test_the_headline_config_trains_its_own_recipe_not_the_papers_setting() -> None:
    headline, paper = load_config(CONFIGS / "text8.toml"), load_config(CONFIGS / "text8_paper.toml")
    assert (paper.optim.lr, paper.optim.momentum, paper.optim.max_col_norm) == (0.5, 0.5, 4.0)
    assert (headline.optim.lr, headline.optim.momentum, headline.optim.max_col_norm) == (5, 0, 0)
    assert headline.model.tie_weights and (
        headline.model.hidden_size,
        headline.model.embedding_size,
    ) == (500, 500)


def test_base_fills_what_a_config_leaves_out_and_refuses_a_cycle(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text("[model]\nhidden_size = 64\norder = 2\n[optim]\nlr = 3.0\n")
    (tmp_path / "b.toml").write_text('base = "a.toml"\n[model]\norder = 1\n')
    cfg = load_config(tmp_path / "b.toml", ["optim.lr=2.0"])
    assert (cfg.model.hidden_size, cfg.model.order, cfg.optim.lr) == (64, 1, 2.0)
    (tmp_path / "a.toml").write_text('base = "b.toml"\n')
    with pytest.raises(ConfigError, match="leads back to itself"):
        load_config(tmp_path / "b.toml")
    (tmp_path / "c.toml").write_text("base = 3\n")
    with pytest.raises(ConfigError, match="base must be a config file's path"):
        load_config(tmp_path / "c.toml")


def test_a_switched_model_names_its_own_recipe_in_the_first_line(tmp_path: Path) -> None:
    """`--set model.arch=lstm` on a HORNN recipe: before any other line, a warning naming the
    recipe it runs and the LSTM's own config beside it; without a switch, no such line."""
    hornn = write_tiny_config(tmp_path)
    (tmp_path / "config_lstm.toml").write_text(
        'base = "config.toml"\n[model]\narch = "lstm"\n[optim]\nlr = 2.0\n'
    )
    proc = run_here("hornn_dist.train", str(hornn), "--set", "model.arch=lstm",
                    "--set", "train.max_steps=1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"warning: the overrides make this run's model lstm, but {hornn} ")
    assert first.endswith(f"its own recipe for this corpus: {tmp_path / 'config_lstm.toml'}")
    plain = run_here("hornn_dist.train", str(hornn), "--set", "train.max_steps=2",
                     "--set", f"train.output_dir={tmp_path / 'plain'}")  # fmt: skip
    assert plain.returncode == 0 and "overrides make this run's model" not in plain.stderr
    recipe = run_here("hornn_dist.train", str(hornn), "--set", "model.arch=lstm",
                      "--set", "optim.lr=2.0", "--set", "train.max_steps=1",
                      "--set", f"train.output_dir={tmp_path / 'recipe'}")  # fmt: skip
    assert recipe.returncode == 0 and "overrides make this run's model" not in recipe.stderr


def test_the_transfer_screen_trains_each_headline_and_what_it_screened_before() -> None:
    """transfer.toml: on every corpus, ptb-gated3, text8-gated3 and wikitext103-gated3 train
    today's headline configs, ptb-gated3+feedback0.1 the headline at the feedback scale PTB's
    validation chose; the groups ptb and text8 the recipes the screen chose between (PTB's
    dropout row, the text8 config with dropout it had), with the plain softmax they ran."""
    runs = {run.name: run.config for run in read_sweep(CONFIGS / "sweeps" / "transfer.toml").runs}
    ptb, text8, wikitext103 = (load_config(CONFIGS / f"{c}.toml") for c in PTB_TEXT8_WIKITEXT103)
    dropout_row = load_config(CONFIGS / "ptb" / "gated3_dropout.toml")
    for corpus in ("ewt", "kjv", "ptb"):
        for name, shipped in (("ptb-gated3", ptb), ("text8-gated3", text8)):
            run = runs[f"{corpus}.{name}"]
            assert (run.model, run.optim) == (shipped.model, shipped.optim), name
        headline = runs[f"{corpus}.wikitext103-gated3"]
        assert (headline.model, headline.optim) == (wikitext103.model, wikitext103.optim)
        candidate = runs[f"{corpus}.ptb-gated3+feedback0.1"]  # the scale PTB's valid chose
        assert candidate.model == replace(ptb.model, feedback_scale=0.1)
        assert candidate.optim == ptb.optim
        before = runs[f"{corpus}.ptb"]
        assert (before.model, before.optim) == (dropout_row.model, dropout_row.optim)
        screened = runs[f"{corpus}.text8"].model
        assert screened.dropout > 0 and screened.weight_drop > 0 and screened.feedback_scale == 1
        assert screened.output_layer == "plain" and text8.model.output_layer == "fused"


def test_the_transfer_screen_trains_every_shipped_config_as_shipped() -> None:
    """transfer.toml: every config of configs/ptb*.toml, text8*.toml and wikitext103*.toml has a
    run on every corpus whose model and optimizer are the shipped config's (the fused softmax
    counted as the plain one it computes): the headlines under their -gated3 names, the
    WikiText-103 RNN and LSTM with their adaptive softmax under -adaptive."""
    runs = {run.name: run.config for run in read_sweep(CONFIGS / "sweeps" / "transfer.toml").runs}
    renamed = {
        "ptb": "ptb-gated3",
        "text8": "text8-gated3",
        "wikitext103": "wikitext103-gated3",
        "wikitext103_rnn": "wikitext103_rnn-adaptive",
        "wikitext103_lstm": "wikitext103_lstm-adaptive",
    }
    shipped = sorted(
        p.stem for g in ("ptb*", "text8*", "wikitext103*") for p in CONFIGS.glob(f"{g}.toml")
    )
    assert len(shipped) == 12, shipped
    for name in shipped:
        config = load_config(CONFIGS / f"{name}.toml")
        for corpus in ("ewt", "kjv", "ptb"):
            run = runs[f"{corpus}.{renamed.get(name, name)}"]
            model = run.model
            if model.output_layer == "plain" and config.model.output_layer == "fused":
                model = replace(model, output_layer="fused")
            assert (model, run.optim) == (config.model, config.optim), (corpus, name)


def test_the_seeded_screen_trains_the_headlines_and_rnns_as_shipped_on_each_corpus() -> None:
    """transfer_seeds.toml: each headline (ptb.toml, text8.toml) and the RNN config of its size,
    as shipped but for the seed, on every corpus of the screen with that corpus's data whole,
    seeds 1234-1236 (1234 the screen's own run)."""
    runs = {r.name: r.config for r in read_sweep(CONFIGS / "sweeps" / "transfer_seeds.toml").runs}
    screen = {r.name: r.config for r in read_sweep(CONFIGS / "sweeps" / "transfer.toml").runs}
    assert len(runs) == 3 * 4 * 3
    for corpus in ("ewt", "kjv", "ptb"):
        for config in ("ptb", "ptb_rnn", "text8", "text8_rnn"):
            shipped = load_config(CONFIGS / f"{config}.toml")
            for seed in (1234, 1235, 1236):
                run = runs[f"{corpus}.{config}-seed{seed}"]
                assert (run.model, run.train.seed) == (shipped.model, seed)
                assert run.optim == shipped.optim and run.train.epochs == 3
                assert run.data == screen[f"{corpus}.ptb_rnn"].data  # the screen's corpus
        headline = runs[f"{corpus}.ptb-seed1234"]
        assert (headline.model, headline.optim) == (
            screen[f"{corpus}.ptb-gated3"].model,
            screen[f"{corpus}.ptb-gated3"].optim,
        )


def test_the_ptb_headline_is_gated3s_row_without_dropout_and_the_dropout_row_stands_apart() -> None:
    """configs/ptb.toml is the PTB table's gated-3 row without dropout (the transfer screen's
    choice); the row with dropout, PTB's best on PTB, is a config of its own."""
    headline = load_config(CONFIGS / "ptb.toml")
    row = load_config(CONFIGS / "ptb" / "gated3.toml")
    dropout_row = load_config(CONFIGS / "ptb" / "gated3_dropout.toml")
    assert (headline.model, headline.optim, headline.data) == (row.model, row.optim, row.data)
    assert headline.model.dropout == headline.model.weight_drop == 0
    assert dropout_row.model.dropout > 0 and dropout_row.model.pooling == "gated"
    assert (headline.train.output_dir, row.train.output_dir) == (
        "runs/ptb",
        "runs/ptb_rows/gated3",
    )
