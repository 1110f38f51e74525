"""README "Results" and docs/reproduction.md state the H200 grids record's numbers exactly (and
README's rows from the CPU record of the stopping rule, those of its table.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import io

from tests.train_helpers import REPO

RECORD = REPO / "benchmarks" / "records" / "2026-11-27-h200-grids"
README = (REPO / "README.md").read_text(encoding="utf-8")
REPRODUCTION = (REPO / "docs" / "reproduction.md").read_text(encoding="utf-8")


CPU_RECORD = REPO / "benchmarks" / "records" / "2026-11-27-cpu-converged"


def record_table(record=RECORD):
    """Return a record's table.py (the H200 record's unless given) as a module."""
    spec = importlib.util.spec_from_file_location(f"{record.name}_table", record / "table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    return table


def test_every_row_of_the_record_is_in_the_docs() -> None:
    table = record_table()
    seeds, recipe, orders = table.seeds_rows(), table.recipe_rows(), table.orders_rows()
    alpha, dropout = table.alpha_rows(), table.dropout_rows()
    assert (len(seeds), len(recipe), len(orders), len(alpha), len(dropout)) == (6, 2, 6, 8, 4)
    for row in seeds + recipe + orders + alpha + dropout:
        assert row in REPRODUCTION, row


def test_readme_results_tables_are_the_records() -> None:
    section = README.split("## Results\n", 1)[1].split("\n## ", 1)[0]
    assert "`benchmarks/records/2026-11-27-h200-grids/`" in section
    assert "`benchmarks/records/2026-11-27-cpu-converged/halve_before_stop/`" in section
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        record_table().main()
        record_table(CPU_RECORD).main()
    lines = set(printed.getvalue().splitlines())
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    # the seeds, orders, alpha, dropout and rule tables: their rows, each table's header and rule
    assert len(rows) == 6 + 6 + 8 + 4 + 6 + 5 * 2
    for row in rows:
        assert row in lines, row


def test_the_seed_table_is_the_mean_of_its_runs() -> None:
    """The × RNN column is each model's mean test ppl over the RNN's, from the runs' files."""
    table = record_table()
    rnn = [table.test_ppl(f) for f in table.seed_runs("rnn")]
    gated = [table.test_ppl(f) for f in table.seed_runs("hornn3-gated")]
    assert len(rnn) == len(gated) == 5
    ratio = (sum(gated) / 5) / (sum(rnn) / 5)
    row = next(r for r in table.seeds_rows() if r.startswith("| HORNN-3 `gated`"))
    assert f"| {ratio:.3f} |" in row
