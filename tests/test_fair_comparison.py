"""The fair comparison built in: `match_params` sizes a run to another's
total parameter count within 2% for every architecture; an lr grid as recipes, each model's lr
picked by validation only, even where the test split would pick the other; and `report
--layout fair`: seeds grouped, equal-token and converged columns, parameters, the lr each run
ended at, tokens/s from a named speed record, and the noise rule.

The report's runs are written by `tests/fabricated_runs.py` (the trainer's checkpoint files
through the product's own writers, no training; its docstring says which); one integration
test trains a tiny sweep through the CLI.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path

import pytest

from hornn_dist.config import load_config
from hornn_dist.models import ModelConfig, build_model
from hornn_dist.sweeps.fair import Stat, families, noise_verdict
from hornn_dist.sweeps.params import (
    MATCH_TOLERANCE,
    embedding_follows_hidden,
    matched_hidden_size,
    recurrent_parameters,
    total_parameters,
    vocabulary_size,
    with_hidden_size,
)
from hornn_dist.sweeps.results import read_runs
from hornn_dist.sweeps.speed import read_speed_record
from hornn_dist.sweeps.sweep_file import read_sweep
from hornn_dist.util.errors import ConfigError
from hornn_dist.util.files import write_json
from tests.fabricated_runs import curve, write_run
from tests.train_helpers import (
    REPO,
    markdown_table,
    run_here,
    write_sweep,
)

ARCHITECTURES = {
    "rnn (hornn order 1)": {"arch": "hornn", "order": 1, "pooling": "sum"},
    "hornn3-sum": {"arch": "hornn", "order": 3, "pooling": "sum"},
    "hornn3-max": {"arch": "hornn", "order": 3, "pooling": "max"},
    "hornn3-fofe": {"arch": "hornn", "order": 3, "pooling": "fofe"},
    "hornn3-gated": {"arch": "hornn", "order": 3, "pooling": "gated"},
    "lstm": {"arch": "lstm"},
    "nn.RNN": {"arch": "rnn"},
    "gru": {"arch": "gru"},
}


# ---------------------------------------------------------------- parameter matching


@pytest.mark.parametrize("name", list(ARCHITECTURES))
@pytest.mark.parametrize(
    ("vocab", "target_model"),
    [
        (5053, {"arch": "hornn", "order": 3, "pooling": "fofe", "hidden_size": 128}),  # demo
        (10000, {"arch": "hornn", "order": 3, "pooling": "gated", "hidden_size": 400}),  # PTB
        (10000, {"arch": "lstm", "hidden_size": 400}),
    ],
)
@pytest.mark.parametrize("embedding", ["tied", "zero", "fixed"])
def test_every_architecture_is_matched_within_2_percent(
    name: str, vocab: int, target_model: dict, embedding: str
) -> None:
    width = target_model["hidden_size"]
    e = {"tied": width, "zero": 0, "fixed": 64}[embedding]
    target = total_parameters(ModelConfig(**target_model, embedding_size=e), vocab)
    model = ModelConfig(**ARCHITECTURES[name], hidden_size=width, embedding_size=e)
    hidden = matched_hidden_size(model, vocab, target)
    sized = with_hidden_size(model, hidden)
    total = total_parameters(sized, vocab)
    assert abs(total - target) / target <= MATCH_TOLERANCE, (name, hidden, total, target)
    assert sized.hidden_size == hidden
    # E follows H where the config ties them (0 stays 0: "= hidden_size"), else stays
    assert sized.embedding_size == {"tied": hidden, "zero": 0, "fixed": 64}[embedding]
    assert embedding_follows_hidden(model) == (embedding != "fixed")


def test_the_counts_are_the_built_models() -> None:
    """The meta-device counts equal a real model's, and `recurrent` is every parameter but the
    embedding and the output layer."""
    for overrides in ARCHITECTURES.values():
        cfg = ModelConfig(**overrides, hidden_size=24, embedding_size=16)
        real = build_model(cfg, 97)
        assert total_parameters(cfg, 97) == real.num_parameters()
        outer = real.embedding.weight.numel() + sum(p.numel() for p in real.decoder.parameters())
        assert recurrent_parameters(cfg) == real.num_parameters() - outer
    # the recurrent weights' ratios at E = H: HORNN-3 2x the RNN's recurrent weights, gated 5x, LSTM 4x
    rnn = recurrent_parameters(ModelConfig(order=1, pooling="sum", hidden_size=400))
    for overrides, ratio in (
        ({"pooling": "fofe"}, 2),
        ({"pooling": "gated"}, 5),
        ({"arch": "lstm"}, 4),
    ):
        count = recurrent_parameters(ModelConfig(**overrides, hidden_size=400))
        assert count / rnn == pytest.approx(ratio, rel=0.01)


def test_the_recurrent_count_of_an_adaptive_model_with_its_own_cutoffs() -> None:
    """Explicit `model.adaptive_cutoffs` (valid for the corpus, not for the count's one-word
    vocabulary) still give the recurrent count: what the built model has besides the
    embedding and the adaptive layer."""
    cfg = ModelConfig(
        arch="lstm",
        hidden_size=24,
        embedding_size=16,
        output_layer="adaptive",
        adaptive_cutoffs=[20, 60],
    )
    real = build_model(cfg, 97)
    outer = real.embedding.weight.numel() + sum(p.numel() for p in real.decoder.parameters())
    assert recurrent_parameters(cfg) == real.num_parameters() - outer


def test_a_target_no_size_reaches_is_one_line() -> None:
    cfg = ModelConfig(arch="lstm", hidden_size=8, embedding_size=8)
    with pytest.raises(ConfigError, match=r"no model.hidden_size gives this lstm model 10 "):
        matched_hidden_size(cfg, 1000, 10)


def test_a_multiple_matches_the_nearest_total_among_multiples_only() -> None:
    """match_multiple: the size is the multiple of N whose total is nearest the target (every
    multiple up to twice the width checked), and with N 1 it is the plain nearest size."""
    cfg = ModelConfig(arch="lstm", hidden_size=400, embedding_size=400, tie_weights=True)
    gated = ModelConfig(pooling="gated", hidden_size=400, embedding_size=400, tie_weights=True)
    target = total_parameters(gated, 10_000)

    def off(hidden: int) -> int:
        sized = dataclasses.replace(cfg, hidden_size=hidden, embedding_size=hidden)
        return abs(total_parameters(sized, 10_000) - target)

    plain = matched_hidden_size(cfg, 10_000, target)
    assert plain == min(range(1, 800), key=off) and plain % 16 != 0
    for multiple in (2, 8, 16):
        hidden = matched_hidden_size(cfg, 10_000, target, multiple)
        assert hidden % multiple == 0
        assert hidden == min(range(multiple, 800, multiple), key=off)
    with pytest.raises(ConfigError, match=r"no model.hidden_size among multiples of 64 gives"):
        matched_hidden_size(cfg, 10_000, target, 64)


MATCHED = """
[[runs]]
name = "fofe3-s{train.seed}"
set = { "model.pooling" = "fofe" }
grid = { "train.seed" = [1, 2] }

