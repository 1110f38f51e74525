"""Product functions on the search's real runs: the records as inputs (an H100 throughput
record read as a speed record, the H200 record's 45 PTB runs drawn as validation curves, a
PTB run's noisy epochs under the lr schedule's patience). The product's own tests run the
same functions on fabricated runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hornn_dist.models import ModelConfig
from hornn_dist.sweeps.results import read_runs
from hornn_dist.sweeps.speed import read_speed_record
from hornn_dist.sweeps.tables import pick_best
from research.tests.tools import RECORDS
from tests.test_optim import check_patience_2_keeps_lr_5
from tests.test_report import check_seed_curve

H100_RECORD = RECORDS / "2026-11-27-h100-16977fd"


def test_the_h100_record_is_a_speed_record() -> None:
    speed = read_speed_record(H100_RECORD)
    assert speed.device == "NVIDIA H100 80GB HBM3"
    results = json.loads((H100_RECORD / "throughput.json").read_text())["results"]
    fofe = [
        r["tokens_per_s"]
        for r in results
        if r["pooling"] == "fofe"
        and r["arch"] == "hornn"
        and r["hidden"] == 400
        and r["vocab"] == 10000
    ]
    found = speed.lookup(ModelConfig(pooling="fofe", order=3, hidden_size=400, embedding_size=400))
    assert found is not None and found.tokens_per_sec == max(fofe)
    assert speed.lookup(ModelConfig(pooling="sum", order=1, hidden_size=400)) is None
    assert speed.lookup(ModelConfig(pooling="fofe", order=3, hidden_size=128)) is None


H200_CHOSEN = RECORDS / "2026-11-29-h200-ptb" / "ptb_chosen"


def test_valid_curves_are_each_models_seeds_mean_and_band_from_their_files(
    tmp_path: Path,
) -> None:
    """valid_curves: one curve per model of a seeds sweep (the H200 record's 15 models of 45
    runs), its mean, least and greatest at each epoch those of the seeds' own
    trainer_state.json files; an unfinished seed (here one whose test score is taken away, as
    a run stopped at a deadline has none) is no seed."""
    from hornn_dist.sweeps.plots import valid_curves

    chosen = tmp_path / "ptb_chosen"
    shutil.copytree(H200_CHOSEN, chosen)
    unfinished = chosen / "lstm-matched-drop0.5-tied-seed1236" / "trainer_state.json"
    state = json.loads(unfinished.read_text())
    unfinished.write_text(json.dumps({**state, "test": None}))
    curves = {c.label: c for c in valid_curves(pick_best(read_runs(chosen)))}
    assert len(curves) == 15
    assert curves["lstm-matched-drop0.5-tied"].seeds == 2
    assert curves["lstm-drop0.5"].seeds == 3
    rnn = curves["rnn-tied"]
    by_seed = []
    for seed in (1234, 1235, 1236):
        state = json.loads(
            (H200_CHOSEN / f"rnn-tied-seed{seed}" / "trainer_state.json").read_text()
        )
        by_seed.append({float(h["epoch"]): h["ppl"] for h in state["valid_history"]})
    check_seed_curve(rnn, by_seed)


def test_valid_curves_plot_of_many_models_keeps_its_legend_beside_the_axes(tmp_path: Path) -> None:
    """13 models' curves: the legend sits beside the axes (matplotlib warns where its layout
    collapses the axes; a warning fails this) in a figure wider than the one-axes default."""
    import warnings

    from PIL import Image

    from hornn_dist.sweeps.plots import plot_valid_curves

    path = tmp_path / "valid_curves.png"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plot_valid_curves(pick_best(read_runs(H200_CHOSEN)), path)
    width, height = Image.open(path).size
    assert width > 1.5 * height


def test_newbob_under_halve_patience_2_keeps_the_rnns_lr_through_its_noisy_epochs() -> None:
    """The tied RNN at dropout 0.2 (record 2026-11-29-cpu-ptb-anneal, lr 5 for 10 epochs):
    under rnnlm's rule its one worse epoch 4 would have begun the halving; patience 2 keeps lr
    5 through its first 10 epochs, as the fixed phase that validated 6.6% lower did."""
    state = RECORDS / "2026-11-29-cpu-ptb-anneal/ptb_recipe_anneal"
    history = json.loads(
        (state / "rnn-tied-drop0.2-fixed10-seed1234/trainer_state.json").read_text()
    )["valid_history"]
    check_patience_2_keeps_lr_5([entry["loss"] for entry in history[:10]])
