"""The search's PTB sweeps and GPU queues: research/gpu/gpu_ptb.sh queues ptb_chosen, the
stages' candidates (research/sweeps/ptb_recipe_*.toml) and Table 2 and Figure 4 in the GPU
issue's order of priority, each stage's sweep trains what its stage says, configs/ptb.toml and
ptb_chosen.toml follow the records' best runs, and gpu_grids.sh / grid_runs.py list, queue and
pack on a CPU. Every other sweep of the search expands into valid runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hornn_dist.config import load_config
from hornn_dist.sweeps.params import total_parameters
from hornn_dist.sweeps.results import read_run
from hornn_dist.sweeps.sweep_file import PlannedRun, read_sweep
from research.tests.tools import RECORDS, SWEEPS, load_tool
from tests.test_ptb_sweeps import (
    PTB_VOCAB,
    SEEDS,
    check_same_recipe,
    plan_ptb_sweeps,
    write_ptb_like,
)
from tests.train_helpers import REPO

PRODUCT_SWEEPS = REPO / "configs" / "sweeps"
QUEUED = (  # the sweeps gpu_ptb.sh queues
    *("ptb_chosen", "ptb_recipe_dropout_knobs", "ptb_recipe_equal_knobs", "ptb_recipe_fixed_phase"),
    *("ptb_recipe_weight_drop", "ptb_recipe_rnn_l2", "ptb_recipe_gated_l2"),
    *("ptb_recipe_fofe_alpha", "ptb_recipe_rnn_alpha", "ptb_recipe_feedback_scale"),
    *("ptb_orders", "ptb_alpha"),
)


def sweep_file(name: str) -> Path:
    """Return the sweep file `name`: the search's (research/sweeps/), else the product's."""
    path = SWEEPS / f"{name}.toml"
    return path if path.is_file() else PRODUCT_SWEEPS / f"{name}.toml"


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, PlannedRun]]:
    """The runs of each sweep gpu_ptb.sh queues, by name (`plan_ptb_sweeps`)."""
    return plan_ptb_sweeps(tmp_path_factory.mktemp("ptb"), [sweep_file(s) for s in QUEUED])


def test_the_searchs_other_sweeps_expand_into_valid_runs() -> None:
    expected = {
        "synthetic_recipes": 8,
        "recipe_converged": 6,
        "recipe_converged_sum": 1,
        "recipe_sum_screen": 6,
        "recipe_sum_screen2": 3,
    }
    for name, runs in expected.items():
        assert len(read_sweep(SWEEPS / f"{name}.toml").runs) == runs, name


def gpu_ptb_queue() -> list[tuple[str, str]]:
    """Return gpu_ptb.sh's queue as (sweep, regex) items, as gpu_grids.sh splits GRIDS."""
    text = (REPO / "research" / "gpu" / "gpu_ptb.sh").read_text(encoding="utf-8")
    grids = re.search(r"^export GRIDS='([^']*)'", text, re.M)
    assert grids, "gpu_ptb.sh sets GRIDS in single quotes"
    return [(item.partition(":")[0], item.partition(":")[2] or ".") for item in grids[1].split()]


