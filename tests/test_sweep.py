"""`hornn_dist.sweep`: sweep files read and checked in full, runs trained, skipped and resumed."""

from __future__ import annotations

import json
import math
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from PIL import Image

from hornn_dist.config import read_toml, to_toml, toml_value
from hornn_dist.sweeps.results import read_runs
from hornn_dist.sweeps.runner import cpu_slots, gpu_slots, train_command
from hornn_dist.sweeps.sweep_file import read_sweep, select_runs
from hornn_dist.util.errors import ConfigError
from tests.train_helpers import (
    REPO,
    env,
    markdown_table,
    run_here,
    wait_for_step,
    write_sweep,
)

DEMO_ORDERS = REPO / "configs" / "sweeps" / "demo_orders.toml"


# ---------------------------------------------------------------- the sweep file


def test_every_shipped_sweep_expands_into_valid_runs() -> None:
    expected = {
        "demo_orders": 14,
        "demo_alpha": 8,
        "demo_summary": 12,
        "demo_dropout": 4,
        "ptb_orders": 14,
        "ptb_alpha": 8,
        "text8_summary": 6,
        "transfer": 69,
        "transfer_seeds": 36,
    }
    for name, runs in expected.items():
        plan = read_sweep(REPO / "configs" / "sweeps" / f"{name}.toml")
        assert len(plan.runs) == runs, name
    orders = read_sweep(DEMO_ORDERS)
    by_name = {run.name: run.config for run in orders.runs}
    assert (
        by_name["hornn4-gated"].model.order == 4
        and by_name["hornn4-gated"].model.pooling == "gated"
    )
    assert by_name["rnn"].model.order == 1 and by_name["lstm"].model.arch == "lstm"
    assert by_name["hornn2-fofe"].train.output_dir == "runs/sweeps/demo_orders/hornn2-fofe"


def test_recipes_multiply_the_runs_and_the_command_line_comes_last(tmp_path: Path) -> None:
    path = write_sweep(
        tmp_path,
        'set = { "optim.lr" = 0.2, "optim.clip_mode" = "norm" }\n'
        '[[runs]]\nname = "h{model.order}"\ngrid = { "model.order" = [1, 2] }\n'
        '[recipes]\na = { "optim.clip" = 1.0 }\nb = { "optim.clip" = 2.0, "optim.lr" = 0.3 }\n',
    )
    plan = read_sweep(path, ("optim.clip=9.0",))
    assert [r.name for r in plan.runs] == ["h1--a", "h1--b", "h2--a", "h2--b"]
    assert [r.model for r in plan.runs] == ["h1", "h1", "h2", "h2"]
    assert [r.config.optim.lr for r in plan.runs] == [0.2, 0.3, 0.2, 0.3]  # recipe after `set`
    assert {r.config.optim.clip for r in plan.runs} == {9.0}  # --set after everything


