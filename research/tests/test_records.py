"""The search's records (research/records/): each record that declares its tables (tables.toml)
has them printed by `python research/tools/record_tables.py RECORD` from its own run folders,
its README names that command, and every table README.md, docs/, research/'s pages or a
record's README quotes from it is what the command prints; every JSON record names its commit.
The record readers (research/tools/record_tables.py, record_runs.py) over records and over a
real sweep's runs kept as a record keeps them."""

from __future__ import annotations

import functools
import json
import re
import shutil
import statistics
from pathlib import Path

import pytest

from hornn_dist.sweeps.results import read_run
from hornn_dist.sweeps.welch import holm, welch_p
from hornn_dist.training.events import read_events
from hornn_dist.training.optim import resolve_clip
from research.tests.tools import RECORDS, load_tool, run_record_tables, run_tool
from tests.train_helpers import (
    REPO,
    check_ok,
    markdown_table,
    run_here,
    run_module,
    write_sweep,
)

TABLED = sorted(spec.parent for spec in RECORDS.glob("*/tables.toml"))
H200 = RECORDS / "2026-11-27-h200-grids"
SEEDS = RECORDS / "2026-12-01-cpu-ptb-seeds"  # the PTB verdict's seeds: README's Results
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PAGES += sorted((REPO / "research").glob("*.md"))
PAGES += [record / "README.md" for record in TABLED]


def markdown_tables(text: str) -> list[tuple[str, ...]]:
    """Return every Markdown table of `text` as its lines (header, rule, rows)."""
    tables, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append(line)
        elif block:
            tables.append(tuple(block))
            block = []
    return tables


def cells(line: str) -> tuple[str, ...]:
    """Return a table line's cells, stripped (so that spacing does not hide a quote)."""
    return tuple(cell.strip() for cell in line.strip().strip("|").split("|"))


def record_command(record: Path) -> str:
    return f"python research/tools/record_tables.py {record.relative_to(REPO)}"


@functools.cache
def printed(record: Path) -> str:
    """Return what the record's README command prints, run in this process."""
    result = run_record_tables(record)
    check_ok(result)
    return result.stdout


def test_no_record_keeps_a_table_script() -> None:
    assert not list(RECORDS.glob("**/table.py"))
    assert {"2026-11-27-h200-grids", "2026-11-27-cpu-converged"} <= {r.name for r in TABLED}


@pytest.mark.parametrize("record", TABLED, ids=lambda r: r.name)
def test_the_readme_names_report_and_the_docs_show_every_table(record: Path) -> None:
    """The record's README names the command; every table it prints, each under its title,
    stands whole in the record's README, README.md or a page of docs/."""
    assert f"`{record_command(record)}`" in (record / "README.md").read_text(encoding="utf-8")
    text = printed(record)
    tables = markdown_tables(text)
    assert len(tables) == text.count("\n## ") + text.startswith("## ") > 0
    quoted = {t for page in PAGES for t in markdown_tables(page.read_text(encoding="utf-8"))}
    for table in tables:
        assert table in quoted, "\n".join(table)


def test_every_table_quoting_a_record_is_the_printed_one() -> None:
    """A table of a page that holds a row report prints for a record (known by its first two
    cells, so that a column added since or a number changed still counts) is that table, whole:
    no page shows a record's table edited, cut short or out of date."""
    tables = [t for record in TABLED for t in markdown_tables(printed(record))]
    rows = {cells(row)[:2] for table in tables for row in table[2:]}
    quoting = 0
    for page in PAGES:
        if page.name == "README.md" and page.parent == REPO:
            continue  # README's summary: checked cell for cell above
        for table in markdown_tables(page.read_text(encoding="utf-8")):
            if rows.isdisjoint(cells(row)[:2] for row in table[2:]):
                continue
            quoting += 1
            assert table in tables, f"{page.relative_to(REPO)}:\n" + "\n".join(table)
    assert quoting >= len(tables)


