"""Markdown tables of a sweep's runs laid out like the paper's (Table 2: by order, Table 3: one
row per model, Figure 4: by α), with the paper's numbers in labelled columns beside ours.

Each model's run is picked among its recipes by the lowest best validation perplexity, never by
test perplexity; only finished runs (test scored) are picked. A run's test perplexity is its best
checkpoint's by validation (`RunRecord.test_ppl`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence

from hornn_dist.models.poolings import get_pooling, pooling_names
from hornn_dist.sweeps.paper import (
    ALPHA_NOTE,
    PaperModel,
    ordinal,
    other_baselines,
    paper_column,
    paper_model,
    paper_ppl,
)
from hornn_dist.sweeps.params import recurrent_parameters
from hornn_dist.sweeps.results import RunRecord
from hornn_dist.util.wording import counted, fmt_duration

NONE = "—"
TEXT_COLUMNS = frozenset({"run", "model", "recipe", "finished", "kept", "stopped by"})


def pick_best(records: Iterable[RunRecord]) -> list[RunRecord]:
    """Return each model's finished run with the lowest best validation perplexity (ties: the
    first), in the order the models first appear."""
    best: dict[str, RunRecord] = {}
    for record in records:
        if not record.finished:
            continue
        key = record.model or record.name
        if key not in best or _valid(record) < _valid(best[key]):
            best[key] = record
    return list(best.values())


def _valid(record: RunRecord) -> float:
    """Return the best validation perplexity, NaN counted as the worst."""
    return record.best_valid_ppl if not math.isnan(record.best_valid_ppl) else math.inf


def markdown_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], left: Collection[str] = TEXT_COLUMNS
) -> str:
    """Return a GitHub Markdown table: the columns named in `left` left-aligned, the others
    (numbers) right-aligned."""
    cells = [[str(c).replace("|", "\\|") for c in row] for row in [headers, *rows]]
    align = ["---" if header in left else "---:" for header in headers]
    lines = [cells[0], align, *cells[1:]]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def fmt_ppl(value: float | None) -> str:
    """Return a perplexity with two decimals, or — when there is none."""
    if value is None or not math.isfinite(value):
        return NONE
    return f"{value:.2f}"


def fmt_paper(value: float | None) -> str:
    """Return one of the paper's numbers (integers in the paper), or — when it has none."""
    return NONE if value is None else f"{value:g}"


def fmt_count(n: float) -> str:
    """Return a count as "1,219", "86.4k" or "8.61M"."""
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e5:
        return f"{n / 1e3:.1f}k"
    return f"{n:,.0f}"


def short_stop(record: RunRecord) -> str:
    """Return why a run stopped in a few words ("converged (epoch 7)", "max_steps 4", ...),
    from its stop code, state and config (never the wording of its stop reason)."""
    code = record.stop_code
    if code == "converged":
        return f"converged (epoch {record.epochs:g})"
    if code == "max_steps":
        return f"max_steps {record.config.train.max_steps}"
    if code == "epochs":
        return counted(record.config.train.epochs, "epoch")
    if code == "signal":
        return f"stopped by {record.stop_signal or 'a signal'}"
    return NONE


def _recipe(record: RunRecord) -> str:
    return record.recipe or NONE


def _rnn_baseline(picked: Sequence[RunRecord]) -> RunRecord | None:
    """Return the picked run of the paper's RNN (a HORNN of order 1), if any."""
    return next((r for r in picked if paper_model(r.config).is_rnn), None)


def summary_table(picked: Sequence[RunRecord], paper: str) -> str:
    """Return Table 3's layout: one row per model with ours, the paper's and the run's cost."""
    rnn = _rnn_baseline(picked)
    headers = ["run", "model", "recipe", "test ppl", "best valid ppl"]
    headers += ["× RNN"] if rnn else []
    headers += [paper_column(paper)] if paper != "none" else []
    headers += ["params", "epochs", "tokens/s", "train time", "stopped by"]
    rows = []
    for record in picked:
        model = paper_model(record.config)
        row = [record.model or record.name, model.label, _recipe(record)]
        row += [fmt_ppl(record.test_ppl), fmt_ppl(record.best_valid_ppl)]
        if rnn:
            row.append(_ratio(record.test_ppl, rnn.test_ppl))
        if paper != "none":
            row.append(fmt_paper(paper_ppl(model, paper)))
        row += [fmt_count(record.parameters), f"{record.epochs:.1f}"]
        row += [fmt_count(record.tokens_per_sec), fmt_duration(record.train_seconds)]
        row.append(short_stop(record))
        rows.append(row)
    return markdown_table(headers, rows)


def _ratio(value: float, reference: float) -> str:
    if not (math.isfinite(value) and math.isfinite(reference) and reference > 0):
        return NONE
    return f"{value / reference:.3f}"


def baselines_note(picked: Sequence[RunRecord], paper: str) -> str:
    """Return a line with the paper's other models of its summary table (not trained here)."""
    shown = {paper_model(r.config).label for r in picked}
    others = other_baselines(paper, shown)
    if paper == "none" or not others:
        return ""
    listed = ", ".join(f"{label} {fmt_paper(ppl)}" for label, ppl in others.items())
    return f"The paper's other models (not trained here): {listed}."


def order_cells(picked: Sequence[RunRecord]) -> dict[tuple[str, int], list[RunRecord]]:
    """Return the picked HORNN runs and RNN runs by (pooling, order) (pooling "" for the RNN),
    each cell's runs lowest best validation ppl first: the first is the one Table 2 shows."""
    cells: dict[tuple[str, int], list[RunRecord]] = {}
    for record in picked:
        model = paper_model(record.config)
        if model.is_hornn or model.is_rnn:
            cells.setdefault((model.pooling, model.order), []).append(record)
    for runs in cells.values():
        runs.sort(key=_valid)
    return cells