def test_corpora_multiply_the_runs_and_a_group_may_start_from_its_own_base(
    tmp_path: Path,
) -> None:
    path = write_sweep(tmp_path, "")
    tiny = read_toml(tmp_path / "tiny.toml", "config", "")
    lstm = {**tiny, "model": {**tiny["model"], "arch": "lstm"}}
    (tmp_path / "lstm.toml").write_text(to_toml(lstm))
    # a corpus sets every [data] key its runs' bases set: the tiny config's files and settings
    files = ", ".join(f'"data.{k}" = {toml_value(v)}' for k, v in tiny["data"].items())
    path.write_text(
        path.read_text()
        + '[[runs]]\nname = "tiny"\n[[runs]]\nname = "lstm"\nbase = "lstm.toml"\n[corpora]\n'
        + f'one = {{ {files}, "data.min_count" = 2 }}\n'
        + f'two = {{ {files}, "data.lowercase" = true }}\n'
    )
    plan = read_sweep(path)
    assert [r.name for r in plan.runs] == ["one.tiny", "one.lstm", "two.tiny", "two.lstm"]
    assert [r.corpus for r in plan.runs] == ["one", "one", "two", "two"]
    by_name = {r.name: r for r in plan.runs}
    assert by_name["two.lstm"].config.model.arch == "lstm"
    assert by_name["two.tiny"].config.model.arch == "hornn"
    assert by_name["one.tiny"].config.data.min_count == 2
    assert by_name["two.tiny"].config.data.min_count == 1  # the default: corpus one's stays
    assert by_name["two.lstm"].config.data.lowercase is True
    assert train_command(plan, by_name["one.lstm"])[3] == str(tmp_path / "lstm.toml")
    assert train_command(plan, by_name["one.tiny"])[3] == str(tmp_path / "tiny.toml")
    assert plan.record()["runs"][1] | {"overrides": ()} == {
        "name": "one.lstm",
        "model": "one.lstm",
        "recipe": "",
        "overrides": (),
        "base": str(tmp_path / "lstm.toml"),
        "corpus": "one",
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[corpora]\nc = { "data.min_count" = 2 }\n[[runs]]\nname = "a"\n',
            "corpora.c leaves data.add_eos of tiny.toml in place; set it in [corpora]",
        ),
        (
            '[corpora]\nc = { "optim.lr" = 2 }\n[[runs]]\nname = "a"\n',
            "corpora.c sets optim.lr; a corpus sets data.* keys only",
        ),
        (
            '[[runs]]\nname = "a"\nbase = "nothing.toml"\n',
            "[[runs]] #1 base = 'nothing.toml' names no file",
        ),
    ],
)
def test_a_bad_corpus_or_group_base_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        read_sweep(write_sweep(tmp_path, text))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_group_without_a_base_in_a_sweep_without_one_is_one_line(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, '[[runs]]\nname = "a"\n')
    path.write_text(path.read_text().replace('base = "tiny.toml"\n', ""))
    with pytest.raises(ConfigError, match=r"\[\[runs\]\] #1 has no base: set base = "):
        read_sweep(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('runz = []\n[[runs]]\nname = "a"\n', "unknown sweep key 'runz'; did you mean runs?"),
        ("", "the sweep has no runs; add at least one [[runs]] table"),
        (
            '[[runs]]\nname = "h{model.order}"\ngrid = { "model.order" = [] }\n',
            "grid 'model.order' is empty; give it at least one value",
        ),
        (
            '[[runs]]\nname = "a"\nsets = {}\n',
            "[[runs]] #1: unknown key 'sets'; did you mean set?",
        ),
        (
            '[[runs]]\nname = "h{model.order}"\ngrid = { "model.order" = [2, 0] }\n',
            "run h0: model.order must be",
        ),
        (
            '[[runs]]\nname = "a"\nset = { "model.orders" = 2 }\n',
            "run a: unknown key model.orders; did you mean model.order?",
        ),
        ('[[runs]]\nname = "a"\n[[runs]]\nname = "a"\n', "two runs are named 'a'"),
        ('[[runs]]\nname = "."\n', "run name '.' must name a folder of its own, not . or .."),
        (
            '[[runs]]\nname = "{model.pooling}"\ngrid = { "model.pooling" = [".."] }\n',
            "run name '..' must name a folder of its own",
        ),
        (
            '[[runs]]\nname = "a"\nset = { "model.order" = { n = 2 } }\n',
            "set value of 'model.order' must be a number, string, boolean or list of strings",
        ),
        (
            '[[runs]]\nname = "{model.order}"\n',
            "name uses {model.order}, which its grid does not set",
        ),
        (
            'layout = "table9"\n[[runs]]\nname = "a"\n',
            "layout must be one of orders, alpha, summary",
        ),
    ],
)
def test_a_bad_sweep_file_is_one_line_naming_the_problem(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        read_sweep(write_sweep(tmp_path, text))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_failing_override_is_reported_before_anything_trains(tmp_path: Path) -> None:
    path = write_sweep(
        tmp_path,
        '[[runs]]\nname = "ok"\n[[runs]]\nname = "bad"\nset = { "optim.momentum" = 1.5 }\n',
    )
    proc = run_here("hornn_dist.sweep", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"error: {path}: run bad: optim.momentum must be in [0.0, 1.0), got 1.5"], (
        proc.stderr
    )
    assert not (tmp_path / "runs").exists()  # not even the valid run started


# ---------------------------------------------------------------- running


def test_slots_share_the_cores_or_take_one_gpu_each() -> None:
    assert cpu_slots(1, 16) == [{}]  # one run: torch's own thread count
    assert cpu_slots(2, 2) == [{"OMP_NUM_THREADS": "1"}] * 2
    assert cpu_slots(3, 16) == [{"OMP_NUM_THREADS": "5"}] * 3
    assert cpu_slots(4, 2) == [{"OMP_NUM_THREADS": "1"}] * 4
    assert gpu_slots(1) == [{}]
    assert gpu_slots(3) == [{"CUDA_VISIBLE_DEVICES": str(i)} for i in range(3)]


def test_only_selects_runs_by_shell_pattern_and_a_pattern_matching_none_is_one_line(
    tmp_path: Path,
) -> None:
    sweep = write_sweep(tmp_path, ORDERS_CUT)
    plan = read_sweep(sweep)
    assert select_runs(plan, ["hornn4-*"]) == {"hornn4-max", "hornn4-gated"}
    assert select_runs(plan, ["rnn", "*2-max"]) == {"rnn", "hornn2-max"}
    assert select_runs(plan, []) == {"rnn", "hornn2-max", "hornn4-max", "hornn4-gated"}
    with pytest.raises(ConfigError, match=r"--only 'RNN' matches no run of .*its runs: rnn, "):
        select_runs(plan, ["rnn", "RNN"])  # case counts; every pattern must match
    proc = run_here("hornn_dist.sweep", str(sweep), "--only", "lstm*", "--dry-run")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().startswith("error: --only 'lstm*' matches no run of ")
    assert len(proc.stderr.strip().splitlines()) == 1

    dry = run_here("hornn_dist.sweep", str(sweep), "--only", "hornn4-*", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert [line.split(":")[0] for line in dry.stdout.splitlines()[:-1]] == [
        "hornn4-max",
        "hornn4-gated",
    ]
    assert "2 to train (0 finished, 2 not selected by --only)" in dry.stdout.splitlines()[-1]


def test_jobs_below_one_is_one_line(tmp_path: Path) -> None:
    proc = run_here(
        "hornn_dist.sweep", str(write_sweep(tmp_path, '[[runs]]\nname = "a"\n')), "--jobs", "0"
    )
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --jobs must be 1 or more, got 0"


def test_jobs_beyond_the_cpu_cores_is_one_line_even_in_a_dry_run(tmp_path: Path) -> None:
    import os

    sweep = str(write_sweep(tmp_path, '[[runs]]\nname = "a"\n'))
    proc = run_here("hornn_dist.sweep", sweep, "--jobs", "100000", "--dry-run")
    cores = os.cpu_count()
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: --jobs 100000 is more than the {cores} CPU cores; at most {cores} (a run "
        "needs a core of its own)"
    )


def test_a_sweep_of_a_million_runs_is_refused_at_once(tmp_path: Path) -> None:
    """A grid of 1000 x 1000 runs is one line naming the count and the cap, in seconds, where
    `--dry-run` built every run's config for minutes, holding a GB, and printed nothing."""
    values = ", ".join(str(i) for i in range(1, 1001))
    grid = f'grid = {{ "train.seed" = [{values}], "train.max_steps" = [{values}] }}\n'
    sweep = write_sweep(tmp_path, '[[runs]]\nname = "r{train.seed}-{train.max_steps}"\n' + grid)
    proc = subprocess.run(
        [sys.executable, "-m", "hornn_dist.sweep", str(sweep), "--dry-run"],
        capture_output=True, text=True, cwd=REPO, env=env(), timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: {sweep}: the sweep holds 1,000,000 runs")
    assert "more than the 10,000 a sweep may hold" in line


def test_check_jobs_fits_the_machine() -> None:
    from hornn_dist.sweep import check_jobs
    from hornn_dist.util.errors import ConfigError

    check_jobs(4, gpus=4, cores=2)  # one per GPU, whatever the cores
    check_jobs(2, gpus=0, cores=2)
    for jobs, gpus, cores in ((5, 4, 64), (3, 0, 2), (0, 0, 2)):
        with pytest.raises(ConfigError):
            check_jobs(jobs, gpus=gpus, cores=cores)


@pytest.mark.integration
def test_a_failed_run_is_reported_and_the_sweep_goes_on(tmp_path: Path) -> None:
    # "b" asks for a corpus split that does not exist: training fails before its first step
    path = write_sweep(
        tmp_path,
        'set = { "train.max_steps" = 2, "log.tensorboard" = false }\n'
        f'[[runs]]\nname = "b"\nset = {{ "data.valid" = "{tmp_path / "missing.txt"}" }}\n'
        '[[runs]]\nname = "a"\n',
    )
    proc = run_here("hornn_dist.sweep", str(path), "--jobs", "2")  # two at a time
    assert proc.returncode == 1, proc.stderr
    assert "2 runs in" in proc.stderr and "2 at a time (sharing the CPU cores)" in proc.stderr
    assert "[1/2] b: FAILED (exit 2)" in proc.stderr and "missing.txt" in proc.stderr
    assert "[2/2] a: done in" in proc.stderr
    assert "sweep done: 1 trained, 0 already finished, 1 failed" in proc.stderr
    records = {r.name: r for r in read_runs(tmp_path / "runs")}
    assert set(records) == {"a"} and records["a"].finished
    log = (tmp_path / "runs" / "a" / "train.log").read_text().splitlines()
    separators = [line for line in log if line.startswith("=====")]
    assert len(separators) == 1 and "fresh run" in separators[0]  # the trainer's own
    saves = [line for line in log if "saved checkpoint" in line]
    assert len(saves) == len(set(saves)) == 1  # one writer: no line twice

    # what is left: b's 3 epochs, timed by a's seconds per epoch
    dry = run_here("hornn_dist.sweep", str(path), "--dry-run")
    summary = dry.stdout.strip().splitlines()[-1]
    assert summary.startswith("dry run: 2 runs in "), dry.stdout
    assert "1 to train (1 finished): up to 3 epochs in all" in summary
    assert "; about " in summary and "at 1 at a time" in summary

    # more steps for every run: the finished run trains on from its checkpoint
    more = run_here("hornn_dist.sweep", str(path), "--set", "train.max_steps=3")
    assert "[2/2] a: resuming" in more.stderr
    assert "already finished (test ppl" not in more.stderr
    assert {r.name: r.step for r in read_runs(tmp_path / "runs")} == {"a": 3}


@pytest.mark.integration
def test_each_run_end_says_the_sweeps_time_left(tmp_path: Path) -> None:
    """A run's end line says what is left of the sweep: its runs and epochs, and their time at
    the seconds per epoch of the runs so far; the last says every run is trained."""
    path = write_sweep(
        tmp_path,
        'set = { "train.epochs" = 1, "log.tensorboard" = false }\n'
        '[[runs]]\nname = "a"\n[[runs]]\nname = "b"\nset = { "model.order" = 1 }\n',
    )
    proc = run_here("hornn_dist.sweep", str(path))
    assert proc.returncode == 0, proc.stderr
    ends = [line for line in proc.stderr.splitlines() if ": done in " in line]
    assert [line.split(" INFO ")[1].split(":")[0] for line in ends] == ["[1/2] a", "[2/2] b"]
    left = r"; sweep: 1 run to train, up to 1 epoch, at most about (\S+) left at 1 at a time"
    took = re.search(left + r" \((\S+) per epoch so far\)$", ends[0])
    assert took is not None, ends[0]
    assert took[1] == took[2]  # one epoch left, timed by a's one epoch
    assert ends[1].endswith("; sweep: every run trained")


@pytest.mark.integration
def test_only_trains_the_selected_runs_and_the_next_sweep_the_rest(tmp_path: Path) -> None:
    path = write_sweep(
        tmp_path,
        'set = { "train.max_steps" = 2, "log.tensorboard" = false }\n'
        '[[runs]]\nname = "a"\n[[runs]]\nname = "b"\nset = { "model.order" = 1 }\n',
    )
    out = tmp_path / "runs"
    first = run_here("hornn_dist.sweep", str(path), "--only", "b")
    assert first.returncode == 0, first.stderr
    assert "[1/2] a: not selected by --only, left as it is" in first.stderr
    assert "[2/2] b: done in" in first.stderr
    assert "sweep done: 1 trained, 0 already finished, 0 failed, 1 not selected by --only" in (
        first.stderr
    )
    assert not (out / "a").exists()  # nothing written for a run left out
    assert [r["name"] for r in json.loads((out / "sweep.json").read_text())["runs"]] == ["a", "b"]
    assert {r.name: r.finished for r in read_runs(out)} == {"b": True}

    rest = run_here("hornn_dist.sweep", str(path))
    assert rest.returncode == 0, rest.stderr
    assert "[1/2] a: training" in rest.stderr and "[2/2] b: already finished" in rest.stderr
    assert {r.name: r.finished for r in read_runs(out)} == {"a": True, "b": True}


@pytest.mark.integration
def test_a_run_whose_train_process_is_stopped_is_reported_as_stopped(tmp_path: Path) -> None:
    path = write_sweep(
        tmp_path,
        # epochs and the convergence stop out of reach: the signal must land mid-training
        'set = { "train.epochs" = 1000, "optim.stop_improvement" = 0, "log.every" = 1,'
        ' "log.tensorboard" = false }\n'
        '[[runs]]\nname = "a"\n',
    )
    sweep = subprocess.Popen(
        [sys.executable, "-m", "hornn_dist.sweep", str(path)],
        env=env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_step(tmp_path / "runs" / "a", 2, sweep)
    (train,) = psutil.Process(sweep.pid).children()
    train.send_signal(signal.SIGTERM)  # the train process alone, not the sweep
    _, stderr = sweep.communicate(timeout=120)
    assert sweep.returncode == 1, stderr
    assert "[1/1] a: stopped after" in stderr and "the next sweep resumes it" in stderr
    assert "FAILED" not in stderr  # the line a train process's own stop used to get
    assert "sweep done: 0 trained, 0 already finished, 1 failed" in stderr


# demo_orders cut to four runs (its layout and paper) on the tiny corpus, three steps each: what
# an interrupted 14-run grid of the bundled corpus proves, at a fraction of the work
ORDERS_CUT = """layout = "orders"
paper = "ptb"
set = { "train.checkpoint_every" = 0, "train.max_steps" = 3 }

[[runs]]
name = "rnn"
set = { "model.order" = 1, "model.pooling" = "sum" }

[[runs]]
name = "hornn{model.order}-max"
set = { "model.pooling" = "max" }
grid = { "model.order" = [2, 4] }

[[runs]]
name = "hornn4-gated"
set = { "model.order" = 4, "model.pooling" = "gated" }
"""


@pytest.mark.integration
def test_an_orders_sweep_interrupted_and_started_again_runs_only_the_missing_runs(
    tmp_path: Path,
) -> None:
    sweep, out = write_sweep(tmp_path, ORDERS_CUT), tmp_path / "runs"
    planned = [run.name for run in read_sweep(sweep).runs]
    assert planned == ["rnn", "hornn2-max", "hornn4-max", "hornn4-gated"]
    command = [sys.executable, "-m", "hornn_dist.sweep", str(sweep)]
    first = subprocess.Popen(command, cwd=tmp_path, env=env(), stderr=subprocess.PIPE, text=True)
    lines = []
    for line in first.stderr:
        lines.append(line)
        if "[2/4] hornn2-max: done in" in line:
            first.send_signal(signal.SIGINT)
            break
    log = "".join(lines) + first.stderr.read()
    first.wait(timeout=300)
    assert first.returncode == 0, log
    assert "SIGINT received" in log and "sweep stopped" in log
    assert "[4/4]" not in log
    done_before = {r.name for r in read_runs(out) if r.finished}
    assert {"rnn", "hornn2-max"} <= done_before and len(done_before) < 4
    stamps = {name: _checkpoint_stamps(out / name) for name in done_before}

    again = run_here("hornn_dist.sweep", str(sweep))
    assert again.returncode == 0, again.stderr
    for name in done_before:
        assert f"{name}: already finished (test ppl" in again.stderr  # the line guarded above
        assert _checkpoint_stamps(out / name) == stamps[name]  # not trained again
    trained = [line for line in again.stderr.splitlines() if ": done in" in line]
    assert len(trained) == 4 - len(done_before)
    assert f"sweep done: {len(trained)} trained, {len(done_before)} already finished, 0 failed" in (
        again.stderr
    )
    records = read_runs(out)
    assert [r.name for r in records] == planned
    assert all(r.finished and math.isfinite(r.test_ppl) for r in records)
    assert json.loads((out / "sweep.json").read_text())["layout"] == "orders"

    report = run_here("hornn_dist.report", str(out))
    assert report.returncode == 0, report.stderr
    markdown = (out / "report" / "report.md").read_text()
    every = markdown_table(markdown, "## All runs")
    assert [row["run"] for row in every] == planned  # one row per run
    for row in every:
        assert math.isfinite(float(row["test ppl"])) and math.isfinite(float(row["best valid ppl"]))
    by_order = {
        row["model"]: row for row in markdown_table(markdown, "## Test perplexity by order")
    }
    assert set(by_order) == {"RNN", "Max HORNN", "Gated HORNN"}
    assert by_order["Gated HORNN"]["4th order: paper (PTB, H 400)"] == "100"
    for name in ("orders.png", "valid_curves.png"):
        with Image.open(out / "report" / name) as image:
            image.load()  # decodes every pixel: a broken file raises
            assert image.format == "PNG" and image.width > 100 and image.height > 100


def _checkpoint_stamps(folder: Path) -> dict[str, int]:
    return {
        str(p.relative_to(folder)): p.stat().st_mtime_ns
        for p in (folder / "checkpoints").rglob("*")
        if p.is_file()
    }


LIST_VALUES_SWEEP = """
base = "{base}"
output_dir = "runs/sweeps/lists"

[set]
"data.preset" = ""
"data.source" = "files"
"data.name" = "synthetic"
"data.train" = ["data/synthetic/train.txt"]
"data.valid" = ["data/synthetic/valid.txt"]
"data.test" = ["data/synthetic/test.txt"]

[[runs]]
name = "rnn"
set = {{ "model.order" = 1, "model.pooling" = "sum" }}

[[runs]]
name = "hornn3-{{model.pooling}}"
grid = {{ "model.pooling" = ["sum", "max", "fofe", "gated"] }}
"""


def test_dry_run_prints_each_command_as_a_shell_takes_it(tmp_path: Path) -> None:
    # list values ("data.train" = [...]) carry quotes a plain join loses in a shell
    sweep = tmp_path / "lists.toml"
    sweep.write_text(LIST_VALUES_SWEEP.format(base=REPO / "configs" / "demo.toml"))
    dry = subprocess.run(
        [sys.executable, "-m", "hornn_dist.sweep", str(sweep), "--dry-run"],
        cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    plan = read_sweep(sweep)
    printed = dict(line.split(": ", 1) for line in dry.stdout.splitlines()[:-1])
    assert list(printed) == [run.name for run in plan.runs]
    for run in plan.runs:
        argv = shlex.split(printed[run.name])
        assert argv == train_command(plan, run)
        assert 'data.train=["data/synthetic/train.txt"]' in argv