def test_the_results_page_shows_the_seed_table_with_its_record_and_command() -> None:
    """docs/results.md: the PTB seeds record's table, exactly as its command prints it, with the
    record and the command named; the first search's PTB table stands in
    research/results_history.md and the bundled corpus's fair comparison in
    research/reproduction.md, each exactly as its record prints it."""
    for page, record in (
        ("research/results_history.md", RECORDS / "2026-11-29-h200-ptb"),
        ("docs/results.md", SEEDS),
        ("research/reproduction.md", RECORDS / "2026-11-28-cpu-fair"),
    ):
        text = (REPO / page).read_text(encoding="utf-8")
        assert f"`{record.relative_to(REPO)}" in text, page
        assert record_command(record) in text, page
        assert any(t in markdown_tables(text) for t in markdown_tables(printed(record))), page


def test_readme_results_summarise_the_seed_tables_cell_for_cell() -> None:
    """README "Results" is one short table: each row a model of the seeds record's tables
    (without dropout, with it, at gated-3's parameter count), each cell one of that model's
    printed cells, each number a mean ± sd over three seeds (a summary drops columns, rows and
    unseeded cells, never edits one), and the verdict line's words are the printed verdicts'
    (the verdict, the gap, Welch's p and Holm's p)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Results\n", 1)[1].split("\n## ", 1)[0]
    (table,) = markdown_tables(section)
    sources = [t for t in markdown_tables(printed(SEEDS)) if t[0].startswith("| model |")]
    assert len(sources) == 3
    printed_cells: dict[str, set[str]] = {}
    for source in sources:
        for row in source[2:]:
            printed_cells.setdefault(cells(row)[0], set()).update(cells(row))
    assert len(table) - 2 >= 3
    for row in table[2:]:
        model, *rest = cells(row)
        assert model in printed_cells, model
        assert set(rest) - {""} <= printed_cells[model], (row, printed_cells[model])
        numbers = [c for c in rest if re.fullmatch(r"[\d.]+ ± [\d.]+", c)]
        assert numbers, row
    verdicts = [t for t in markdown_tables(printed(SEEDS)) if t[0].startswith("| test ppl: A")]
    lines: dict[str, list[tuple[str, ...]]] = {}  # a pair's line without dropout and with it
    for row in (row for t in verdicts for row in t[2:]):
        lines.setdefault(cells(row)[0], []).append(cells(row))
    said = re.findall(
        r"([\w-]+(?: [\w-]+)*? against [\w-]+(?: [\w-]+)*?): ([a-z ]+) "
        r"\(gap ([\d.]+), Welch p ([\d.e-]+), Holm p ([\d.e-]+)\)",
        " ".join(section.split()),  # a sentence wraps anywhere
    )
    assert said
    for pair, kind, gap, p, q in said:
        assert (kind, gap, p, q) in {(ln[7], ln[3], ln[5], ln[6]) for ln in lines[pair]}, pair
    assert "docs/results.md" in section and "research/records/2026-12-01-cpu-ptb-seeds/" in section


def test_the_seed_table_is_the_mean_of_its_runs() -> None:
    """The × RNN column is each model's mean test ppl over the RNN's, from the runs' files."""

    def tests(name: str) -> list[float]:
        folders = [H200 / "demo_orders" / "runs" / name]
        folders += [H200 / "demo_seeds" / "runs" / f"{name}-seed{s}" for s in range(1235, 1239)]
        return [json.loads((f / "trainer_state.json").read_text())["test"]["ppl"] for f in folders]

    ratio = statistics.fmean(tests("hornn3-gated")) / statistics.fmean(tests("rnn"))
    row = next(r for r in printed(H200).splitlines() if r.startswith("| HORNN-3 `gated` |"))
    assert f"| {ratio:.3f} |" in row


def test_every_json_record_names_its_commit() -> None:
    """Each benchmark JSON's meta names the commit it measured, or says it is unknown and names
    the commit that added the record (`added_in`) with a note of what is known."""
    sha = re.compile(r"[0-9a-f]{40}")
    found = 0
    for path in sorted(RECORDS.rglob("*.json")):
        meta = json.loads(path.read_text()).get("meta")
        if not isinstance(meta, dict):
            continue  # not a benchmark's JSON (a trainer state, a sweep, a manifest)
        found += 1
        commit = meta.get("commit")
        assert commit == "unknown" or sha.fullmatch(str(commit)), (path, commit)
        assert meta.get("dirty") in (True, False, None), path
        if commit == "unknown":
            assert sha.fullmatch(str(meta.get("added_in"))) and meta.get("commit_note"), path
    assert found >= 19


