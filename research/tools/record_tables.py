"""Print the tables of a benchmark record: `python research/tools/record_tables.py RECORD`.

The tables are computed from the run folders the record keeps, as its `tables.toml` declares
them (this repository's records only: a reader of them, so it lives beside them, not in the
package):

    [[table]]
    title = "Five seeds"                          # printed as a heading above the table
    reference = ["runs/rnn-1", "runs/rnn-2"]      # the × reference columns divide by these
    columns = [
      {head = "model"},                           # no `show`: each row gives the text
      {head = "clip", show = "clip"},             # no `run`: every run of the row
      {head = "seed 1", show = "test ppl", run = 1},
      {head = "mean ± sd", show = "test ppl"},
      {head = "× RNN", show = "× reference"},
    ]
    rows = [
      {model = "RNN", runs = ["runs/rnn-1", "runs/rnn-2"]},
    ]

    [[table]]
    title = "Seeded rows and their verdicts"      # a table as above, then one line per pair:
    columns = [{head = "model"}, {head = "test ppl", show = "test ppl"}]
    rows = [{model = "RNN", runs = [...]}, {model = "LSTM", runs = [...]}]
    compare = [["LSTM", "RNN"]]                   # rows by their first column's text: test
                                                  # ppl means, gap, 2 × the larger sd, Welch's
                                                  # p, Holm's p and the verdict, under a
                                                  # heading of their own

    [[table]]
    title = "Training loss, two runs"
    train_losses = ["runs/a", "runs/b"]           # the train loss both have at a step, b - a

    [[table]]
    title = "The fair comparison"
    fair = "demo_fair"                            # a sweep's output_dir: its one-screen table
                                                  # (the paper's column: its sweep.json's paper)
    speed_record = "speed"                        # optional: tokens/s from this speed record

Paths are relative to the record's folder; "" in a row's `runs` is a blank cell. A column's
`run` (1-based) or `runs` (a list) picks the row's runs it shows; the reference is one run for
every column, or one per position of the rows' runs. `show` names a quantity of `QUANTITIES`;
`epoch` and `key` are its arguments where it takes one; `align` ("left" or "right") overrides
a column's alignment (text left, numbers right); `choose = "valid"` makes a column show the
one run of those it picks with the lowest validation ppl (a model's recipes side by side in a
row, each column showing the chosen one's). A quantity over one run shows its value; over
several, perplexities are "mean ± sd" (sample sd) and epochs "min–max".

A record's `compare` pairs are read together: Holm's correction (welch.holm) adjusts each
pair's Welch p over every pair of every table of the record. A verdict line says "better" or
"worse" only where the noise rule holds (fair.py: the gap exceeds 2 × the larger sd and
Welch's p < 0.05) and Holm's p < 0.05 too; where the noise rule holds on Welch's p alone, "not
shown after correction"; otherwise the noise rule's "within noise" or "no verdict".
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hornn_dist.config import read_toml
from hornn_dist.runtime import run_cli
from hornn_dist.sweeps.fair import (
    NOISE_FACTOR,
    P_LEVEL,
    Stat,
    Verdict,
    families,
    noise_verdict,
    results_table,
)
from hornn_dist.sweeps.results import read_runs, read_sweep_record
from hornn_dist.sweeps.speed import read_speed_record
from hornn_dist.sweeps.tables import NONE, fmt_ppl, markdown_table
from hornn_dist.sweeps.welch import holm
from hornn_dist.util.errors import ConfigError

from record_runs import RecordRun, read_record_run

TABLES_FILE = "tables.toml"  # in a record's folder: the tables this script prints
VERDICTS = "the noise rule's verdicts"  # the heading's tail over a table's `compare` lines
NOT_SHOWN = "not shown after correction"  # the noise rule holds on Welch's p, not on Holm's


@dataclass(frozen=True)
class Column:
    """One column of a record table: its head, what it shows and of which of the row's runs."""

    head: str
    show: str = ""  # "" = the text each row gives under `head`
    positions: tuple[int, ...] = ()  # 0-based positions in the row's runs; () = all
    epoch: int | None = None
    key: str = ""
    align: str = ""  # "left" | "right" | "" (the quantity's)
    choose: bool = False  # the one run of those picked with the lowest validation ppl

    @property
    def left(self) -> bool:
        if self.align:
            return self.align == "left"
        return not self.show or QUANTITIES[self.show].text