[[runs]]
name = "rnn-m-s{train.seed}"
set = { "model.order" = 1, "model.pooling" = "sum" }
grid = { "train.seed" = [1, 2] }
match_params = "fofe3-s{train.seed}"

[[runs]]
name = "{model.arch}-m"
grid = { "model.arch" = ["lstm", "gru"] }
match_params = "fofe3-s1"

[recipes]
lr05 = { "optim.lr" = 0.5 }
lr1 = { "optim.lr" = 1.0 }
"""


def test_match_params_sizes_each_run_to_its_target_under_the_same_recipe(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, MATCHED, hidden_size=24, embedding_size=24)
    cli = ("model.hidden_size=32", "model.embedding_size=32")  # --set reaches the target first
    plan = read_sweep(path, cli)
    runs = {run.name: run for run in plan.runs}
    assert len(runs) == 12
    vocab = vocabulary_size(plan.runs[0].config.data, prepare=False)  # prepared by read_sweep
    assert vocab and vocab > 10
    matched = [run for run in plan.runs if run.matched_to]
    assert {run.model for run in matched} == {"rnn-m-s1", "rnn-m-s2", "lstm-m", "gru-m"}
    for run in matched:
        target = runs[run.matched_to]
        assert target.recipe == run.recipe and target.config.model.hidden_size == 32
        assert target.model == ("fofe3-s2" if run.model == "rnn-m-s2" else "fofe3-s1")
        goal = total_parameters(target.config.model, vocab)
        total = total_parameters(run.config.model, vocab)
        assert abs(total - goal) / goal <= MATCH_TOLERANCE, run.name
        model = run.config.model
        assert model.embedding_size == model.hidden_size != 32  # E = H in the config: E follows
        assert run.overrides[-2:] == (
            f"model.hidden_size={model.hidden_size}",
            f"model.embedding_size={model.hidden_size}",
        )
        assert run.config.optim.lr == {"lr05": 0.5, "lr1": 1.0}[run.recipe]  # the lr grid
    assert (
        runs["rnn-m-s1--lr05"].config.model.hidden_size
        > 32
        > runs["lstm-m--lr1"].config.model.hidden_size
    )
    record = plan.record()["runs"]
    assert {r["name"]: r.get("matched_to", "") for r in record}["gru-m--lr1"] == "fofe3-s1--lr1"


def test_an_embedding_the_config_sets_apart_stays(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, MATCHED, hidden_size=64, embedding_size=48)
    for run in read_sweep(path).runs:
        assert run.config.model.embedding_size == 48
        if run.matched_to:
            assert run.overrides[-1].startswith("model.hidden_size=")


@pytest.mark.parametrize(
    ("group", "message"),
    [
        (
            'match_params = "fofe9"',
            "[[runs]] #2 match_params = 'fofe9' names no run of the sweep; its runs (without "
            "the recipe): fofe3, rnn-m",
        ),
        (
            'match_params = "rnn-m"',
            "[[runs]] #2 match_params = 'rnn-m' names a run that match_params sizes itself; "
            "name one sized by its config: fofe3",
        ),
        ('match_params = ""', "[[runs]] #2 match_params must name a run of the sweep"),
        ("match_params = 3", "[[runs]] #2 match_params must name a run of the sweep"),
        (
            'match_params = "fofe3-{train.seed}"',
            "[[runs]] #2 match_params uses {train.seed}, which its grid does not set",
        ),
        ("match_multiple = 16", "[[runs]] #2 match_multiple needs match_params beside it"),
        (
            'match_params = "fofe3"\nmatch_multiple = 0',
            "[[runs]] #2 match_multiple must be a whole number in [1, 1024] (e.g. 16), got 0",
        ),
        (
            'match_params = "fofe3"\nmatch_multiple = 8.0',
            "[[runs]] #2 match_multiple must be a whole number in [1, 1024] (e.g. 16), got 8.0",
        ),
    ],
)
def test_a_bad_match_params_is_one_line_naming_the_key_and_the_runs(
    tmp_path: Path, group: str, message: str
) -> None:
    text = (
        '[[runs]]\nname = "fofe3"\n'
        f'[[runs]]\nname = "rnn-m"\nset = {{ "model.order" = 1 }}\n{group}\n'
        '[recipes]\nlr05 = { "optim.lr" = 0.5 }\n'
    )
    with pytest.raises(ConfigError) as err:
        read_sweep(write_sweep(tmp_path, text))
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "data" / "cache").exists()  # refused before preparing anything


# ---------------------------------------------------------------- the noise rule


def test_the_noise_rule_calls_a_winner_only_past_twice_the_larger_sd() -> None:
    a, b = Stat.of([50.0, 51.0, 52.0]), Stat.of([55.0, 56.0, 57.0])  # sd 1 each, gap 5
    assert noise_verdict(a, b).kind == "better" and noise_verdict(b, a).kind == "worse"
    assert noise_verdict(a, b).text() == "better (gap 5.00 > 2 × sd 1.00, Welch p 0.0036)"
    close = Stat.of([51.5, 52.5, 53.5])  # gap 1.5 < 2
    assert noise_verdict(a, close).kind == "within noise"
    assert noise_verdict(a, close).text() == "within noise (gap 1.50 ≤ 2 × sd 1.00, Welch p 0.14)"
    # past 2 sds, but at two seeds each Welch's p is 0.057: no finding
    two_a, two_b = Stat.of([50.0, 51.0]), Stat.of([52.0, 53.0])
    assert noise_verdict(two_a, two_b).gap > noise_verdict(two_a, two_b).bar
    assert (
        noise_verdict(two_a, two_b).kind == "within noise" and noise_verdict(two_a, two_b).p > 0.05
    )
    edge = Stat.of([52.0, 53.0, 54.0])  # gap exactly 2 × sd: not past it
    assert noise_verdict(a, edge).kind == "within noise"
    tight, wide = Stat.of([50.0, 50.1, 50.2]), Stat.of([51.0, 53.0, 55.0])  # the larger sd: 2
    assert noise_verdict(tight, wide).kind == "within noise"  # gap 2.9 < 4, though > 2 × 0.1
    one = Stat.of([40.0])
    assert noise_verdict(one, b).kind == "no verdict"
    assert noise_verdict(one, b).text() == "no verdict: one seed, no sd"
    assert one.text() == "40.00 (one seed)" and one.sd is None
    assert Stat.of([50.0, math.nan, 52.0]).values == (50.0, 52.0)  # a diverged run left out
    assert Stat.of([50.0, 52.0]).text() == f"51.00 ± {statistics.stdev([50.0, 52.0]):.2f}"


# ---------------------------------------------------------------- the report's fair layout

FAIR = """
layout = "fair"
paper = "{paper}"
set = {{ "train.epochs" = {epochs}, "model.hidden_size" = {hidden}, "model.embedding_size" = 8{data} }}