def orders_table(picked: Sequence[RunRecord], paper: str) -> str:
    """Return Table 2's layout: rows by pooling (and the RNN), columns by order, ours beside the
    paper's, and a note naming the run shown where a cell has several."""
    cells = order_cells(picked)
    if not any(pooling for pooling, _ in cells):
        return "_No finished HORNN run of order 2 or more._"
    orders = sorted({order for _, order in cells})
    headers = ["model"]
    for order in orders:
        headers += [f"{ordinal(order)} order: ours"]
        headers += [f"{ordinal(order)} order: {paper_column(paper)}"] if paper != "none" else []
    rows, shared = [], []
    for pooling, label in [("", "RNN"), *((p, get_pooling(p).label) for p in pooling_names())]:
        if not any(p == pooling for p, _ in cells):
            continue
        row = [label]
        for order in orders:
            applies = (order == 1) == (pooling == "")
            runs = cells.get((pooling, order), [])
            row.append(fmt_ppl(runs[0].test_ppl) if runs else NONE if applies else "")
            if paper != "none":
                name = f"{label} ({ordinal(order)} order)" if pooling else label
                number = paper_ppl(PaperModel(name, pooling, order), paper)
                row.append(fmt_paper(number) if applies else "")
            if len(runs) > 1:
                names = ", ".join(r.model or r.name for r in runs)
                shown = runs[0].model or runs[0].name
                shared.append(f"{label} {ordinal(order)} order shows {shown} (of {names})")
        rows.append(row)
    table = markdown_table(headers, rows)
    if shared:
        table += (
            "\n\nCells with several runs show the one with the lowest best valid ppl: "
            + "; ".join(shared)
            + "."
        )
    return table


def alpha_table(picked: Sequence[RunRecord]) -> str:
    """Return Figure 4's numbers: one row per FOFE HORNN run (a pooling that reads α), by
    forgetting factor α."""
    fofe = [r for r in picked if reads_alpha(r)]
    if not fofe:
        return "_No finished FOFE HORNN run._"
    fofe.sort(key=lambda r: (r.config.model.alpha, r.config.model.order))
    headers = ["α", "run", "order", "recipe", "test ppl", "best valid ppl", "epochs"]
    rows = [
        [
            f"{r.config.model.alpha:g}",
            r.model or r.name,
            str(r.config.model.order),
            _recipe(r),
            fmt_ppl(r.test_ppl),
            fmt_ppl(r.best_valid_ppl),
            f"{r.epochs:.1f}",
        ]
        for r in fofe
    ]
    return markdown_table(headers, rows)


def reads_alpha(record: RunRecord) -> bool:
    """Whether the run's model is a HORNN whose pooling reads model.alpha (FOFE)."""
    pooling = paper_model(record.config).pooling
    return bool(pooling) and get_pooling(pooling).uses_alpha


def runs_table(records: Sequence[RunRecord], picked: Sequence[RunRecord]) -> str:
    """Return every run, each recipe on its own row; `kept` marks the runs the tables show."""
    kept = {id(r) for r in picked}
    headers = ["run", "recipe", "finished", "kept", "best valid ppl", "test ppl", "epochs"]
    headers += ["params", "recurrent", "stopped by"]
    rows = [
        [
            r.name,
            _recipe(r),
            "yes" if r.finished else f"no (step {r.step})",
            "✓" if id(r) in kept else "",
            fmt_ppl(r.best_valid_ppl),
            fmt_ppl(r.test_ppl),
            f"{r.epochs:.1f}",
            f"{r.parameters:,}" if r.parameters else NONE,
            f"{recurrent_parameters(r.config.model):,}",
            short_stop(r),
        ]
        for r in records
    ]
    return markdown_table(headers, rows)


def unfinished_note(records: Sequence[RunRecord]) -> str:
    """Return a line naming the runs left out of the tables as unfinished, or ""."""
    left = [
        f"{r.name} (step {r.step}{'; ' + r.damage if r.damage else ''})"
        for r in records
        if not r.finished
    ]
    if not left:
        return ""
    return f"Not finished, left out: {', '.join(left)}; run the sweep again to finish them."


def cost_note(records: Sequence[RunRecord]) -> str:
    """Return a line naming the hardware of the runs and their total training time."""
    hardware = sorted({r.hardware for r in records if r.hardware}) or ["unknown"]
    total = sum(r.train_seconds for r in records)
    return (
        f"Hardware: {'; '.join(hardware)}. Total training time of the {len(records)} runs "
        f"(every recipe): {fmt_duration(total)}."
    )


def render_tables(records: Sequence[RunRecord], layout: str, paper: str) -> str:
    """Return the Markdown sections of the report for `layout` (orders | alpha | summary)."""
    picked = pick_best(records)
    notes = [unfinished_note(records), cost_note(records)]
    sections: list[str] = []
    if layout == "orders":
        sections.append(
            "## Test perplexity by order (paper Table 2)\n\n" + orders_table(picked, paper)
        )
    if layout == "alpha":
        body = alpha_table(picked)
        sections.append(f"## Test perplexity by forgetting factor α (paper Figure 4)\n\n{body}")
        sections.append(_paragraphs([ALPHA_NOTE, *notes]))
    else:
        body = summary_table(picked, paper)
        sections.append(f"## Best run of each model (paper Table 3)\n\n{body}")
        sections.append(_paragraphs([baselines_note(picked, paper), *notes]))
    sections.append("## All runs\n\n" + runs_table(records, picked))
    return "\n\n".join(sections) + "\n"


def _paragraphs(lines: Iterable[str]) -> str:
    return "\n\n".join(line for line in lines if line)