@dataclass(frozen=True)
class Row:
    runs: tuple[RecordRun | None, ...]
    text: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[Column, ...] = ()
    rows: tuple[Row, ...] = ()
    reference: tuple[RecordRun, ...] = ()
    train_losses: tuple[RecordRun, ...] = ()
    fair: Path | None = None  # a sweep's output_dir: the fair layout's one-screen table
    speed_record: Path | None = None
    compare: tuple[tuple[int, int], ...] = ()  # pairs of row indices: the noise rule's verdicts


Cell = Callable[[list[RecordRun], list[RecordRun], Column], str]


@dataclass(frozen=True)
class Quantity:
    """What a column can show: `cell(runs, references, column)`; `text` columns align left."""

    cell: Cell
    text: bool = False
    about: str = ""


def _one(runs: list[RecordRun], column: Column) -> RecordRun:
    """Return the one run a column shows; raise ConfigError when it picks several."""
    if len(runs) != 1:
        raise ConfigError(
            f'column "{column.head}" shows "{column.show}" of one run, but picks {len(runs)}; '
            "give it run = N"
        )
    return runs[0]


def _same(values: Sequence[str], column: Column) -> str:
    """Return the value every run of the cell shares; raise ConfigError where they differ."""
    if len(set(values)) > 1:
        raise ConfigError(
            f'column "{column.head}": the runs it picks differ ({", ".join(sorted(set(values)))}); '
            "give it run = N"
        )
    return values[0]


def _ppls(values: Sequence[float]) -> str:
    """Return one perplexity, or "mean ± sd" of several."""
    return fmt_ppl(values[0]) if len(values) == 1 else Stat.of(values).text()


def _ratio(value: float, reference: float) -> str:
    if not (math.isfinite(value) and math.isfinite(reference) and reference > 0):
        return NONE
    return f"{value / reference:.3f}"


def _spread(values: Sequence[float]) -> str:
    """Return how far the lowest value is under the mean, in % ("1.3%"); one value: none."""
    if len(values) < 2:
        return NONE
    mean = statistics.fmean(values)
    return f"{100 * (mean - min(values)) / mean:.1f}%"


def _mean_test(runs: Sequence[RecordRun]) -> float:
    return statistics.fmean(r.test_ppl() for r in runs)


def _epochs(runs: list[RecordRun], _refs: list[RecordRun], _column: Column) -> str:
    epochs = [int(r.state.get("epoch", 0)) for r in runs]
    low, high = min(epochs), max(epochs)
    return str(low) if low == high else f"{low}–{high}"


def _span(values: Sequence[float], fmt: str) -> str:
    """Return one value, or "min–max" of several."""
    low, high = min(values), max(values)
    return format(low, fmt) if low == high else f"{low:{fmt}}–{high:{fmt}}"


def _schedule(run: RecordRun, key: str) -> float:
    """Return one value of the run's lr schedule at its end (its trainer state's `schedule`)."""
    return float(run.state.get("schedule", {}).get(key, math.nan))


def _setting(runs: list[RecordRun], _refs: list[RecordRun], column: Column) -> str:
    values = [r.setting(column.key) for r in runs]
    return _same([f"{v:g}" if isinstance(v, int | float) else str(v) for v in values], column)


def _parameters(runs: list[RecordRun], _refs: list[RecordRun], column: Column) -> str:
    counts = []
    for run in runs:
        if not run.state.get("parameters"):
            raise ConfigError(
                f"{run.folder}: its trainer_state.json has no parameters (a state older than the "
                f'count); drop column "{column.head}" or train the run again'
            )
        counts.append(f"{int(run.state['parameters']):,}")
    return _same(counts, column)


def _over_reference(runs: list[RecordRun], refs: list[RecordRun], _column: Column) -> str:
    return _ratio(_mean_test(runs), _mean_test(refs))


def _mean_over_reference(runs: list[RecordRun], refs: list[RecordRun], column: Column) -> str:
    if len(refs) != len(runs):
        raise ConfigError(
            f'column "{column.head}" pairs each run with its reference: give the table one '
            "reference per position of its rows' runs"
        )
    ratios = [r.test_ppl() / ref.test_ppl() for r, ref in zip(runs, refs, strict=True)]
    return _ratio(statistics.fmean(ratios), 1.0)