[[runs]]
name = "rnn-seed{{train.seed}}"
set = {{ "model.order" = 1, "model.pooling" = "sum" }}
grid = {{ "train.seed" = {seeds} }}

[[runs]]
name = "fofe-seed{{train.seed}}"
grid = {{ "train.seed" = {seeds} }}

[[runs]]
name = "lstm-seed{{train.seed}}"
set = {{ "model.arch" = "lstm" }}
grid = {{ "train.seed" = {seeds} }}

[recipes]
lr05 = {{ "optim.lr" = 0.5 }}
lr1 = {{ "optim.lr" = 1.0 }}
"""

# per model and recipe: (final valid ppl, test ppl) of each seed; fofe's lr1 tests better
# than its lr05 but validates worse: validation's choice, lr05, must win
RESULTS = {
    ("rnn", "lr05"): [(120.0, 125.0), (122.0, 127.0), (121.0, 126.0)],
    ("rnn", "lr1"): [(130.0, 131.0), (131.0, 132.0), (129.0, 130.0)],
    ("fofe", "lr05"): [(100.0, 110.0), (101.0, 111.0), (102.0, 112.0)],
    ("fofe", "lr1"): [(104.0, 90.0), (105.0, 91.0), (106.0, 92.0)],
    ("lstm", "lr05"): [(118.0, 119.0), (121.0, 124.0), (119.0, 120.0)],
    ("lstm", "lr1"): [(125.0, 126.0), (126.0, 127.0), (127.0, 128.0)],
}
RISE_AT = {1234: 4, 1235: 6, 1236: 9}  # the seeds' runs converge after different epochs
SEEDS = [1234, 1235, 1236]


def fabricate_fair(
    folder: Path,
    seeds: list[int] = SEEDS,
    epochs: int = 60,
    paper: str = "none",
    preset: str = "",
    hidden: int = 8,
) -> tuple[Path, dict[str, dict]]:
    """Write the FAIR sweep's runs (a sweep.json from the plan, as `sweep` writes it, and one
    finished checkpoint per run, each trained `epochs` epochs at most: 60 lets the stopping
    rule end every run), with the paper's numbers of `paper` and the runs at `data.preset`
    `preset` (the base's where empty) and hidden size `hidden`; return the runs folder and each
    run's trainer state."""
    sweep = folder / "fair.toml"
    runs = folder / "runs"
    sweep.write_text(
        f'base = "{REPO / "configs" / "demo.toml"}"\noutput_dir = "{runs}"\n'
        + FAIR.format(
            seeds=json.dumps(seeds),
            epochs=epochs,
            paper=paper,
            hidden=hidden,
            data=f', "data.preset" = "{preset}"' if preset else "",
        )
    )
    plan = read_sweep(sweep)
    runs.mkdir()
    write_json(runs / "sweep.json", plan.record())
    states = {}
    for run in plan.runs:
        model, seed = run.model.rsplit("-seed", 1)
        final, test = RESULTS[(model, run.recipe)][SEEDS.index(int(seed))]
        valid = curve(final, RISE_AT[int(seed)])[:epochs]
        states[run.name] = write_run(runs / run.name, run.config, valid, test)
    return runs, states


def _best_by(state: dict, epoch: int) -> float:
    return min(e["ppl"] for e in state["valid_history"] if e["epoch"] <= epoch)


def _mean_sd(values: list[float]) -> str:
    return f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}"


