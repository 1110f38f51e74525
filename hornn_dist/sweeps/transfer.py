"""The transfer screen's tables (`layout = "transfer"`): each config on each corpus of a sweep's
[corpora], its first logged training window, its validation by epoch and its test.

A config's rank on a corpus is by best validation perplexity (never by test); the test column is
the best-validation checkpoint's, as everywhere in a report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hornn_dist.run.run_layout import EVENTS_FILE
from hornn_dist.sweeps.results import RunRecord
from hornn_dist.sweeps.tables import fmt_ppl, markdown_table
from hornn_dist.training.events import read_events

HEADERS = ("config", "first window", "valid ppl by epoch", "best valid", "test", "rank")


@dataclass(frozen=True)
class FirstWindow:
    """A run's first logged training window and its corpus's vocabulary."""

    step: int  # the window's last step (train steps 1..step)
    ppl: float  # its mean training perplexity
    vocabulary: int

    @property
    def above_vocabulary(self) -> bool:
        """Whether the window did worse than a uniform guess over the vocabulary."""
        return not self.ppl <= self.vocabulary


def first_window(folder: Path) -> FirstWindow | None:
    """Return the first `train` event of the run in `folder` with its run's vocabulary (None
    before it logged one)."""
    path = folder / EVENTS_FILE
    if not path.is_file():
        return None
    events = read_events(path)
    start = next((e for e in events if e.get("event") == "start"), {})
    train = next((e for e in events if e.get("event") == "train"), None)
    if train is None:
        return None
    return FirstWindow(int(train["step"]), float(train["ppl"]), int(start.get("vocabulary", 0)))


def render_transfer(records: Sequence[RunRecord]) -> str:
    """Return a section per corpus: each config's first window, validation by epoch, best
    validation, test and rank by validation."""
    corpora: dict[str, list[RunRecord]] = {}
    for record in records:
        corpora.setdefault(record.sweep_corpus, []).append(record)
    sections = []
    above = []
    for corpus, runs in corpora.items():
        finished = sorted((r for r in runs if r.finished), key=lambda r: r.best_valid_ppl)
        rank = {r.name: i for i, r in enumerate(finished, 1)}
        rows = []
        vocabulary = 0
        for record in runs:
            window = first_window(record.folder)
            vocabulary = window.vocabulary if window else vocabulary
            start = "—"
            if window:
                start = f"{window.ppl:,.1f} (steps 1-{window.step})"
                if window.above_vocabulary:
                    start = f"**{start}**"
                    above.append(record.name)
            epochs = ", ".join(fmt_ppl(v["ppl"]) for v in record.valid_history) or "—"
            rows.append(
                (
                    _config(record),
                    start,
                    epochs,
                    fmt_ppl(record.best_valid_ppl),
                    fmt_ppl(record.test_ppl) if record.finished else "—",
                    str(rank.get(record.name, "—")),
                )
            )
        title = corpus or "the runs"
        sections.append(
            f"## {title} (vocabulary {vocabulary:,})\n\n"
            + markdown_table(HEADERS, rows, left={"config", "first window", "valid ppl by epoch"})
        )
    note = (
        "A first window in bold did worse than a uniform guess over its corpus's vocabulary: "
        + ", ".join(above)
        + "."
        if above
        else "Every first window did better than a uniform guess over its corpus's vocabulary."
    )
    return "\n\n".join([*sections, note]) + "\n"


def _config(record: RunRecord) -> str:
    """Return the run's config name without its corpus (the sweep names it CORPUS.CONFIG)."""
    model = record.model or record.name
    prefix = f"{record.sweep_corpus}."
    return model[len(prefix) :] if record.sweep_corpus and model.startswith(prefix) else model