def _test_and_ratio(runs: list[RecordRun], refs: list[RecordRun], column: Column) -> str:
    run, ref = _one(runs, column), refs[0]
    if run.folder.resolve() == ref.folder.resolve():
        return fmt_ppl(run.test_ppl())  # the reference itself: its ratio is 1 by definition
    return f"{fmt_ppl(run.test_ppl())} ({_ratio(run.test_ppl(), ref.test_ppl())})"


def _validations(runs: list[RecordRun], _refs: list[RecordRun], column: Column) -> str:
    history = _one(runs, column).validations()
    return ", ".join(f"{fmt_ppl(ppl)} ({step})" for step, ppl in history) or NONE


def _largest(runs: list[RecordRun], _refs: list[RecordRun], column: Column) -> str:
    ppl = _one(runs, column).largest_train_ppl()
    return f"{ppl:.4g}" if math.isfinite(ppl) else NONE


QUANTITIES: dict[str, Quantity] = {
    "run": Quantity(lambda runs, _, c: _one(runs, c).name, True, "the run's folder name"),
    "clip": Quantity(
        lambda runs, _, c: _same([r.clip() for r in runs], c),
        True,
        "the clip it trained under: its config.toml's, or under \"auto\" its start events'",
    ),
    "config": Quantity(_setting, False, "the value of `key` (section.key) in its config.toml"),
    "parameters": Quantity(_parameters, False, "its parameter count (its trainer state's)"),
    "recipe": Quantity(
        lambda runs, _, c: _same([r.recipe() for r in runs], c),
        True,
        "lr, momentum, clip, column norm, weight decay, schedule, dropout, tied",
    ),
    "epochs": Quantity(_epochs, False, "the epochs it trained (several runs: min–max)"),
    "halvings": Quantity(
        lambda runs, _, c: _span([_schedule(r, "halvings") for r in runs], ".0f"),
        False,
        "how often its lr was halved (several runs: min–max)",
    ),
    "final lr": Quantity(
        lambda runs, _, c: _span([_schedule(r, "lr") for r in runs], "g"),
        False,
        "the lr its schedule ended at (several runs: min–max)",
    ),
    "steps": Quantity(
        lambda runs, _, c: str(_one(runs, c).state.get("step", 0)), False, "its last step"
    ),
    "best valid ppl": Quantity(
        lambda runs, _, c: _ppls([r.best_valid_ppl() for r in runs]),
        False,
        "its lowest validation perplexity",
    ),
    "valid ppl": Quantity(
        lambda runs, _, c: _ppls([r.valid_ppl(c.epoch) for r in runs]),
        False,
        "its validation perplexity at the end of `epoch` (without one: its last validation)",
    ),
    "test ppl": Quantity(
        lambda runs, _, c: _ppls([r.test_ppl() for r in runs]),
        False,
        "the test perplexity of its best checkpoint by validation",
    ),
    "test ppl (last)": Quantity(
        lambda runs, _, c: _ppls([r.test_ppl(last=True) for r in runs]),
        False,
        "the test perplexity of its last weights",
    ),
    "seed spread": Quantity(
        lambda runs, _, c: _spread([r.best_valid_ppl() for r in runs]),
        False,
        "how far the best-validating seed is under the runs' mean best valid ppl, in %",
    ),
    "× reference": Quantity(
        _over_reference, False, "the mean test ppl of the runs over the references' mean"
    ),
    "mean × reference": Quantity(
        _mean_over_reference, False, "the mean of each run's test ppl over its reference's"
    ),
    "test ppl (× reference)": Quantity(
        _test_and_ratio, False, "its test ppl and, unless it is the reference, the ratio"
    ),
    "validations": Quantity(_validations, True, "every validation: ppl (step)"),
    "largest train ppl": Quantity(_largest, False, "the largest training ppl of its events"),
    "start-up recipe": Quantity(
        lambda runs, _, c: _one(runs, c).startup_recipe(),
        True,
        "the init and clip of its first start event (what its start-up recipe line says)",
    ),
    "stop reason": Quantity(
        lambda runs, _, c: str(_one(runs, c).state.get("stop_reason") or NONE),
        True,
        "why it stopped (its trainer state's stop_reason)",
    ),
}