def test_the_lr_grid_is_picked_by_validation_where_the_test_split_picks_the_other(
    tmp_path: Path,
) -> None:
    runs, states = fabricate_fair(tmp_path)
    fams = families(read_runs(runs))
    assert [f.label for f in fams] == ["rnn", "fofe", "lstm"]
    assert all(len(f.groups) == 2 and all(len(g.runs) == 3 for g in f.groups) for f in fams)
    fofe = fams[1]
    by_recipe = {g.recipe: g for g in fofe.groups}
    assert by_recipe["lr1"].test.mean < by_recipe["lr05"].test.mean  # the test would pick lr1
    assert by_recipe["lr05"].valid.mean < by_recipe["lr1"].valid.mean
    assert fofe.picked.recipe == "lr05"

    proc = run_here("hornn_dist.report", str(runs), "--no-plots")
    assert proc.returncode == 0, proc.stderr
    rows = {r["model"]: r for r in markdown_table(proc.stdout, "## Each model over its seeds")}
    assert rows["fofe"]["recipe (lr)"] == "lr05 (lr 0.5)"
    assert (
        rows["rnn"]["recipe (lr)"] == "lr05 (lr 0.5)"
        and rows["lstm"]["recipe (lr)"] == "lr05 (lr 0.5)"
    )
    fofe_tests = [t for _, t in RESULTS[("fofe", "lr05")]]
    assert rows["fofe"]["test ppl (converged)"] == _mean_sd(fofe_tests)
    picked = {r["model"]: r for r in markdown_table(proc.stdout, "## Lr picked by validation")}
    assert picked["fofe"]["picked"] == "lr05"
    assert "lr05 (lr 0.5): " in picked["fofe"]["valid ppl by recipe"]
    assert picked["fofe"]["valid ppl by recipe"].split("; ")[0].endswith("✓")
    assert "each model keeps its recipe with the lowest mean best validation" in proc.stdout.lower()