def _record_of(tmp_path: Path, run: Path, spec: str) -> Path:
    """Return a record folder in tmp_path holding a copy of `run` as runs/x and tables.toml."""
    record = tmp_path / "record"
    shutil.copytree(run, record / "runs" / "x")
    (record / "tables.toml").write_text(spec)
    return record


CLIP_TABLE = """
[[table]]
title = "clip"
columns = [{head = "run", show = "run"}, {head = "clip", show = "clip"}]
rows = [{runs = ["runs/x"]}]
"""


def test_an_auto_clip_is_the_one_the_runs_events_say_not_todays(tmp_path: Path) -> None:
    """Under clip_mode auto the clip comes from the run's start events: events that say 0.25
    give 0.25 where today's auto would give `sum`-3 0.5; without them it is one line."""
    record = _record_of(tmp_path, H200 / "demo_orders" / "runs" / "hornn3-sum", CLIP_TABLE)
    path = record / "runs" / "x" / "metrics.jsonl"
    events = read_events(path)
    starts = [e for e in events if e["event"] == "start"]
    assert starts and all((e["clip_mode"], e["clip"]) == ("norm", 0.5) for e in starts)
    for event in starts:
        event["clip"] = 0.25
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    (record / "runs" / "x" / "train.log").unlink()  # no reader needs it
    result = run_record_tables(record)
    check_ok(result)
    assert "| x | norm 0.25 (auto) |" in result.stdout.splitlines()

    path.unlink()
    result = run_record_tables(record)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert str(record / "runs" / "x") in lines[0] and "clip_mode is auto" in lines[0]


def test_a_records_tables_read_no_train_log(tmp_path: Path) -> None:
    """The record whose tables show what the logs said (the start-up recipe, the largest
    training ppl, two runs' training losses step by step, the auto clip) prints the same
    tables with every train.log removed: its runs' metrics.jsonl holds it all."""
    source = RECORDS / "2026-11-27-cpu-recipe-search"
    record = tmp_path / source.name
    shutil.copytree(source, record)
    logs = list(record.rglob("train.log"))
    assert len(logs) >= 20
    for log in logs:
        log.unlink()
    result = run_record_tables(record)
    check_ok(result)
    assert result.stdout == printed(source)
    assert "| 150 | 5.6646 | 5.6483 | -0.0163 |" in result.stdout  # the losses, step by step


def test_a_parameters_column_is_the_count_the_runs_state_keeps(tmp_path: Path) -> None:
    """`show = "parameters"` prints the trainer state's count; a state without one (0) is one
    line naming the run and the column."""
    spec = CLIP_TABLE.replace('show = "clip"', 'show = "parameters"')
    record = _record_of(tmp_path, H200 / "demo_orders" / "runs" / "rnn", spec)
    state_file = record / "runs" / "x" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["parameters"] = 1234567
    state_file.write_text(json.dumps(state))
    result = run_record_tables(record)
    check_ok(result)
    assert "| x | 1,234,567 |" in result.stdout.splitlines()
    state["parameters"] = 0
    state_file.write_text(json.dumps(state))
    result = run_record_tables(record)
    (line,) = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "has no parameters" in line and 'column "clip"' in line


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (CLIP_TABLE.replace('show = "clip"', 'show = "clips"'), 'show = "clips" is none of'),
        (CLIP_TABLE.replace("runs/x", "runs/y"), "runs/y has no trainer_state.json"),
        (CLIP_TABLE.replace('title = "clip"', ""), 'needs a title = "..."'),
        (
            CLIP_TABLE.replace(
                '{head = "run", show = "run"}', '{head = "run", show = "run", run = 2}'
            ),
            'column "run" picks run 2, row 1 has 1',
        ),  # fmt: skip
    ],
)
def test_a_bad_tables_file_is_one_line(tmp_path: Path, spec: str, words: str) -> None:
    record = _record_of(tmp_path, H200 / "demo_orders" / "runs" / "rnn", spec)
    result = run_record_tables(record)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert words in lines[0], lines[0]