def test_gpu_ptb_queues_every_run_once_in_the_issues_priority(plans: dict) -> None:
    names = {sweep: list(runs) for sweep, runs in plans.items()}
    queued: list[str] = []
    batches = []
    for sweep, pattern in gpu_ptb_queue():  # each run at its first item, as gpu_grids.sh does
        batch = [f"{sweep}/{n}" for n in names[sweep] if re.search(pattern, n)]
        batch = [n for n in batch if n not in queued]
        queued += batch
        batches.append(batch)
    groups = set(CHOSEN_GROUPS.values())
    # seed 1234 of each group is the run its stage chose, held by that stage's record
    assert set(batches[0]) == {f"ptb_chosen/{g}-seed{s}" for g in groups for s in SEEDS[1:]}
    assert batches[1] == [
        f"ptb_recipe_dropout_knobs/{n}" for n in names["ptb_recipe_dropout_knobs"]
    ]
    assert batches[2] == [f"ptb_recipe_equal_knobs/{n}" for n in names["ptb_recipe_equal_knobs"]]
    assert batches[3] == [f"ptb_recipe_fixed_phase/{n}" for n in names["ptb_recipe_fixed_phase"]]
    assert (len(batches[1]), len(batches[2]), len(batches[3])) == (5, 14, 4)
    candidates = [
        f"ptb_recipe_weight_drop/{a}-wdrop0.2-seed{s}"
        for a in ("rnn-tied-drop0.2-fixed10", "lstm-drop0.5")
        for s in SEEDS
    ]
    # weight drop 0.2's gated run is the chosen group's seed 1234 (its record holds it)
    assert sorted(batches[4]) == sorted(
        [*candidates, "ptb_recipe_weight_drop/hornn3-gated-tied-drop0.3-fixed10-wdrop0.4-seed1234"]
    )
    assert batches[5] == ["ptb_recipe_rnn_l2/rnn-tied-wd3e-05-seed1234"]
    assert batches[6] == [f"ptb_recipe_gated_l2/{n}" for n in names["ptb_recipe_gated_l2"]]
    assert len(batches[6]) == 7  # gated-3 at four weight decays, the LSTM at two, FOFE-3 at one
    assert batches[7] == [f"ptb_recipe_fofe_alpha/{n}" for n in names["ptb_recipe_fofe_alpha"]]
    assert len(batches[7]) == 7
    assert batches[8] == [f"ptb_recipe_rnn_alpha/{n}" for n in names["ptb_recipe_rnn_alpha"]]
    assert len(batches[8]) == 8
    scale = names["ptb_recipe_feedback_scale"]
    # each pooling's converged run at 0.2 is a chosen group's seed 1234 (its record holds it)
    assert batches[9] == [
        f"ptb_recipe_feedback_scale/{n}"
        for n in scale
        if not re.match(r"hornn3-(gated|max|sum)-tied-wd1e-05-c0.2-seed", n)
    ]
    assert len(batches[9]) == 11  # nine screens, gated-3 with dropout, `sum` with a fixed phase
    assert batches[10] == [f"ptb_orders/{n}" for n in names["ptb_orders"]]
    assert batches[11] == [f"ptb_alpha/{n}" for n in names["ptb_alpha"]]
    assert len(batches) == 12
    assert len(queued) == len(set(queued)) == 30 + 5 + 14 + 4 + 7 + 1 + 7 + 7 + 8 + 11 + 14 + 8


def test_stage_24_is_each_hornn_rows_chosen_run_under_the_rnns_schedule(plans: dict) -> None:
    """Stage 24 trains HORNN-3 rows without dropout (ptb_chosen.toml's runs under newbob) with
    the RNN row's fixed phase of 7 epochs in place of newbob, nothing else different: every
    row's seed 1234 whose newbob run halved other than after epoch 7 (gated-3's, max-3's), and
    FOFE-3's seeds 1234 (the same run) and 1236 (halved after 5). A row that moved to the fixed
    phase (FOFE-3's) has them as its own group's runs."""
    rnn = plans["ptb_chosen"]["rnn-tied-wd1e-05-alpha0.2-fixed7-seed1234"].config.optim
    runs = plans["ptb_recipe_fixed_phase"]
    fofe = CHOSEN_GROUPS["HORNN-3 FOFE", "no dropout"]
    assert set(runs) == {
        *(
            f"{CHOSEN_GROUPS[f'HORNN-3 {p}', 'no dropout']}-fixed7-seed1234"
            for p in ("gated", "max")
        ),
        f"{fofe}-seed1234",
        f"{fofe}-seed1236",
    }
    for name, run in runs.items():
        assert run.config.optim == rnn, name  # the RNN's optimiser and schedule, whole
        if name in plans["ptb_chosen"]:  # its row moved: the run is its group's
            check_same_recipe(run.config, plans["ptb_chosen"][name].config, name)
            continue
        chosen = plans["ptb_chosen"][name.replace("-fixed7", "")].config
        assert chosen.optim.schedule == "newbob", name
        assert run.config.optim == replace(
            chosen.optim, schedule=rnn.schedule, halve_after=rnn.halve_after, halve_below=0.0
        ), name
        check_same_recipe(replace(run.config, optim=chosen.optim), chosen, name)