def test_the_fair_table_shows_equal_tokens_convergence_lr_params_and_verdicts(
    tmp_path: Path,
) -> None:
    runs, states = fabricate_fair(tmp_path)
    proc = run_here("hornn_dist.report", str(runs), "--no-plots")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    picked = {name: s for name, s in states.items() if name.endswith("--lr05")}
    epoch = min(s["epoch"] for s in picked.values())  # every run of every model reached it
    assert epoch == 9  # seed 1234's runs converge first (RISE_AT), after 9 epochs
    rows = {r["model"]: r for r in markdown_table(text, "## Each model over its seeds")}
    column = f"valid ppl by epoch {epoch} (equal tokens)"
    for model in ("rnn", "fofe", "lstm"):
        mine = [s for name, s in picked.items() if name.startswith(f"{model}-seed")]
        row = rows[model]
        assert row[column] == _mean_sd([_best_by(s, epoch) for s in mine])
        assert row["seeds"] == "3"
        assert row["params"] == f"{mine[0]['parameters']:,}"
        run = read_sweep(tmp_path / "fair.toml").runs
        model_cfg = next(r.config.model for r in run if r.model.startswith(f"{model}-seed"))
        assert row["recurrent"] == f"{recurrent_parameters(model_cfg):,}"
        ends = [f"{s['schedule']['epoch_lr']:g} ({s['schedule']['halvings']})" for s in mine]
        assert row["lr at the end (halvings)"] == ", ".join(ends)
        assert row["epochs"] == ", ".join(f"{s['epoch']:g}" for s in mine)
        assert row["tokens/s"] == "no speed record given"
    assert "no speed record given (`--speed-record PATH`)" in text
    assert rows["rnn"]["× RNN"] == "1.000"
    # the epochs table: a cell for each epoch every run of the model reached, none past it
    by_epoch = markdown_table(text, "## Best validation perplexity by epoch")
    assert [int(r["epoch"]) for r in by_epoch] == list(range(1, epoch + 1))
    # verdicts: fofe's test (110-112) against the RNN's (125-127): past 2 sd; the LSTM's
    # (119, 124, 120; sd 2.6) against the RNN's: within noise
    verdicts = {r["model"]: r for r in markdown_table(text, "## Verdicts")}
    assert verdicts["fofe"]["vs rnn: test (converged)"].startswith("better (gap 15.00 > 2 × sd")
    assert verdicts["lstm"]["vs rnn: test (converged)"].startswith("within noise (gap")
    assert verdicts["rnn"]["vs rnn: test (converged)"] == "(itself)"
    assert verdicts["rnn"]["vs lstm: test (converged)"].startswith("within noise")
    # the existing tables still read these runs: every run, with its parameter counts
    every = {r["run"]: r for r in markdown_table(text, "## All runs")}
    assert len(every) == 18 and every["fofe-seed1234--lr05"]["kept"] == "✓"
    assert every["fofe-seed1234--lr1"]["kept"] == ""
    assert every["lstm-seed1235--lr1"]["recurrent"] == rows["lstm"]["recurrent"]
    summary = run_here("hornn_dist.report", str(runs), "--no-plots", "--layout", "summary")
    assert summary.returncode == 0 and "## Best run of each model" in summary.stdout


def test_the_one_screen_table_is_each_models_picked_lr_over_its_seeds(tmp_path: Path) -> None:
    """ "## In one table" (README "Results" quotes it): per model the parameters, the lr that
    validation picked, test ppl ± sd over its seeds and the ratios of the means."""
    runs, states = fabricate_fair(tmp_path)
    proc = run_here("hornn_dist.report", str(runs), "--no-plots")
    assert proc.returncode == 0, proc.stderr
    rows = {r["model"]: r for r in markdown_table(proc.stdout, "## In one table")}
    assert list(rows) == ["rnn", "fofe", "lstm"]
    tests = {m: [t for _, t in RESULTS[(m, "lr05")]] for m in rows}  # lr05: validation's pick
    for model, row in rows.items():
        assert row["lr"] == "0.5" and row["test ppl"] == _mean_sd(tests[model])
        assert row["params"] == f"{states[f'{model}-seed1234--lr05']['parameters']:,}"
        for ref, head in (("rnn", "× RNN"), ("lstm", "× LSTM")):
            ratio = statistics.fmean(tests[model]) / statistics.fmean(tests[ref])
            assert row[head] == f"{ratio:.3f}"
        assert row["tokens/s"] == "no speed record given"