def test_a_fair_table_of_a_record_is_the_reports_one_screen_table(tmp_path: Path) -> None:
    """`fair = "SWEEP_DIR"` in tables.toml prints what `report SWEEP_DIR` prints under "In one
    table", from the same files; a folder that is not there is one line naming the key."""
    from hornn_dist.run.checkpoint import list_checkpoints
    from tests.test_fair_comparison import fabricate_fair

    (tmp_path / "sweep").mkdir()
    runs, _ = fabricate_fair(tmp_path / "sweep")
    record = tmp_path / "record"
    kept = record / "fair"  # as a record keeps a sweep: sweep.json, each run's last state
    kept.mkdir(parents=True)
    shutil.copy2(runs / "sweep.json", kept / "sweep.json")
    for run in (p for p in runs.iterdir() if p.is_dir()):
        (kept / run.name).mkdir()
        for name in ("trainer_state.json", "config.toml"):
            shutil.copy2(list_checkpoints(run)[-1] / name, kept / run.name / name)
    (record / "tables.toml").write_text('[[table]]\ntitle = "Fair"\nfair = "fair"\n')
    printed = run_record_tables(record)
    check_ok(printed)
    report = run_here("hornn_dist.report", str(runs), "--no-plots")
    check_ok(report)
    one_screen = report.stdout.split("## In one table\n", 1)[1]
    assert markdown_tables(printed.stdout) == markdown_tables(one_screen)[:1]
    assert printed.stdout.startswith("## Fair\n") and "| fofe |" in printed.stdout
    again = run_here("hornn_dist.report", str(kept), "--no-plots")  # the kept runs report too
    check_ok(again)
    assert (
        again.stdout.split("## In one table\n", 1)[1].split("\n## ")[0]
        == one_screen.split("\n## ")[0]
    )
    (record / "tables.toml").write_text('[[table]]\ntitle = "Fair"\nfair = "nope"\n')
    bad = run_record_tables(record)
    assert bad.returncode == 2, bad.stderr
    (line,) = bad.stderr.strip().splitlines()
    assert "fair = 'nope' is no folder or file relative to the record" in line


CHOSEN_TABLE = """
[[table]]
title = "chosen"
columns = [
  {head = "model"},
  {head = "recipe", show = "recipe", choose = "valid"},
  {head = "best valid ppl", show = "best valid ppl", choose = "valid"},
  {head = "test ppl", show = "test ppl", choose = "valid"},
  {head = "epochs, all three", show = "epochs"},
]
rows = [{model = "gated-3", runs = ["runs/plateau", "runs/dropout", "runs/newbob"]}]
"""


def test_a_chosen_column_shows_the_run_with_the_lowest_validation_never_the_test(
    tmp_path: Path,
) -> None:
    """`choose = "valid"` shows, of a row's runs, the one with the lowest validation ppl; a
    run that validates lower but tests higher is still the one shown (test never chooses)."""
    read_record_run = load_tool("record_runs").read_record_run
    ptb = RECORDS
    kept = {
        "plateau": ptb / "2026-11-28-cpu-ptb-converge/ptb_recipe_converge/hornn3-gated-seed1234",
        "newbob": ptb / "2026-11-28-cpu-ptb-converge/ptb_recipe_newbob/hornn3-gated-seed1234",
        "dropout": ptb / "2026-11-28-cpu-ptb-dropout/ptb_recipe_dropout/hornn3-gated-drop0.5-seed1234",
    }  # fmt: skip
    record = tmp_path / "record"
    for name, run in kept.items():
        shutil.copytree(run, record / "runs" / name)
    (record / "tables.toml").write_text(CHOSEN_TABLE)
    runs = {name: read_record_run(record / "runs" / name) for name in kept}
    best = min(runs.values(), key=lambda r: r.best_valid_ppl())
    assert best.name == "dropout"
    result = run_record_tables(record)
    check_ok(result)
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("| gated-3")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "lr 5, clip norm 1, weight decay 1e-06, newbob, dropout 0.5"
    assert cells[2:4] == [f"{best.best_valid_ppl():.2f}", f"{best.test_ppl():.2f}"]
    # the test ppl never chooses: make the dropout run test worst of all, it is still shown
    state = record / "runs" / "dropout" / "trainer_state.json"
    worst = max(r.test_ppl() for r in runs.values()) + 100
    stored = json.loads(state.read_text())
    stored["test"]["ppl"] = worst
    state.write_text(json.dumps(stored))
    again = run_record_tables(record)
    check_ok(again)
    assert f"| {worst:.2f} |" in again.stdout