def test_ptb_recipe_rnn_alpha_is_the_rnns_chosen_recipe_with_a_scaled_feedback(
    plans: dict,
) -> None:
    """Stage 20 trains the RNN's chosen runs without dropout and with it, its one feedback
    scaled by alpha (order-1 FOFE, eq. 5), FOFE-3 under both, and the scaled RNN at dropout
    0.1 and 0.3: nothing else differs, the RNN's parameters neither."""
    without = plans["ptb_recipe_rnn_l2"]["rnn-tied-wd1e-05-seed1234"].config  # stage 16
    with_dropout = plans["ptb_chosen"]["rnn-drop0.2-tied-fixed10-alpha0.2-seed1234"].config
    runs = dict(plans["ptb_recipe_rnn_alpha"])  # a copy: the fixture is the module's
    orders = {
        (r.config.model.order, r.config.model.alpha, r.config.model.dropout) for r in runs.values()
    }  # FOFE-3 under the RNN's recipe too
    assert orders == {
        (1, 0.2, 0.0),
        (1, 0.5, 0.0),
        (3, 0.2, 0.0),
        (1, 0.2, 0.2),
        (3, 0.2, 0.2),
        (1, 0.2, 0.1),
        (1, 0.2, 0.3),
    }
    fixed = runs.pop("rnn-tied-wd1e-05-alpha0.2-fixed7-seed1234").config  # FOFE-3's schedule
    assert (fixed.optim.schedule, fixed.optim.halve_after) == ("fixed_then_halve", 7)
    assert fixed.model == runs["rnn-tied-wd1e-05-alpha0.2-seed1234"].config.model
    for name, run in runs.items():
        model = run.config.model
        rnn = with_dropout if model.dropout else without
        assert model.pooling == "fofe", name
        if model.order == 1:
            assert total_parameters(model, PTB_VOCAB) == total_parameters(rnn.model, PTB_VOCAB)
        same = replace(
            rnn.model, order=model.order, pooling="fofe", alpha=model.alpha, dropout=model.dropout
        )  # the dropout rate is the orders set's: 0.2 as the RNN's chosen run, 0.1 and 0.3
        check_same_recipe(run.config, replace(rnn, model=same), name)


POOLINGS3 = ("gated", "max", "sum")  # the poolings stage 21 gives a feedback scale


def test_ptb_recipe_feedback_scale_screens_each_pooling_under_fofe3s_stage_20_recipe(
    plans: dict,
) -> None:
    """Stage 21 screens `sum`, `max` and gated-3 for one epoch at feedback scale 1, 0.5 and
    0.2 under the recipe FOFE-3 at alpha 0.2 had in stage 20, then converges each at 0.2 under
    it: nothing else differs; gated-3 with dropout is its PTB row's recipe at 0.2, and
    `sum`-3's second run differs from its first by lr 5 for 10 epochs before halving."""
    fofe = plans["ptb_recipe_rnn_alpha"]["hornn3-fofe-tied-wd1e-05-alpha0.2-seed1234"].config
    runs = plans["ptb_recipe_feedback_scale"]
    screens = {n: r for n, r in runs.items() if n.startswith("screen-")}
    grid = {(r.config.model.pooling, r.config.model.feedback_scale) for r in screens.values()}
    assert grid == {(p, c) for p in POOLINGS3 for c in (0.2, 0.5, 1.0)} and len(screens) == 9
    with_dropout = "hornn3-gated-tied-drop0.3-fixed10-wdrop0.2-c0.2-seed1234"
    fixed = "hornn3-sum-tied-wd1e-05-c0.2-fixed10-seed1234"
    converged = set(runs) - set(screens) - {with_dropout, fixed}
    assert converged == {f"hornn3-{p}-tied-wd1e-05-c0.2-seed1234" for p in POOLINGS3}
    best = load_config(REPO / "configs" / "ptb" / "gated3_dropout.toml")  # the best on PTB
    scaled = replace(best, model=replace(best.model, feedback_scale=0.2))
    check_same_recipe(runs[with_dropout].config, scaled, with_dropout)
    newbob = runs["hornn3-sum-tied-wd1e-05-c0.2-seed1234"].config  # the fixed phase differs
    phase = replace(newbob.optim, schedule="fixed_then_halve", halve_after=10, halve_below=0.0)
    check_same_recipe(runs[fixed].config, replace(newbob, optim=phase), fixed)
    for name, run in ((n, r) for n, r in runs.items() if n not in (with_dropout, fixed)):
        model = run.config.model
        epochs = 1 if name in screens else fofe.train.epochs
        same = replace(  # alpha is FOFE's alone: these poolings ignore it
            fofe.model,
            pooling=model.pooling,
            feedback_scale=model.feedback_scale,
            alpha=model.alpha,
        )
        recipe = replace(fofe, model=same, train=replace(fofe.train, epochs=epochs))
        check_same_recipe(run.config, recipe, name)


