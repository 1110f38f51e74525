"""`python -m hornn_dist.report`: the tables and plots of a real sweep of tiny runs (one of them
stopped unfinished by SIGTERM), the recipe picked by validation, the paper's numbers beside
ours, and the one-line errors."""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hornn_dist.config import load_config
from hornn_dist.sweeps.paper import paper_model, paper_ppl
from hornn_dist.sweeps.plots import ValidCurve
from hornn_dist.sweeps.results import RunRecord, read_run, read_runs
from hornn_dist.sweeps.tables import pick_best, render_tables, short_stop, summary_table
from tests.train_helpers import (
    REPO,
    check_ok,
    env,
    markdown_table,
    run_here,
    wait_for_step,
    write_tiny_config,
)

SWEEP = """
base = "config.toml"
output_dir = "{runs}"
layout = "orders"
paper = "ptb"
set = {{ "train.max_steps" = 6, "train.eval_every" = 2, "train.checkpoint_every" = 0 }}

[[runs]]
name = "rnn"
set = {{ "model.order" = 1, "model.pooling" = "sum" }}

[[runs]]
name = "hornn{{model.order}}-fofe"
set = {{ "model.pooling" = "fofe" }}
grid = {{ "model.order" = [2, 3] }}

[[runs]]
name = "fofe3-a{{model.alpha}}"
set = {{ "model.pooling" = "fofe", "model.order" = 3 }}
grid = {{ "model.alpha" = [0.3] }}

[[runs]]
name = "lstm"  # trains until the test stops the sweep with SIGTERM
set = {{ "model.arch" = "lstm", "train.max_steps" = 0, "train.epochs" = 1000, "optim.stop_improvement" = 0 }}
"""
FINISHED = ["rnn", "hornn2-fofe", "hornn3-fofe", "fofe3-a0.3"]
PLOTS = ("orders.png", "alpha.png", "valid_curves.png")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return the output_dir of a real sweep: four finished runs and an LSTM stopped mid-run."""
    folder = tmp_path_factory.mktemp("report")
    write_tiny_config(folder)
    runs = folder / "runs"
    sweep = folder / "sweep.toml"
    sweep.write_text(SWEEP.format(runs=runs))
    with open(folder / "sweep.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hornn_dist.sweep", str(sweep)],
            cwd=REPO,
            env=env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_step(runs / "lstm", 2, proc)
            proc.send_signal(signal.SIGTERM)  # passed on to the LSTM, which checkpoints
            assert proc.wait(timeout=120) == 0, (folder / "sweep.log").read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
    lstm = read_run(runs / "lstm")
    assert lstm is not None and not lstm.finished, (folder / "sweep.log").read_text()
    return runs


def _trainer_state(run: Path) -> dict:
    """Return the trainer_state.json of the run's newest complete checkpoint, read as a file."""
    done = [path.parent for path in (run / "checkpoints").glob("step_*/DONE")]
    newest = max(done, key=lambda folder: int(folder.name.removeprefix("step_")))
    return json.loads((newest / "trainer_state.json").read_text())


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.integration
def test_report_writes_tables_with_the_papers_numbers_and_real_pngs(
    runs: Path, tmp_path: Path
) -> None:
    from PIL import Image

    out = tmp_path / "out"
    proc = run_here("hornn_dist.report", str(runs), "--out", str(out))
    check_ok(proc)
    markdown = (out / "report.md").read_text()
    assert proc.stdout == markdown
    assert f"wrote {out / 'report.md'}" in proc.stderr
    states = {name: _trainer_state(runs / name) for name in [*FINISHED, "lstm"]}

    best = markdown_table(markdown, "## Best run of each model")
    assert [row["run"] for row in best] == FINISHED  # one row per finished run, sweep order
    for row in best:
        state = states[row["run"]]
        best_valid = min(entry["ppl"] for entry in state["valid_history"])
        for column, value in (("test ppl", state["test"]["ppl"]), ("best valid ppl", best_valid)):
            assert math.isfinite(float(row[column])) and row[column] == f"{value:.2f}"
    assert [row["paper (PTB, H 400)"] for row in best] == ["123", "103", "101", "101"]
    assert best[0]["× RNN"] == "1.000"

    by_order = {
        row["model"]: row for row in markdown_table(markdown, "## Test perplexity by order")
    }
    assert by_order["RNN"]["1st order: paper (PTB, H 400)"] == "123"
    assert (
        by_order["FOFE HORNN"]["2nd order: ours"] == f"{states['hornn2-fofe']['test']['ppl']:.2f}"
    )
    assert by_order["FOFE HORNN"]["2nd order: paper (PTB, H 400)"] == "103"

    lstm_step = states["lstm"]["step"]
    assert f"Not finished, left out: lstm (step {lstm_step})" in markdown
    every = {row["run"]: row for row in markdown_table(markdown, "## All runs")}
    assert set(every) == {*FINISHED, "lstm"}
    assert every["lstm"]["finished"] == f"no (step {lstm_step})"

    for name in PLOTS:
        assert f"]({name})" in markdown
        with Image.open(out / name) as image:
            image.verify()
        with Image.open(out / name) as image:
            image.load()
            assert image.format == "PNG" and image.width > 0 and image.height > 0