def render_record_tables(record: Path) -> str:
    """Return every table the record's tables.toml declares, each under a "## title" line (a
    table's verdicts under "## title: the noise rule's verdicts", Holm's p over every pair of
    the record)."""
    tables = read_record_tables(record)
    pairs = [_compared(table, a, b) for table in tables for a, b in table.compare]
    tested = [i for i, (_, _, verdict) in enumerate(pairs) if math.isfinite(verdict.p)]
    adjusted = dict(zip(tested, holm([pairs[i][2].p for i in tested]), strict=True))
    lines = iter([*pair, adjusted.get(i, math.nan)] for i, pair in enumerate(pairs))
    sections = []
    for table in tables:
        sections.append(f"## {table.title}\n\n{render_table(table)}\n")
        if table.compare:
            mine = [next(lines) for _ in table.compare]
            sections.append(f"## {table.title}: {VERDICTS}\n\n{_verdicts_table(table, mine)}\n")
    return "\n".join(sections)


def render_table(table: Table) -> str:
    """Return one record table as Markdown."""
    if table.train_losses:
        return _losses_table(*table.train_losses)
    if table.fair is not None:
        speed = read_speed_record(table.speed_record) if table.speed_record else None
        paper = read_sweep_record(table.fair).get("paper", "none")  # as report does
        return results_table(families(read_runs(table.fair)), speed, paper)
    rows = [[_cell(table, row, column) for column in table.columns] for row in table.rows]
    left = {c.head for c in table.columns if c.left}
    return markdown_table([c.head for c in table.columns], rows, left)


def _compared(table: Table, a: int, b: int) -> tuple[str, tuple[Stat, Stat], Verdict]:
    """Return a compared pair's words ("A against B"), each row's test ppl over its seeds and
    the noise rule's verdict."""
    head = table.columns[0].head
    row_a, row_b = table.rows[a], table.rows[b]
    stat_a, stat_b = (
        Stat.of([r.test_ppl() for r in row.runs if r is not None]) for row in (row_a, row_b)
    )
    pair = f"{row_a.text.get(head, '')} against {row_b.text.get(head, '')}"
    return pair, (stat_a, stat_b), noise_verdict(stat_a, stat_b)


def _verdicts_table(table: Table, pairs: list[list[Any]]) -> str:
    """Return one line per compared pair of rows (`pairs`: each `_compared`'s and its Holm p):
    each row's test ppl over its seeds, the gap of the means, NOISE_FACTOR × the larger sd,
    Welch's p, Holm's p and the verdict (better or worse only where Holm's p < P_LEVEL too)."""
    lines = []
    for pair, stats, verdict, adjusted in pairs:
        numbers = (
            [f"{verdict.gap:.2f}", f"{verdict.bar:.2f}", f"{verdict.p:.2g}", f"{adjusted:.2g}"]
            if math.isfinite(verdict.gap)
            else [NONE] * 4
        )
        kind = verdict.kind if math.isfinite(verdict.gap) else verdict.text()
        if kind in ("better", "worse") and not adjusted < P_LEVEL:
            kind = NOT_SHOWN
        lines.append([pair, stats[0].text(), stats[1].text(), *numbers, kind])
    heads = [
        "test ppl: A against B",
        "A",
        "B",
        "gap",
        f"{NOISE_FACTOR:g} × larger sd",
        "Welch p",
        "Holm p",
        "verdict",
    ]
    return markdown_table(heads, lines, {heads[0], "verdict"})


def _cell(table: Table, row: Row, column: Column) -> str:
    """Return one cell: the row's text, or the column's quantity over the runs it picks."""
    if not column.show:
        return row.text.get(column.head, "")
    positions = column.positions or tuple(range(len(row.runs)))
    runs = [row.runs[i] for i in positions if row.runs[i] is not None]
    if column.choose:  # by validation, never by test; a run not yet validated is no choice
        validated = [r for r in runs if math.isfinite(r.best_valid_ppl())]
        runs = [min(validated, key=lambda r: r.best_valid_ppl())] if validated else []
    if not runs:
        return ""
    if len(table.reference) <= 1:
        refs = list(table.reference)
    else:
        refs = [table.reference[i] for i in positions if row.runs[i] is not None]
    try:
        return QUANTITIES[column.show].cell(runs, refs, column)
    except ConfigError as err:
        raise ConfigError(f'table "{table.title}": {err}') from None