def test_ptb_toml_is_the_recipe_of_the_hornn_run_that_validates_best_on_ptb() -> None:
    """configs/ptb/gated3_dropout.toml trains what the HORNN-3 run with the lowest PTB validation
    ppl of every record trained (at H 400): a record with a better run fails this until the
    config follows."""
    import json

    import tomllib

    runs = []
    for state in (RECORDS).rglob("trainer_state.json"):
        config = state.parent / "config.toml"
        if not config.is_file():
            continue
        raw = tomllib.loads(config.read_text())  # as written: older records predate some checks
        data, model, train = raw.get("data", {}), raw.get("model", {}), raw.get("train", {})
        if data.get("preset") != "ptb" or model.get("arch") != "hornn" or model.get("order") != 3:
            continue
        if model.get("hidden_size") != 400 or train.get(
            "max_steps"
        ):  # the table's size, whole runs
            continue
        history = json.loads(state.read_text()).get("valid_history") or []
        if history:
            runs.append((min(v["loss"] for v in history), config))
    assert len(runs) >= 5, runs  # the Table 3 runs and the recipe stages at least
    _, folder = min(runs, key=lambda r: r[0])
    best = load_config(folder)
    check_same_recipe(load_config(REPO / "configs" / "ptb" / "gated3_dropout.toml"), best, folder)


SEEDS_RECORD = RECORDS / "2026-12-01-cpu-ptb-seeds"  # every PTB row over seeds 1234-1236
SHIPPED_ROWS = {  # a shipped PTB config -> the seeds record's rows it chooses among
    "ptb/gated3_dropout.toml": ("HORNN-3 sum", "HORNN-3 max", "HORNN-3 FOFE", "HORNN-3 gated"),
    "ptb_rnn.toml": ("RNN",),
    "ptb_lstm.toml": ("LSTM",),
}


@pytest.mark.parametrize("shipped", sorted(SHIPPED_ROWS))
def test_each_shipped_ptb_config_is_its_models_seeded_row_that_validates_best(
    shipped: str,
) -> None:
    """configs/ptb/gated3_dropout.toml, ptb_rnn.toml and ptb_lstm.toml each train the recipe of their
    model's row, with dropout or without, whose three seeds have the lowest mean validation ppl
    in the seeds record: a row seeded lower fails this until the config follows."""
    import statistics

    tables = load_tool("record_tables").read_record_tables(SEEDS_RECORD)
    seeded = []
    for table in tables:
        for row in table.rows:
            model = next(iter(row.text.values()), "")
            runs = [r for r in row.runs if r is not None and r.state.get("valid_history")]
            if model in SHIPPED_ROWS[shipped] and len(runs) == 3:
                mean = statistics.mean(r.best_valid_ppl() for r in runs)
                seeded.append((mean, f"{table.title}: {model}", runs[0].folder))
    assert seeded, f"no row of {SHIPPED_ROWS[shipped]} has three seeds in {SEEDS_RECORD}"
    _, where, folder = min(seeded)
    recipe = load_config(folder / "config.toml")
    check_same_recipe(load_config(REPO / "configs" / shipped), recipe, where)