def test_the_one_screen_table_puts_the_papers_number_beside_runs_in_its_setting(
    tmp_path: Path,
) -> None:
    """Runs on the paper's corpus at its hidden size get the paper's column (its RNN and LSTM
    marked as borrowed from other papers); the same runs on another corpus, or at another
    hidden size, get none."""
    setting = tmp_path / "ptb"
    setting.mkdir()
    runs, _ = fabricate_fair(setting, seeds=[1234], paper="ptb", preset="ptb", hidden=400)
    proc = run_here("hornn_dist.report", str(runs), "--no-plots")
    assert proc.returncode == 0, proc.stderr
    rows = {r["model"]: r for r in markdown_table(proc.stdout, "## In one table")}
    column = "paper (PTB, H 400)"
    assert rows["fofe-seed1234"][column] == "101"  # Table 3: FOFE HORNN (3rd order)
    assert rows["rnn-seed1234"][column] == "123 (borrowed)"
    assert rows["lstm-seed1234"][column] == "117 (borrowed)"
    assert '"(borrowed)" marks a number' in proc.stdout
    for name, preset, hidden in (("demo", "demo", 400), ("small", "ptb", 8)):
        other = tmp_path / name
        other.mkdir()
        runs, _ = fabricate_fair(other, seeds=[1234], paper="ptb", preset=preset, hidden=hidden)
        proc = run_here("hornn_dist.report", str(runs), "--no-plots")
        assert proc.returncode == 0, proc.stderr
        rows = markdown_table(proc.stdout, "## In one table")
        assert rows and all(column not in row for row in rows) and "borrowed" not in proc.stdout


def test_runs_ended_by_their_epoch_budget_are_not_called_converged(tmp_path: Path) -> None:
    """Runs that train.epochs ended before the stopping rule (a fixed-epoch comparison) get a
    test column that says how many did not converge, never "converged"."""
    runs, states = fabricate_fair(tmp_path, epochs=2)
    assert all(s["stop_reason"] == "trained" and s["epoch"] == 2 for s in states.values())
    proc = run_here("hornn_dist.report", str(runs), "--no-plots")
    assert proc.returncode == 0, proc.stderr
    ended = "not converged: 9 of 9 runs"  # the picked recipe's 3 models x 3 seeds
    rows = markdown_table(proc.stdout, "## Each model over its seeds")
    assert {r["model"] for r in rows} == {"rnn", "fofe", "lstm"}
    assert all(f"test ppl ({ended})" in r for r in rows) and "converged)" not in proc.stdout
    verdicts = markdown_table(proc.stdout, "## Verdicts")
    assert f"vs rnn: test ({ended})" in verdicts[0]


def test_one_seed_gets_no_verdict(tmp_path: Path) -> None:
    runs, _ = fabricate_fair(tmp_path, seeds=[1234])
    proc = run_here("hornn_dist.report", str(runs), "--no-plots")
    assert proc.returncode == 0, proc.stderr
    rows = {r["model"]: r for r in markdown_table(proc.stdout, "## Each model over its seeds")}
    assert rows["fofe-seed1234"]["test ppl (converged)"] == "110.00 (one seed)"
    verdicts = markdown_table(proc.stdout, "## Verdicts")
    cells = [v for row in verdicts for k, v in row.items() if k != "model" and v != "(itself)"]
    assert cells and all(cell == "no verdict: one seed, no sd" for cell in cells)