def _losses_table(a: RecordRun, b: RecordRun) -> str:
    """Return the training loss of two runs at each step both have a train event at, and
    b's minus a's (at the log's precision, 4 decimals)."""
    la, lb = a.train_losses(), b.train_losses()
    rows = [
        [str(step), f"{la[step]:.4f}", f"{lb[step]:.4f}", f"{lb[step] - la[step]:+.4f}"]
        for step in sorted(set(la) & set(lb))
    ]
    return markdown_table(["step", a.name, b.name, "difference"], rows, left=())


def read_record_tables(record: Path) -> list[Table]:
    """Return the tables declared in `record`/tables.toml, every run they name read; raise
    ConfigError (one line) naming the file, the table and what is wrong."""
    spec = record / TABLES_FILE
    if not spec.is_file():
        raise ConfigError(
            f"{record} has no {TABLES_FILE}; --record takes a benchmark record folder that "
            "declares its tables, e.g. research/records/2026-11-27-h200-grids"
        )
    tables = read_toml(spec, "record tables", f"research/records/NAME/{TABLES_FILE}")
    unknown = set(tables) - {"table"}
    if unknown or not isinstance(tables.get("table"), list) or not tables["table"]:
        raise ConfigError(f"{spec}: holds [[table]] entries only, at least one")
    runs: dict[str, RecordRun] = {}
    return [_table(spec, i + 1, t, runs) for i, t in enumerate(tables["table"])]