VERDICT_TABLE = """
[[table]]
title = "verdicts"
columns = [
  {head = "model"},
  {head = "test ppl", show = "test ppl"},
  {head = "spread", show = "seed spread"},
]
rows = [
  {model = "LSTM", runs = ["runs/lstm-1234", "runs/lstm-1235", "runs/lstm-1236"]},
  {model = "gated-3", runs = ["runs/gated-1234", "runs/gated-1235", "runs/gated-1236"]},
  {model = "gated-3 wdrop", runs = ["runs/wdrop-1234", "runs/wdrop-1235", "runs/wdrop-1236"]},
]
compare = [["LSTM", "gated-3"], ["gated-3 wdrop", "gated-3"]]
"""


def test_a_verdict_line_is_the_noise_rule_over_each_rows_seeds(tmp_path: Path) -> None:
    """`compare` prints, per pair of rows, each row's test ppl over its seeds, the gap of the
    means, 2 × the larger sd, Welch's p, Holm's p over the record's pairs and the verdict:
    "better" only where the gap exceeds the bar and both p < 0.05, as computed here from the
    runs' own numbers."""
    read_record_run = load_tool("record_runs").read_record_run
    kept = RECORDS / "2026-11-29-h200-ptb" / "ptb_chosen"
    names = {
        "lstm": "lstm-drop0.5-seed{}",
        "gated": "hornn3-gated-drop0.3-tied-fixed10-seed{}",
        "wdrop": "hornn3-gated-drop0.3-tied-fixed10-wdrop0.2-seed{}",
    }
    record = tmp_path / "record"
    for short, name in names.items():
        for seed in (1234, 1235, 1236):
            shutil.copytree(kept / name.format(seed), record / "runs" / f"{short}-{seed}")
    (record / "tables.toml").write_text(VERDICT_TABLE)
    result = run_record_tables(record)
    check_ok(result)
    lines = {line.split("|")[1].strip(): line for line in result.stdout.splitlines() if "|" in line}

    def stat(short: str) -> tuple[float, float, list[float]]:
        tests = [
            read_record_run(record / "runs" / f"{short}-{s}").test_ppl() for s in (1234, 1235, 1236)
        ]
        return statistics.fmean(tests), statistics.stdev(tests), tests

    pairs = {
        "LSTM against gated-3": ("lstm", "gated"),
        "gated-3 wdrop against gated-3": ("wdrop", "gated"),
    }
    numbers = {}
    for label, (a, b) in pairs.items():
        (ma, sa, _), (mb, sb, _) = stat(a), stat(b)
        numbers[label] = (ma, sa, mb, sb, welch_p(ma, sa, 3, mb, sb, 3))
    adjusted = dict(zip(numbers, holm([n[4] for n in numbers.values()]), strict=True))
    expected = {}
    for label, (ma, sa, mb, sb, p) in numbers.items():
        gap, bar, q = abs(ma - mb), 2 * max(sa, sb), adjusted[label]
        kind = ("better" if ma < mb else "worse") if gap > bar and p < 0.05 else "within noise"
        kind = "not shown after correction" if kind != "within noise" and q >= 0.05 else kind
        cells = [c.strip() for c in lines[label].strip().strip("|").split("|")]
        assert cells[1:] == [
            f"{ma:.2f} ± {sa:.2f}",
            f"{mb:.2f} ± {sb:.2f}",
            f"{gap:.2f}",
            f"{bar:.2f}",
            f"{p:.2g}",
            f"{q:.2g}",
            kind,
        ]
        expected[label] = kind
    # the record's own seeds: the LSTM's lead over gated-3 with dropout holds, weight drop's
    # one-point change does not
    assert expected == {
        "LSTM against gated-3": "better",
        "gated-3 wdrop against gated-3": "within noise",
    }
    _, _, tests = stat("lstm")
    valids = [
        read_record_run(record / "runs" / f"lstm-{s}").best_valid_ppl() for s in (1234, 1235, 1236)
    ]
    spread = 100 * (statistics.fmean(valids) - min(valids)) / statistics.fmean(valids)
    assert [c.strip() for c in lines["LSTM"].strip().strip("|").split("|")][1:] == [
        f"{statistics.fmean(tests):.2f} ± {statistics.stdev(tests):.2f}",
        f"{spread:.1f}%",
    ]