def test_tokens_per_second_come_from_the_named_speed_record(tmp_path: Path) -> None:
    runs, _ = fabricate_fair(tmp_path)
    record = tmp_path / "throughput.json"
    row = {"arch": "hornn", "pooling": "fofe", "hidden": 8, "embedding": 0, "engine": "fused"}
    write_json(
        record,
        {
            "meta": {"device_name": "Test GPU", "args": {"order": 3}},
            "results": [
                {
                    **row,
                    "variant": "hornn-fofe",
                    "precision": "bf16",
                    "mode": "graphed",
                    "tokens_per_s": 5000.0,
                },
                {
                    **row,
                    "variant": "hornn-fofe",
                    "precision": "bf16",
                    "mode": "eager",
                    "tokens_per_s": 3000.0,
                },
                {
                    **row,
                    "variant": "hornn-fofe",
                    "precision": "bf16",
                    "mode": "graphed-ar",
                    "tokens_per_s": 9000.0,
                },
                {
                    **row,
                    "variant": "lstm",
                    "arch": "lstm",
                    "hidden": 8,
                    "precision": "fp16",
                    "mode": "graphed",
                    "tokens_per_s": 7000.0,
                },
                {
                    **row,
                    "variant": "lstm-big",
                    "arch": "lstm",
                    "hidden": 400,
                    "precision": "fp16",
                    "mode": "graphed",
                    "tokens_per_s": 1.0,
                },
            ],
        },
    )
    proc = run_here("hornn_dist.report", str(runs), "--no-plots", "--speed-record", str(record))
    assert proc.returncode == 0, proc.stderr
    rows = {r["model"]: r for r in markdown_table(proc.stdout, "## Each model over its seeds")}
    assert rows["fofe"]["tokens/s"] == "5,000 (bf16 graphed fused)"  # one process: not -ar
    assert rows["lstm"]["tokens/s"] == "7,000 (fp16 graphed fused)"
    assert rows["rnn"]["tokens/s"] == "not in the record"  # never another model's number
    assert (
        f"`{record}` (benchmarks/throughput.py, one process's training step; Test GPU)"
        in proc.stdout
    )
    bad = run_here("hornn_dist.report", str(runs), "--speed-record", str(tmp_path / "nope"))
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error: --speed-record")


def test_a_speed_record_folder_reads_every_throughput_json(tmp_path: Path) -> None:
    """A record folder with one throughput*.json per size (the matched models' beside the
    others'): every file's rows serve the lookup, each at its own size only, and at the order
    the benchmark's --order built it."""
    record = tmp_path / "speed"
    record.mkdir()
    for name, hidden, tps in (
        ("throughput.json", 128, 2000.0),
        ("throughput-h131.json", 131, 1900.0),
    ):
        write_json(
            record / name,
            {
                # the variant's template says order 3; --order 1 built the row (args)
                "meta": {"device": "cpu", "args": {"order": 1}, "variants": {"rnn": {"order": 3}}},
                "results": [
                    {"arch": "hornn", "pooling": "sum", "hidden": hidden, "embedding": 0,
                     "variant": "rnn", "precision": "fp32", "mode": "eager",
                     "engine": "fused", "tokens_per_s": tps},
                ],
            },
        )  # fmt: skip
    speed = read_speed_record(record)
    for hidden, tps in ((128, 2000.0), (131, 1900.0)):
        found = speed.lookup(ModelConfig(pooling="sum", order=1, hidden_size=hidden))
        assert found is not None and found.tokens_per_sec == tps
    assert speed.lookup(ModelConfig(pooling="sum", order=1, hidden_size=130)) is None
    assert speed.device == "cpu"


def test_a_speed_record_compares_one_cpu_thread_count(tmp_path: Path) -> None:
    """Files timed at 1 and at 2 CPU threads: only the count that times the most models serves,
    so FOFE's two-thread row never stands beside the RNN's one-thread row."""
    record = tmp_path / "speed"
    record.mkdir()
    for name, threads, rows in (
        ("throughput.json", 1, [("fofe", 3, 2000.0), ("sum", 1, 2100.0)]),
        ("throughput-2threads.json", 2, [("fofe", 3, 3800.0)]),
    ):
        write_json(
            record / name,
            {
                "meta": {"device": "cpu", "device_name": "Test CPU", "threads": threads,
                         "variants": {f"v{order}": {"order": order} for _, order, _ in rows}},
                "results": [
                    {"arch": "hornn", "pooling": pooling, "hidden": 8, "embedding": 0,
                     "variant": f"v{order}", "precision": "fp32", "mode": "eager",
                     "engine": "fused", "tokens_per_s": tps}
                    for pooling, order, tps in rows
                ],
            },
        )  # fmt: skip
    speed = read_speed_record(record)
    fofe = speed.lookup(ModelConfig(pooling="fofe", order=3, hidden_size=8))
    assert fofe is not None and fofe.tokens_per_sec == 2000.0  # not the two-thread 3,800
    assert speed.lookup(ModelConfig(pooling="sum", order=1, hidden_size=8)).tokens_per_sec == 2100
    assert speed.threads == 1 and speed.describe().endswith("Test CPU, 1 thread(s))")