def _table(spec: Path, index: int, raw: Any, runs: dict[str, RecordRun]) -> Table:
    """Return table `index` of the spec, checked."""
    title = raw.get("title") if isinstance(raw, dict) else None
    where = f"{spec}: table {index}" + (f' ("{title}")' if title else "")
    if not isinstance(title, str) or not title:
        raise ConfigError(f'{where}: needs a title = "..."')

    def run(path: Any) -> RecordRun:
        if not isinstance(path, str) or not path or Path(path).is_absolute():
            raise ConfigError(f"{where}: {path!r} is not a run folder relative to the record")
        if path not in runs:
            runs[path] = read_record_run(spec.parent / path)
        return runs[path]

    if "train_losses" in raw:
        pair = raw["train_losses"]
        if set(raw) != {"title", "train_losses"} or not isinstance(pair, list) or len(pair) != 2:
            raise ConfigError(f"{where}: train_losses = [RUN_A, RUN_B] stands alone with its title")
        return Table(title, train_losses=(run(pair[0]), run(pair[1])))
    if "fair" in raw:
        return _fair_table(where, spec.parent, title, raw)
    unknown = set(raw) - {"title", "columns", "rows", "reference", "compare"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    columns = tuple(_column(where, c) for c in _list(where, raw, "columns"))
    literal = {c.head for c in columns if not c.show}
    rows = []
    for number, entry in enumerate(_list(where, raw, "rows"), 1):
        if not isinstance(entry, dict) or not isinstance(entry.get("runs", []), list):
            raise ConfigError(f"{where}: row {number} is not {{runs = [...], HEAD = TEXT}}")
        text = {k: v for k, v in entry.items() if k != "runs"}
        if set(text) - literal or not all(isinstance(v, str) for v in text.values()):
            raise ConfigError(
                f"{where}: row {number} gives text for {', '.join(sorted(text))}; "
                f"its text columns are {', '.join(sorted(literal)) or 'none'}"
            )
        row_runs = tuple(run(p) if p != "" else None for p in entry.get("runs", []))
        rows.append(Row(row_runs, text))
    reference = tuple(run(p) for p in raw.get("reference", []))
    for number, row in enumerate(rows, 1):
        for column in columns:
            if any(p >= len(row.runs) for p in column.positions):
                raise ConfigError(
                    f'{where}: column "{column.head}" picks run {max(column.positions) + 1}, '
                    f"row {number} has {len(row.runs)}"
                )
        if len(reference) > 1 and len(reference) != len(row.runs):
            raise ConfigError(
                f"{where}: {len(reference)} references but row {number} has {len(row.runs)} "
                "runs; give one reference, or one per run of each row"
            )
    needs_reference = any("reference" in c.show for c in columns)
    if needs_reference and not reference:
        raise ConfigError(f'{where}: its × reference columns need reference = ["RUN", ...]')
    compare = _pairs(where, raw.get("compare", []), columns[0].head, rows)
    return Table(title, columns, tuple(rows), reference, compare=compare)


def _pairs(where: str, raw: Any, head: str, rows: list[Row]) -> tuple[tuple[int, int], ...]:
    """Return `compare`'s pairs as row indices; raise ConfigError naming a pair that is not two
    rows' texts under the first column."""
    index = {row.text.get(head, ""): i for i, row in enumerate(rows)}
    if not isinstance(raw, list):
        raise ConfigError(f'{where}: compare = [["ROW A", "ROW B"], ...]')
    pairs = []
    for pair in raw:
        if not (isinstance(pair, list) and len(pair) == 2 and all(p in index for p in pair)):
            raise ConfigError(
                f'{where}: compare entry {pair!r} is not two rows\' "{head}" texts '
                f"({', '.join(repr(t) for t in index)})"
            )
        pairs.append((index[pair[0]], index[pair[1]]))
    return tuple(pairs)


def _fair_table(where: str, record: Path, title: str, raw: dict[str, Any]) -> Table:
    """Return a `fair = "SWEEP_DIR"` table of the spec, checked."""
    unknown = set(raw) - {"title", "fair", "speed_record"}
    if unknown:
        raise ConfigError(
            f"{where}: a fair table takes fair and speed_record, not {', '.join(sorted(unknown))}"
        )
    paths = []
    for key in ("fair", "speed_record"):
        value = raw.get(key, "")
        bad = not isinstance(value, str) or Path(value).is_absolute()
        if bad or (key == "fair" and not value) or not (record / value).exists():
            raise ConfigError(
                f"{where}: {key} = {value!r} is no folder or file relative to the record"
            )
        paths.append(record / value if value else None)
    return Table(title, fair=paths[0], speed_record=paths[1])


def _list(where: str, raw: dict[str, Any], key: str) -> list[Any]:
    value = raw.get(key)
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: needs {key} = [...], at least one")
    return value


def _column(where: str, raw: Any) -> Column:
    """Return a column of the spec, checked."""
    if not isinstance(raw, dict) or not isinstance(raw.get("head"), str):
        raise ConfigError(f'{where}: column {raw!r} is not {{head = "...", show = "..."}}')
    head, show = raw["head"], raw.get("show", "")
    unknown = set(raw) - {"head", "show", "run", "runs", "epoch", "key", "align", "choose"}
    if unknown:
        raise ConfigError(f'{where}: column "{head}": unknown key(s) {", ".join(sorted(unknown))}')
    if show and show not in QUANTITIES:
        raise ConfigError(
            f'{where}: column "{head}": show = "{show}" is none of {", ".join(QUANTITIES)}'
        )
    picks = raw.get("runs", [raw["run"]] if "run" in raw else [])
    if not isinstance(picks, list) or not all(isinstance(p, int) and p >= 1 for p in picks):
        raise ConfigError(f'{where}: column "{head}": run = N and runs = [N, ...] count from 1')
    if show == "config" and not raw.get("key"):
        raise ConfigError(f'{where}: column "{head}": show = "config" needs key = "section.key"')
    align = raw.get("align", "")
    if align not in ("", "left", "right"):
        raise ConfigError(f'{where}: column "{head}": align is "left" or "right", got {align!r}')
    choose = raw.get("choose", "")
    if choose not in ("", "valid"):
        raise ConfigError(
            f'{where}: column "{head}": choose = "valid" (the run with the lowest validation '
            f"ppl) is the one choice, got {choose!r}"
        )
    return Column(
        head,
        show,
        tuple(p - 1 for p in picks),
        raw.get("epoch"),
        raw.get("key", ""),
        align,
        choose == "valid",
    )


def main(argv: list[str] | None = None) -> int:
    """Print the record's tables; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", help="a record folder, e.g. research/records/2026-11-28-cpu-ptb")
    args = parser.parse_args(argv)
    print(render_record_tables(Path(args.record)), end="", flush=True)
    return 0


if __name__ == "__main__":
    run_cli(main)