CHOSEN_GROUPS = {  # the PTB table's row and column -> ptb_chosen.toml's group (its runs' prefix)
    ("RNN", "no dropout"): "rnn-tied-wd1e-05-alpha0.2-fixed7",
    ("HORNN-3 sum", "no dropout"): "hornn3-sum-tied-wd1e-05-c0.2",
    ("HORNN-3 max", "no dropout"): "hornn3-max-tied-wd1e-05-c0.2",
    ("HORNN-3 FOFE", "no dropout"): "hornn3-fofe-tied-wd1e-05-alpha0.2-fixed7",
    ("HORNN-3 gated", "no dropout"): "hornn3-gated-tied-wd1e-05-c0.2",
    ("LSTM", "no dropout"): "lstm-tied-halve1-wd1e-05-c0.5",
    ("RNN", "with dropout"): "rnn-drop0.2-tied-fixed10-alpha0.2",
    ("HORNN-3 max", "with dropout"): "hornn3-max-tied-drop0.2-fixed10-c0.2",
    ("HORNN-3 sum", "with dropout"): "hornn3-sum-tied-drop0.3-fixed10-c0.2",
    ("HORNN-3 FOFE", "with dropout"): "hornn3-fofe-tied-drop0.2-fixed10-alpha0.2",
    ("HORNN-3 gated", "with dropout"): "hornn3-gated-drop0.3-tied-fixed10-wdrop0.2",
    ("LSTM", "with dropout"): "lstm-drop0.5",
    ("RNN", "equal parameters"): "rnn-matched-drop0.2-tied-fixed10-alpha0.2",
    ("LSTM", "equal parameters"): "lstm-matched-drop0.5-tied",
    ("RNN", "equal parameters, no dropout"): "rnn-matched-tied-wd1e-05-alpha0.2-fixed7",
}


def chosen_table_runs() -> dict[tuple[str, str], Path]:
    """Return the PTB table's chosen run of each (row, column): the lowest validation ppl of
    the row's runs its columns name (no dropout, with dropout), and the equal-parameter rows
    (with dropout, then without)."""
    import tomllib

    read_record_run = load_tool("record_runs").read_record_run
    table = RECORDS / "2026-11-29-cpu-ptb-table"
    tables = tomllib.loads((table / "tables.toml").read_text())["table"]
    chosen = {}
    for column in ("no dropout", "with dropout"):
        (positions,) = {
            tuple(c["runs"]) for c in tables[0]["columns"] if c["head"].startswith(column)
        }
        for row in tables[0]["rows"]:
            runs = [row["runs"][i - 1] for i in positions if row["runs"][i - 1]]
            if runs and "calibration" not in row["model"]:
                best = min(runs, key=lambda r: read_record_run(table / r).best_valid_ppl())
                chosen[row["model"], column] = table / best
    sized_columns = ("equal parameters", "equal parameters, no dropout")
    for sized, column in zip(tables[2:], sized_columns, strict=True):
        for row in sized["rows"]:
            if row["model"] in ("RNN", "LSTM"):
                chosen[row["model"], column] = table / row["runs"][0]
    return chosen


def test_ptb_chosen_trains_each_table_rows_chosen_run_over_three_seeds(plans: dict) -> None:
    """ptb_chosen.toml trains, for every row and column of the PTB table, the recipe of the run
    the table chooses by validation, at seeds 1234-1236: a better run added to the table fails
    this until the sweep follows."""
    chosen = chosen_table_runs()
    assert set(chosen) == set(CHOSEN_GROUPS)  # a new row or column needs its group here
    groups: dict[str, list[PlannedRun]] = {}
    for run in plans["ptb_chosen"].values():  # sized on a corpus of PTB's vocabulary
        groups.setdefault(run.name.rpartition("-seed")[0], []).append(run)
    assert set(groups) == set(CHOSEN_GROUPS.values())
    for key, prefix in CHOSEN_GROUPS.items():
        best = load_config(chosen[key] / "config.toml")
        runs = groups[prefix]
        assert [r.config.train.seed for r in runs] == list(SEEDS), key
        for run in runs:
            check_same_recipe(run.config, best, (key, chosen[key]))