def test_a_speed_record_of_runs_matches_each_model(tmp_path: Path) -> None:
    base = load_config(
        REPO / "configs" / "demo.toml", ["model.hidden_size=8", "model.embedding_size=8"]
    )
    for name, model, tps in (("fofe", {}, 1234.0), ("lstm", {"arch": "lstm"}, 999.0)):
        config = dataclasses.replace(
            base, model=dataclasses.replace(base.model, **model, engine="loop")
        )
        write_run(tmp_path / "speed" / name, config, curve(100, 4), 101.0, tokens_per_sec=tps)
    speed = read_speed_record(tmp_path / "speed")
    assert speed.kind == "runs" and speed.device == "cpu (fabricated)"
    assert speed.lookup(base.model).tokens_per_sec == 1234.0  # the engine is not the model
    assert speed.lookup(dataclasses.replace(base.model, arch="lstm")).tokens_per_sec == 999.0
    assert speed.lookup(dataclasses.replace(base.model, hidden_size=9)) is None


def test_the_shipped_fair_sweep_plans_every_model_lr_and_seed() -> None:
    """configs/sweeps/demo_fair.toml: the RNN, HORNN-3 with each pooling and the LSTM at H 128,
    the RNN and LSTM matched to HORNN-3 FOFE, two lrs (the shipped 0.5 and 1.0), three seeds,
    the shipped stopping rule; sized with the bundled corpus's vocabulary (prepared here if not
    yet)."""
    plan = read_sweep(REPO / "configs" / "sweeps" / "demo_fair.toml")
    assert len(plan.runs) == 48 and plan.layout == "fair"
    shipped = load_config(REPO / "configs" / "demo.toml")
    assert {run.config.optim.lr for run in plan.runs} == {shipped.optim.lr, 1.0}
    assert {run.config.train.seed for run in plan.runs} == {1234, 1235, 1236}
    for run in plan.runs:
        optim = run.config.optim
        assert (optim.halve_before_stop, optim.stop_improvement, optim.clip_mode) == (
            shipped.optim.halve_before_stop,
            shipped.optim.stop_improvement,
            shipped.optim.clip_mode,
        )
        assert run.config.train.epochs == 60
    vocab = vocabulary_size(plan.runs[0].config.data, prepare=False)
    fofe = {r.name: r for r in plan.runs if r.model.startswith("hornn3-fofe")}
    matched = [r for r in plan.runs if r.matched_to]
    assert len(matched) == 12 and {r.config.model.arch for r in matched} == {"hornn", "lstm"}
    for run in matched:
        goal = total_parameters(fofe[run.matched_to].config.model, vocab)
        total = total_parameters(run.config.model, vocab)
        assert abs(total - goal) / goal <= MATCH_TOLERANCE
    pooled = {
        r.config.model.pooling
        for r in plan.runs
        if r.config.model.order == 3 and r.config.model.arch == "hornn"
    }
    assert pooled == {"fofe", "gated", "max", "sum"}


# ---------------------------------------------------------------- end to end


@pytest.mark.integration
def test_a_matched_sweep_trains_and_reports_fair(tmp_path: Path) -> None:
    """A tiny sweep with match_params, two seeds and a recipe trained through the CLI: the log
    shows each run's parameter counts, and `report` writes the fair layout (the lr grid's
    choice: test_the_lr_grid_is_picked_by_validation_where_the_test_split_picks_the_other)."""
    text = (
        'layout = "fair"\nset = { "train.max_steps" = 4, "log.tensorboard" = false }\n'
        '[[runs]]\nname = "fofe-s{train.seed}"\nset = { "model.pooling" = "fofe" }\n'
        'grid = { "train.seed" = [1, 2] }\n'
        '[[runs]]\nname = "rnn-m-s{train.seed}"\nset = { "model.order" = 1 }\n'
        'grid = { "train.seed" = [1, 2] }\nmatch_params = "fofe-s{train.seed}"\n'
        '[recipes]\na = { "optim.lr" = 0.3 }\n'
    )
    path = write_sweep(tmp_path, text)
    proc = run_here("hornn_dist.sweep", str(path), "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    assert (
        "rnn-m-s1--a: training" in proc.stderr
        and "(match_params: sized to fofe-s1--a)" in proc.stderr
    )
    assert " recurrent (log: " in proc.stderr and " recurrent; sweep: " in proc.stderr
    report = run_here("hornn_dist.report", str(tmp_path / "runs"), "--no-plots")
    assert report.returncode == 0, report.stderr
    rows = {r["model"]: r for r in markdown_table(report.stdout, "## Each model over its seeds")}
    assert set(rows) == {"fofe", "rnn-m"} and rows["rnn-m"]["seeds"] == "2"
    params = {
        r["run"]: int(r["params"].replace(",", ""))
        for r in markdown_table(report.stdout, "## All runs")
    }
    assert abs(params["rnn-m-s1--a"] / params["fofe-s1--a"] - 1) <= MATCH_TOLERANCE