@pytest.mark.integration
def test_flags_override_the_sweeps_layout_and_paper(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "alpha"
    proc = run_here(
        "hornn_dist.report", str(runs), "--out", str(out), "--layout", "alpha", "--paper", "text8"
    )
    check_ok(proc)
    rows = markdown_table(proc.stdout, "## Test perplexity by forgetting factor α")
    assert [(row["α"], row["run"]) for row in rows] == [
        ("0.3", "fofe3-a0.3"),
        ("0.6", "hornn2-fofe"),
        ("0.6", "hornn3-fofe"),
    ]
    assert "## Test perplexity by order" not in proc.stdout
    assert {p.name for p in out.glob("*.png")} == set(PLOTS)  # what the runs support, any layout

    records = read_runs(runs)
    text8 = markdown_table(render_tables(records, "summary", "text8"), "## Best run")
    assert [row["paper (text8, H 500)"] for row in text8] == ["184", "—", "154", "154"]
    plain = render_tables(records, "summary", "none")
    assert "paper (" not in plain and "× RNN" in plain


def _record(name: str, recipe: str, valid: float, test: float, finished: bool = True) -> RunRecord:
    return RunRecord(
        name=f"{name}--{recipe}",
        folder=Path(name),
        config=load_config(None, ["model.pooling='fofe'", "model.order=3"]),
        model=name,
        recipe=recipe,
        finished=finished,
        best_valid_ppl=valid,
        test_ppl=test,
    )


def test_each_model_keeps_its_recipe_with_the_lowest_valid_ppl_never_the_test() -> None:
    records = [
        _record("hornn3-fofe", "value5", valid=120.0, test=90.0),  # best test, worse valid
        _record("hornn3-fofe", "norm025", valid=110.0, test=130.0),
        _record("hornn3-fofe", "quick", valid=100.0, test=80.0, finished=False),
        _record("hornn3-fofe", "nan", valid=math.nan, test=70.0),
    ]
    picked = pick_best(records)
    assert [(r.model, r.recipe) for r in picked] == [("hornn3-fofe", "norm025")]
    row = markdown_table(summary_table(picked, "ptb"), "|")[0]
    assert (row["recipe"], row["test ppl"], row["paper (PTB, H 400)"]) == (
        "norm025",
        "130.00",
        "101",
    )


def test_paper_models_of_each_arch() -> None:
    cases = {
        ("model.arch='hornn'", "model.order=1", "model.pooling='gated'"): ("RNN", 123, 184),
        ("model.pooling='sum'", "model.order=2"): ("HORNN (2nd order)", 111, None),
        ("model.pooling='max'", "model.order=4"): ("Max HORNN (4th order)", 108, None),
        ("model.pooling='gated'", "model.order=3"): ("Gated HORNN (3rd order)", 100, 144),
        ("model.arch='lstm'",): ("LSTM", 117, 156),
        ("model.arch='rnn'",): ("RNN (nn.RNN)", None, None),
        ("model.arch='gru'",): ("GRU", None, None),
    }
    for overrides, (label, ptb, text8) in cases.items():
        model = paper_model(load_config(None, list(overrides)))
        assert (model.label, paper_ppl(model, "ptb"), paper_ppl(model, "text8")) == (
            label,
            ptb,
            text8,
        ), overrides


def test_stop_reasons_are_shortened_from_the_stop_code_not_the_sentence() -> None:
    def short(code: str, *overrides: str, epochs: float = 0.0, signal: str = "") -> str:
        config = load_config(None, list(overrides))
        record = RunRecord(
            "r", Path("r"), config, stop_code=code, epochs=epochs, stop_signal=signal
        )
        record.stop_reason = "reworded, whatever it says"  # no reader looks at the wording
        return short_stop(record)

    assert short("max_steps", "train.max_steps=4") == "max_steps 4"
    assert short("epochs", "train.epochs=15") == "15 epochs"
    assert short("epochs", "train.epochs=1") == "1 epoch"
    assert short("converged", epochs=7.0) == "converged (epoch 7)"
    assert short("signal", signal="SIGTERM") == "stopped by SIGTERM"
    assert short("signal") == "stopped by a signal"  # a record's stop derived without its name
    assert short("") == "—"


def test_a_runs_stop_code_comes_from_its_stop_event_at_its_step(tmp_path: Path) -> None:
    """The stop code is the metrics.jsonl's stop event's at the state's step: never read from
    the stop reason's wording, and none from a stop the run has since resumed past."""
    from hornn_dist.run.run_state import TrainerState
    from hornn_dist.sweeps.results import stop_of

    state = TrainerState(step=9, stop_reason="reached train.max_steps = 9")
    assert stop_of(tmp_path, state) == ("", "")  # no events: no code from the sentence
    events = tmp_path / "metrics.jsonl"
    events.write_text('{"event": "stop", "step": 4, "code": "signal", "signal": "SIGINT"}\n')
    assert stop_of(tmp_path, state) == ("", "")  # stopped at 4, resumed, still training at 9
    with events.open("a") as f:
        f.write('{"event": "stop", "step": 9, "code": "max_steps", "signal": "", "reason": "x"}\n')
    assert stop_of(tmp_path, state) == ("max_steps", "")
    assert stop_of(tmp_path, TrainerState(step=3)) == ("", "")  # still training


def test_a_missing_runs_folder_is_one_line(tmp_path: Path) -> None:
    line = _one_line_error(run_here("hornn_dist.report", str(tmp_path / "nope")))
    assert f"runs folder {tmp_path / 'nope'} not found" in line
    assert "pass the output_dir of a sweep, e.g. runs/sweeps/demo_orders" in line


@pytest.mark.integration
def test_a_folder_without_a_finished_run_is_one_line(runs: Path, tmp_path: Path) -> None:
    only = tmp_path / "only_unfinished"
    shutil.copytree(runs / "lstm", only / "lstm")
    line = _one_line_error(run_here("hornn_dist.report", str(only)))
    assert f"no finished run under {only} (1 run with checkpoints, none finished)" in line
    assert "python -m hornn_dist.sweep" in line
    assert not (only / "report").exists()


@pytest.mark.integration
def test_missing_matplotlib_is_one_line_before_any_work(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = (
        "import runpy, sys; sys.modules['matplotlib'] = None; "
        f"sys.argv = ['hornn_dist.report', {str(runs)!r}, '--out', {str(out)!r}]; "
        "runpy.run_module('hornn_dist.report', run_name='__main__', alter_sys=True)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env()
    )
    line = _one_line_error(proc)
    assert line == (
        'error: report\'s plots need matplotlib: pip install -e ".[report]" (or pass --no-plots)'
    )
    assert not out.exists()


def test_runs_of_different_corpora_are_said_to_be_so(tmp_path: Path) -> None:
    from tests.fabricated_runs import curve, write_run

    runs = tmp_path / "runs"
    for name, data in (("a", []), ("b", []), ("c", ["data.min_count=2"])):
        config = load_config(
            REPO / "configs" / "demo.toml",
            ["model.hidden_size=8", "model.embedding_size=8", f"train.output_dir={runs / name}"]
            + data,
        )
        write_run(runs / name, config, curve(100.0, 5), 104.0)
    corpus = {r.name: r.corpus for r in read_runs(runs)}
    assert corpus["a"] == corpus["b"] != corpus["c"]
    proc = run_here("hornn_dist.report", str(runs), "--no-plots")
    check_ok(proc)
    groups = sorted([f"{corpus['a']}: a, b", f"{corpus['c']}: c"])
    note = (
        f"These runs trained on 2 different corpora ({'; '.join(groups)}): perplexities of "
        "different corpora do not compare"
    )
    assert note in proc.stdout and note in proc.stderr
    single = run_here("hornn_dist.report", str(runs / "a"), "--no-plots")
    assert "different corpora" not in single.stdout + single.stderr


def _seed_runs(runs: Path, models: int, seeds: tuple[int, ...]) -> None:
    """Write fabricated finished runs `m{i}-seed{s}` (model i at H 8 + i, each seed's
    validation curve of its own length, so that the seeds stop at different epochs)."""
    from tests.fabricated_runs import curve, write_run

    for i in range(models):
        for k, seed in enumerate(seeds):
            name = f"m{i}-seed{seed}"
            config = load_config(
                REPO / "configs" / "demo.toml",
                [
                    f"model.hidden_size={8 + i}",
                    f"model.embedding_size={8 + i}",
                    f"train.seed={seed}",
                    f"train.output_dir={runs / name}",
                ],
            )
            final = 100.0 + 10 * i + k
            write_run(runs / name, config, curve(final, 4 + k, tail=3 + 2 * k), final + 2)


def check_seed_curve(curve: ValidCurve, by_seed: list[dict[float, float]]) -> None:
    """A curve of three seeds is, at every epoch any seed reached, the mean, min and max of the
    seeds' validation ppls there (by_seed: each seed's epoch -> ppl), the seeds' stops apart."""
    assert curve.seeds == 3 and curve.epochs == sorted(set().union(*by_seed))
    for epoch, mean, low, high in zip(curve.epochs, curve.mean, curve.low, curve.high, strict=True):
        ppls = [ppl[epoch] for ppl in by_seed if epoch in ppl]
        assert mean == pytest.approx(sum(ppls) / len(ppls), rel=1e-12)
        assert (low, high) == (min(ppls), max(ppls))
    assert len({len(p) for p in by_seed}) > 1  # the seeds stopped at different epochs


def test_valid_curves_are_each_models_seeds_mean_and_band_from_their_files(
    tmp_path: Path,
) -> None:
    """valid_curves: one curve per model of a seeds sweep, its mean, least and greatest at each
    epoch those of the seeds' own trainer_state.json files; an unfinished seed (here one whose
    test score is taken away, as a run stopped at a deadline has none) is no seed."""
    from hornn_dist.sweeps.plots import valid_curves

    runs = tmp_path / "runs"
    _seed_runs(runs, models=3, seeds=(1234, 1235, 1236))
    (unfinished,) = (runs / "m2-seed1236").rglob("trainer_state.json")
    state = json.loads(unfinished.read_text())
    unfinished.write_text(json.dumps({**state, "test": None}))
    curves = {c.label: c for c in valid_curves(pick_best(read_runs(runs)))}
    assert list(curves) == ["m0", "m1", "m2"]
    assert curves["m2"].seeds == 2 and curves["m1"].seeds == 3
    first = curves["m0"]
    by_seed = []
    for seed in (1234, 1235, 1236):
        (state_file,) = (runs / f"m0-seed{seed}").rglob("trainer_state.json")
        history = json.loads(state_file.read_text())["valid_history"]
        by_seed.append({float(h["epoch"]): h["ppl"] for h in history})
    check_seed_curve(first, by_seed)


def test_valid_curves_plot_of_many_models_keeps_its_legend_beside_the_axes(tmp_path: Path) -> None:
    """13 models' curves (two seeds each): the legend sits beside the axes (matplotlib warns
    where its layout collapses the axes; a warning fails this) in a figure wider than the
    one-axes default."""
    import warnings

    from PIL import Image

    from hornn_dist.sweeps.plots import plot_valid_curves, valid_curves

    runs = tmp_path / "runs"
    _seed_runs(runs, models=13, seeds=(1234, 1235))
    picked = pick_best(read_runs(runs))
    assert len(valid_curves(picked)) == 13
    path = tmp_path / "valid_curves.png"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plot_valid_curves(picked, path)
    width, height = Image.open(path).size
    assert width > 1.5 * height