@pytest.mark.integration
def test_gpu_grids_lists_queues_and_packs_into_an_out_folder_it_makes(
    plans: dict, tmp_path: Path
) -> None:
    """gpu_grids.sh on a CPU, in a copy's working folder: it makes $OUT where that folder does
    not exist yet, leaves out the runs the records hold finished at the planned recipe (here
    seed 1234 of the H200 record's chosen runs, split over two records; one of them rewritten
    to another dropout is trained again), queues the rest in the items' order, starts no run
    with less time left than GRIDS_MIN_RUN_SECONDS, names each run it did not start, and packs
    grids.tgz."""
    import tarfile

    work = tmp_path / "work"
    work.mkdir()
    for name in ("configs", "research"):
        (work / name).symlink_to(REPO / name)
    h200 = RECORDS / "2026-11-29-h200-ptb" / "ptb_chosen"
    records = [tmp_path / "record-a", tmp_path / "record-b"]
    for i, run in enumerate(sorted(h200.glob("*-seed1234"))):
        shutil.copytree(run, records[i % 2] / "ptb_chosen" / run.name)
    # a run of the plan's name at another recipe: not the plan's run, so trained again
    older = next(f for f in (records[1] / "ptb_chosen").iterdir() if f.name in plans["ptb_chosen"])
    config = older / "config.toml"
    config.write_text(re.sub(r"(?m)^dropout = .*$", "dropout = 0.45", config.read_text()))
    out = tmp_path / "not" / "yet"
    env = {
        **os.environ,
        "OUT": str(out),
        "GRIDS": "ptb_chosen:-seed123[46]$ ptb_alpha:alpha0.9$ ptb_alpha",
        "GRIDS_SKIP_RECORDED": " ".join(map(str, records)),
        "GRIDS_SET": f"data.path={write_ptb_like(tmp_path / 'ptb')} data.cache_dir={tmp_path}/cache",
        "GRIDS_SECONDS": "2",
        "GRIDS_MIN_RUN_SECONDS": "100",
        "GRIDS_REFERENCE": "0",
        "GRIDS_FINISH_SECONDS": "5",
        "GRIDS_REPORT_SECONDS": "5",
        "PYTHON": sys.executable,
    }
    proc = subprocess.run(
        ["bash", "research/gpu/gpu_grids.sh"], cwd=work, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = (out / "summary.txt").read_text(encoding="utf-8")
    held = {f.name: f for d in records for f in (d / "ptb_chosen").iterdir()}
    held = {n: f for n, f in held.items() if n in plans["ptb_chosen"]}
    done = {n for n, f in held.items() if (r := read_run(f)) and r.finished} - {older.name}
    assert len(done) >= 2 and done == set(held) - {older.name}  # the H200 groups still chosen
    recorded = re.findall(r"^recorded: ptb_chosen/(\S+) in (\S+) ", summary, re.M)
    assert sorted(recorded) == sorted((n, str(held[n].parent.parent)) for n in done)
    chosen = [name for name in plans["ptb_chosen"] if re.search(r"-seed123[46]$", name)]
    alphas = [f"ptb_alpha/fofe3-alpha0.{a}" for a in (9, 2, 3, 4, 5, 6, 7, 8)]
    queue = [f"ptb_chosen/{n}" for n in chosen if n not in done] + alphas  # 0.9 first, once
    assert any(n.endswith("-seed1234") for n in queue)  # a group the record lacks
    assert re.findall(r"^not started: (\S+)$", summary, re.M) == queue
    assert f"queue: {len(queue)} runs" in summary and "\nstart " not in summary
    with tarfile.open(out / "grids.tgz") as pack:
        names = pack.getnames()
    assert any(n.endswith("ptb_alpha/sweep.json") for n in names), names
    assert any(n.endswith("logs/runs.tsv") for n in names), names


def test_grid_runs_names_a_missing_record_folder_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-record"
    proc = subprocess.run(
        [sys.executable, "research/gpu/grid_runs.py", "list", "configs/sweeps/ptb_alpha.toml",
         "--skip-recorded", str(missing)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"error: --skip-recorded {missing}: no such folder; name a record's folder"
    ]


def test_gpu_ptb_without_a_prepared_carry_stops_with_a_one_line_hint(tmp_path: Path) -> None:
    """gpu_ptb.sh runs its header as comments only and refuses a carry with no prepared PTB:
    exit 2 and one line naming the folder, before any run starts."""
    env = {**os.environ, "PTB_CARRY": str(tmp_path / "carry")}
    done = subprocess.run(
        ["bash", "research/gpu/gpu_ptb.sh"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stdout == "", done.stderr
    assert f"no prepared PTB in {tmp_path}/carry/data_cache; HINT:" in done.stderr


SEEDS_RECORD = RECORDS / "2026-12-01-cpu-ptb-seeds"
BEST_SEED_SLACK = 0.02  # the PTB verdict issue's goal: no run more than 2% under its row's mean


def ptb_kind(raw: dict) -> tuple[str, bool, int] | None:
    """Return a record run's PTB table row, whether it trained with dropout and its hidden
    size, from its config.toml as written; None for a run of another corpus, shape or model
    (E != H, stacked layers), or a partial one."""
    data, model, train = raw.get("data", {}), raw.get("model", {}), raw.get("train", {})
    hidden = model.get("hidden_size")
    shape = (model.get("embedding_size"), model.get("num_layers", 1))
    if data.get("preset") != "ptb" or shape != (hidden, 1) or train.get("max_steps"):
        return None
    arch, order = model.get("arch", "hornn"), model.get("order", 3)
    if arch == "lstm":
        row = "LSTM"
    elif arch == "rnn" or (arch == "hornn" and order == 1):
        row = "RNN"
    elif arch == "hornn" and order == 3:
        row = {"fofe": "HORNN-3 FOFE"}.get(model.get("pooling", "gated"), "")
        row = row or f"HORNN-3 {model.get('pooling', 'gated')}"
    else:
        return None
    return row, float(model.get("dropout", 0.0)) > 0, int(hidden)


def test_no_ptb_run_of_any_record_validates_2_percent_under_its_rows_seeded_mean() -> None:
    """Each row of the seeds record's tables is its kind's best recipe: no converged run of
    that model and size (with dropout or without, on PTB at E = H) in any record validates
    more than 2% under the row's mean best validation ppl (a better recipe found since fails
    this until its seeds replace the row); a kind's rows in several tables are the same runs."""
    import json
    import statistics

    import tomllib

    read_record_run = load_tool("record_runs").read_record_run
    tables = tomllib.loads((SEEDS_RECORD / "tables.toml").read_text())["table"]
    means: dict[tuple[str, bool, int], float] = {}
    for table in tables:
        for row in table["rows"]:
            folders = [SEEDS_RECORD / r for r in row["runs"] if r]
            (kind,) = {ptb_kind(tomllib.loads((f / "config.toml").read_text())) for f in folders}
            assert kind is not None and kind[0] in row["model"], (row["model"], kind)
            mean = statistics.fmean(read_record_run(f).best_valid_ppl() for f in folders)
            assert means.setdefault(kind, mean) == mean
    below, compared = [], set()
    for state in RECORDS.rglob("trainer_state.json"):
        config = state.parent / "config.toml"
        kind = ptb_kind(tomllib.loads(config.read_text())) if config.is_file() else None
        history = json.loads(state.read_text()).get("valid_history") or []
        if kind is None or kind not in means or not history:
            continue
        best = min(v["ppl"] for v in history if v.get("ppl") is not None)
        compared.add(kind)
        if best < means[kind] * (1 - BEST_SEED_SLACK):
            below.append((kind, round(best, 2), round(means[kind], 2), state.parent))
    assert compared == set(means)  # every row met at least its own runs
    assert not below, below