def test_a_comparison_of_a_row_the_table_lacks_is_one_line(tmp_path: Path) -> None:
    spec = CLIP_TABLE + 'compare = [["RNN", "LSTM"]]\n'
    record = _record_of(tmp_path, H200 / "demo_orders" / "runs" / "rnn", spec)
    result = run_record_tables(record)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "compare entry ['RNN', 'LSTM'] is not two rows'" in lines[0], lines[0]


def test_an_epoch_curve_reads_each_epochs_lr_and_median_training_ppl_from_the_events(
    tmp_path: Path,
) -> None:
    """A record run's curve: per validation, the lr of the epoch's last train event and the
    median of its last 10 training ppls (a step trained again after a resume: its last
    event), beside the validation ppl trainer_state.json keeps."""
    record_runs = load_tool("record_runs")
    kept = RECORDS / "2026-11-29-cpu-ptb-tied/ptb_recipe_tied/rnn-tied-seed1234"
    run = tmp_path / "run"
    shutil.copytree(kept, run)
    history = record_runs.read_record_run(run).valid_history[:2]
    state = json.loads((run / "trainer_state.json").read_text())
    state["valid_history"] = history
    (run / "trainer_state.json").write_text(json.dumps(state))
    first, second = int(history[0]["step"]), int(history[1]["step"])

    def trained(step: int, ppl: float, lr: float) -> dict:
        return {"event": "train", "step": step, "loss": 1.0, "ppl": ppl, "lr": lr}

    events = [trained(first - 11 + i, i + 1.0, 5) for i in range(11)]  # then killed
    # resumed from a checkpoint 3 steps back: its last steps trained again, at other ppls
    events += [{"event": "start", "step": first - 3}]
    events += [trained(first - 2 + i, 50.0 + i, 5) for i in range(3)]
    events += [trained(second - 2 + i, 100.0 + i, 2.5) for i in range(3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "train.log").write_text("step 1: loss 9.0, ppl 9999.0, lr 9, 10 tokens/s\n")  # unread
    curve = record_runs.read_record_run(run).epoch_curve()
    assert [(e, lr, train) for e, lr, train, _ in curve] == [
        (1.0, 5.0, statistics.median([*range(3, 10), 50, 51, 52])),  # 7.5
        (2.0, 2.5, 101.0),
    ]
    assert [valid for *_, valid in curve] == pytest.approx([h["ppl"] for h in history])
    printed = run_tool("record_runs", str(run))
    check_ok(printed)
    assert (
        printed.stdout.strip()
        == f"- run: 1: 5, 8 / {history[0]['ppl']:.2f}; 2: 2.5, 101 / {history[1]['ppl']:.2f}"
    )
    missing = run_tool("record_runs", str(tmp_path))
    assert missing.returncode == 2
    assert missing.stderr.startswith(f"error: run folder {tmp_path} has no trainer_state.json")


def test_a_runs_sessions_read_its_start_and_stop_events_in_utc(tmp_path: Path) -> None:
    """record_runs.py --sessions: one line per run of its starts (UTC time, the date once a day,
    the commit its event names, clean or dirty, or "commit unknown" before events named one) and
    its stops (step, why, the signal)."""
    kept = RECORDS / "2026-11-29-cpu-ptb-tied/ptb_recipe_tied/rnn-tied-seed1234"
    run = tmp_path / "run"
    shutil.copytree(kept, run)
    day = 1796169600.0  # 2026-12-02 00:00:00 UTC
    events = [
        {"event": "start", "time": day - 60, "step": 0},
        {"event": "stop", "time": day - 30, "step": 7, "code": "signal", "signal": "SIGTERM"},
        {
            "event": "start",
            "time": day + 5,
            "step": 7,
            "code": {"commit": "ab" * 20, "dirty": True},
        },
        {"event": "train", "time": day + 6, "step": 8, "loss": 1.0, "ppl": 2.7, "lr": 5},
        {"event": "stop", "time": day + 3661, "step": 9, "code": "converged"},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    printed = run_tool("record_runs", "--sessions", str(run))
    check_ok(printed)
    assert printed.stdout.strip() == (
        "- run: start 2026-12-01 23:59:00 commit unknown, step 0; stop 23:59:30, step 7: signal "
        "SIGTERM; start 2026-12-02 00:00:05 commit abababa (dirty), step 7; stop 01:01:01, step 9: "
        "converged"
    )


def test_a_recipe_under_fixed_then_halve_says_after_how_many_epochs() -> None:
    """The recipe phrase of a fixed_then_halve run names its `optim.halve_after` (the epochs at
    the first lr), which is what tells two such schedules apart."""
    read_record_run = load_tool("record_runs").read_record_run
    runs = RECORDS / "2026-11-29-cpu-ptb-baselines/ptb_recipe_lstm_anneal"
    phrases = {}
    for folder in sorted(runs.iterdir()):
        if folder.is_dir():
            run = read_record_run(folder)
            phrases[run.setting("optim.halve_after")] = run.recipe()
    assert len(phrases) == 2, phrases
    for after, phrase in phrases.items():
        assert f"fixed_then_halve after {after}," in phrase, phrase


def copy_with_config_edit(run: Path, into: Path, old: str, new: str) -> Path:
    """Copy a record's run folder into `into` (once) with its config.toml's first `old` as
    `new` (each call edits the original's text), for a recipe phrase of one changed key."""
    copy = into / run.name
    if not copy.exists():
        shutil.copytree(run, copy)
    config = (run / "config.toml").read_text(encoding="utf-8")
    assert old in config, (old, run)
    (copy / "config.toml").write_text(config.replace(old, new, 1), encoding="utf-8")
    return copy


def test_a_recipe_names_its_weight_drop_and_halve_patience(tmp_path: Path) -> None:
    """model.weight_drop and optim.halve_patience appear in the recipe phrase, so runs that
    differ by either alone differ."""
    read_record_run = load_tool("record_runs").read_record_run
    source = RECORDS / "2026-11-29-cpu-ptb-gated-dropout/ptb_recipe_gated_dropout"
    run = next(folder for folder in sorted(source.iterdir()) if folder.is_dir())
    copy = copy_with_config_edit(run, tmp_path, "[model]\n", "[model]\nweight_drop = 0.25\n")
    plain, dropped = read_record_run(run).recipe(), read_record_run(copy).recipe()
    assert "weight drop" not in plain
    assert dropped.replace("weight drop 0.25, ", "") == plain, dropped
    copy_with_config_edit(run, tmp_path, "[optim]\n", "[optim]\nhalve_patience = 2\n")
    patient = read_record_run(copy).recipe()
    assert "newbob" in plain and patient == plain.replace("newbob", "newbob (patience 2)")


def test_a_fofe_recipe_names_its_alpha(tmp_path: Path) -> None:
    """FOFE's alpha scales every feedback path (eq. 5), so it is in the recipe phrase of a FOFE
    run (order 1 too: the RNN with its feedback scaled) and in no other pooling's."""
    read_record_run = load_tool("record_runs").read_record_run
    records = RECORDS
    run = records / "2026-11-30-cpu-ptb-rnn-alpha/ptb_recipe_rnn_alpha"
    run = run / "rnn-tied-wd1e-05-alpha0.2-seed1234"
    copy = copy_with_config_edit(run, tmp_path, "alpha = 0.2\n", "alpha = 0.5\n")
    scaled, other = read_record_run(run).recipe(), read_record_run(copy).recipe()
    assert "alpha 0.2" in scaled and other == scaled.replace("alpha 0.2", "alpha 0.5")
    unscaled = records / "2026-11-29-cpu-ptb-rnn-l2/ptb_recipe_rnn_l2/rnn-tied-wd1e-05-seed1234"
    assert "alpha" not in read_record_run(unscaled).recipe()


def test_a_recipe_names_its_feedback_scale(tmp_path: Path) -> None:
    """model.feedback_scale multiplies every feedback path, so a run at c != 1 names it."""
    read_record_run = load_tool("record_runs").read_record_run
    records = RECORDS
    run = records / "2026-11-29-cpu-ptb-gated-l2/ptb_recipe_gated_l2"
    run = next(folder for folder in sorted(run.iterdir()) if folder.is_dir())
    copy = copy_with_config_edit(run, tmp_path, "[model]\n", "[model]\nfeedback_scale = 0.2\n")
    plain, scaled = read_record_run(run).recipe(), read_record_run(copy).recipe()
    assert "feedback" not in plain
    assert scaled.replace(", feedback × 0.2", "") == plain and "feedback × 0.2" in scaled


TWO_RUNS = """
set = { "train.max_steps" = 6, "train.eval_every" = 2, "train.checkpoint_every" = 0 }

[[runs]]
name = "rnn"
set = { "model.order" = 1, "model.pooling" = "sum" }

[[runs]]
name = "hornn3-fofe"
set = { "model.order" = 3, "model.pooling" = "fofe" }
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return the output_dir of a real sweep of two tiny runs, the RNN and HORNN-3 FOFE."""
    folder = tmp_path_factory.mktemp("trained")
    sweep = write_sweep(folder, TWO_RUNS)
    check_ok(run_module("hornn_dist.sweep", str(sweep)))
    return folder / "runs"


def test_a_record_of_a_sweeps_runs_prints_its_tables(trained: Path, tmp_path: Path) -> None:
    """`research/tools/record_tables.py` over the files a record keeps of two finished runs
    (config.toml, metrics.jsonl, the last trainer_state.json): the clip auto resolved to, read
    from the trainer's own start event, and the scores the runs' checkpoints hold."""
    record = tmp_path / "record"
    for name in ("rnn", "hornn3-fofe"):
        kept = record / "runs" / name
        kept.mkdir(parents=True)
        for file in ("config.toml", "metrics.jsonl"):  # no train.log: no reader needs it
            shutil.copy2(trained / name / file, kept / file)
        newest = sorted((trained / name / "checkpoints").glob("step_*"))[-1]
        shutil.copy2(newest / "trainer_state.json", kept / "trainer_state.json")
    (record / "tables.toml").write_text(
        """
[[table]]
title = "two runs"
reference = ["runs/rnn"]
columns = [
  {head = "run", show = "run"},
  {head = "clip", show = "clip"},
  {head = "test ppl", show = "test ppl"},
  {head = "× RNN", show = "× reference"},
]
rows = [{runs = ["runs/rnn"]}, {runs = ["runs/hornn3-fofe"]}]
"""
    )
    proc = run_record_tables(record)
    check_ok(proc)
    rows = markdown_table(proc.stdout, "## two runs")
    rnn, fofe = read_run(trained / "rnn"), read_run(trained / "hornn3-fofe")
    for row, run in zip(rows, (rnn, fofe), strict=True):
        clip = resolve_clip(run.config.model, run.config.optim)  # what auto gave it then
        assert run.config.optim.clip_mode == "auto"
        assert row["clip"] == f"{clip.clip_mode} {clip.clip:g} (auto)"
        assert row["test ppl"] == f"{run.test_ppl:.2f}"
    assert rows[1]["× RNN"] == f"{fofe.test_ppl / rnn.test_ppl:.3f}"
    assert not list(record.rglob("report*"))  # it writes nothing
