"""The fair comparison (`report --layout fair`): each model over its seeds, its lr picked by
validation, at equal tokens and at convergence, with the noise rule for every verdict.

- **Seeds.** Runs whose configs differ only by `train.seed` (and their folders) are one model
  under one recipe; a model's label is its run name less the seed ("rnn-seed1235" -> "rnn").
  The same model under another recipe is the group whose runs carry the same model names (the
  sweep names a model's run alike under each recipe).
- **The pick.** Each model keeps the recipe (e.g. an lr of the grid) with the lowest mean over
  its seeds of the best validation perplexity; test perplexity never enters the pick.
- **Equal tokens.** The best validation perplexity by the end of epoch k (what a run stopped at
  epoch k keeps as its best checkpoint; the validation at epoch k itself where validation only
  improved), from each run's `valid_history` in trainer_state.json, for every k that every run
  of the model reached; the verdicts take the last epoch every run of every model reached.
- **Converged.** Test perplexity of each run's best checkpoint by validation.
- **The noise rule** (`noise_verdict`, the one place it is decided): model A is better than B
  only when the gap of their means exceeds `NOISE_FACTOR` (2) times the larger of their seed
  standard deviations (n - 1 in the denominator) and Welch's t-test gives p < `P_LEVEL` (0.05;
  at three seeds a gap past 2 sds alone can be p ~ 0.05); otherwise "within noise". A model
  with one seed has no sd: no verdict is called.
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from hornn_dist.sweeps.paper import paper_cell, paper_column, paper_model
from hornn_dist.sweeps.params import recurrent_parameters
from hornn_dist.sweeps.results import RunRecord
from hornn_dist.sweeps.speed import SpeedRecord
from hornn_dist.sweeps.tables import (
    NONE,
    cost_note,
    markdown_table,
    runs_table,
    unfinished_note,
)
from hornn_dist.sweeps.welch import welch_p

NOISE_FACTOR = 2.0
P_LEVEL = 0.05  # Welch's two-sided p a verdict needs besides the gap
EPOCH_SLACK = 1e-9  # valid_history's epoch is step / steps_per_epoch, a float
FAIR_TEXT_COLUMNS = frozenset(
    {
        "model",
        "recipe (lr)",
        "lr at the end (halvings)",
        "epochs",
        "tokens/s",
        "valid ppl by recipe",
    }
)


@dataclass(frozen=True)
class Stat:
    """A quantity over a model's seeds: its finite values, mean and sample sd (None: one seed)."""

    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        """Return the Stat of `values`, non-finite ones (a diverged run) left out."""
        return cls(tuple(v for v in values if math.isfinite(v)))

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else math.nan

    @property
    def sd(self) -> float | None:
        return statistics.stdev(self.values) if self.n >= 2 else None

    def text(self) -> str:
        """Return "52.31 ± 1.20", "52.31 (one seed)" or — ."""
        if not self.values:
            return NONE
        if self.sd is None:
            return f"{self.mean:.2f} (one seed)"
        return f"{self.mean:.2f} ± {self.sd:.2f}"


@dataclass(frozen=True)
class Verdict:
    """How model A stands against B on one quantity (lower is better)."""

    kind: str  # "better" | "worse" | "within noise" | "no verdict"
    gap: float = math.nan  # |mean A - mean B|
    bar: float = math.nan  # NOISE_FACTOR x the larger sd
    p: float = math.nan  # Welch's two-sided p
    why: str = ""  # for "no verdict"

    def text(self) -> str:
        """Return the verdict in a few words, with the numbers it rests on."""
        if self.kind == "no verdict":
            return f"no verdict: {self.why}"
        sign = ">" if self.gap > self.bar else "≤"
        sd = self.bar / NOISE_FACTOR
        return f"{self.kind} (gap {self.gap:.2f} {sign} {NOISE_FACTOR:g} × sd {sd:.2f}, Welch p {self.p:.2g})"


def noise_verdict(a: Stat, b: Stat) -> Verdict:
    """Return whether A (lower is better) is better than, worse than, or within noise of B:
    better or worse only when the gap of the means exceeds NOISE_FACTOR times the larger of
    the two seed sds and Welch's p < P_LEVEL; with one seed (no sd) on either side, no verdict."""
    if not a.n or not b.n:
        return Verdict("no verdict", why="no finished run")
    if a.sd is None or b.sd is None:
        return Verdict("no verdict", why="one seed, no sd")
    gap = abs(a.mean - b.mean)
    bar = NOISE_FACTOR * max(a.sd, b.sd)
    p = welch_p(a.mean, a.sd, a.n, b.mean, b.sd, b.n)
    if gap > bar and p < P_LEVEL:
        return Verdict("better" if a.mean < b.mean else "worse", gap, bar, p)
    return Verdict("within noise", gap, bar, p)


@dataclass
class SeedGroup:
    """One model under one recipe: its finished runs, one per seed, in sweep order."""

    recipe: str
    runs: list[RunRecord]

    @property
    def valid(self) -> Stat:
        return Stat.of([r.best_valid_ppl for r in self.runs])

    @property
    def test(self) -> Stat:
        return Stat.of([r.test_ppl for r in self.runs])

    def epochs_reached(self) -> int:
        """Return the last whole epoch every run of the group validated at (0 if none)."""
        return min((_last_epoch(r) for r in self.runs), default=0)

    def valid_by_epoch(self, epoch: int) -> Stat:
        """Return the best validation ppl by the end of `epoch`, over the group's runs."""
        return Stat.of([_best_by(r, epoch) for r in self.runs])


@dataclass
class Family:
    """A model: its seed groups, one per recipe, and the one picked by validation."""

    label: str
    groups: list[SeedGroup] = field(default_factory=list)

    @property
    def picked(self) -> SeedGroup:
        """Return the recipe group with the lowest mean best validation ppl (ties: the first;
        a group without a finite one last)."""
        return min(self.groups, key=lambda g: g.valid.mean if g.valid.n else math.inf)

    @property
    def first(self) -> RunRecord:
        return self.picked.runs[0]


def _last_epoch(record: RunRecord) -> int:
    epochs = [float(e.get("epoch", 0)) for e in record.valid_history]
    return int(math.floor(max(epochs, default=0.0) + EPOCH_SLACK))


def _best_by(record: RunRecord, epoch: int) -> float:
    ppls = [
        float(e["ppl"])
        for e in record.valid_history
        if float(e.get("epoch", 0)) <= epoch + EPOCH_SLACK and "ppl" in e
    ]
    return min(ppls, default=math.nan)


def _config_key(record: RunRecord) -> str:
    """Return the run's config without its seed and folder: equal for runs of one seed group."""
    config = record.config
    train = dataclasses.replace(config.train, seed=0, output_dir="")
    return dataclasses.replace(config, train=train).to_toml()


def _label(records: Sequence[RunRecord]) -> str:
    """Return a model's label: its runs' model name less the seed, where the seeds differ."""
    names = [r.model or r.name for r in records]
    if len(records) < 2:
        return names[0]
    stripped = {
        re.sub(rf"(?:[-_.](?:seed|s)?|seed){r.config.train.seed}(?!\d)", "", name)
        for r, name in zip(records, names, strict=True)
    }
    return stripped.pop() if len(stripped) == 1 else names[0]


def seed_groups(records: Sequence[RunRecord]) -> list[tuple[str, list[RunRecord]]]:
    """Return the runs grouped into one model under one recipe each (configs equal but for the
    seed), in the order they first appear, each with its label (the model name less the seed)."""
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for record in records:
        groups.setdefault((record.recipe, _config_key(record)), []).append(record)
    return [(_label(runs), runs) for runs in groups.values()]


def families(records: Sequence[RunRecord]) -> list[Family]:
    """Return the finished runs grouped into models (`Family`) and seed groups, in the order
    the models first appear."""
    finished = [r for r in records if r.finished]
    ordered = [SeedGroup(runs[0].recipe, runs) for _, runs in seed_groups(finished)]
    # groups that hold a run of the same model name are one model under two recipes
    parent = list(range(len(ordered)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for index, group in enumerate(ordered):
        for run in group.runs:
            name = run.model or run.name
            if name in owner:
                parent[root(index)] = root(owner[name])
            else:
                owner[name] = index
    out: dict[int, Family] = {}
    for index, group in enumerate(ordered):
        family = out.setdefault(root(index), Family(_label(group.runs)))
        family.groups.append(group)
    return list(out.values())


def _reference(fams: Sequence[Family], kind: str) -> Family | None:
    for family in fams:
        config = family.first.config
        if (kind == "RNN" and paper_model(config).is_rnn) or (
            kind == "LSTM" and config.model.arch == "lstm"
        ):
            return family
    return None


def _lr(group: SeedGroup) -> str:
    lrs = sorted({r.config.optim.lr for r in group.runs})
    return ", ".join(f"{lr:g}" for lr in lrs)


def _ratio(a: Stat, b: Stat) -> str:
    if not (a.n and b.n and b.mean > 0):
        return NONE
    return f"{a.mean / b.mean:.3f}"


def _per_seed(values: Sequence[str]) -> str:
    return ", ".join(values) or NONE


def _speed(family: Family, speed: SpeedRecord | None) -> str:
    if speed is None:
        return "no speed record given"
    found = speed.lookup(family.first.config.model)
    if found is None:
        return "not in the record"
    return f"{found.tokens_per_sec:,.0f} ({found.how})"


def equal_token_epoch(fams: Sequence[Family]) -> int:
    """Return the last epoch every picked run of every model reached (0: none)."""
    return min((f.picked.epochs_reached() for f in fams), default=0)


def render_fair(
    records: Sequence[RunRecord], speed: SpeedRecord | None, paper: str = "none"
) -> str:
    """Return the Markdown sections of the report's fair layout, then every run."""
    fams = families(records)
    kept = [run for family in fams for run in family.picked.runs]
    notes = "\n\n".join(n for n in (unfinished_note(records), cost_note(records)) if n)
    sections = [
        *fair_sections(records, speed, paper),
        notes,
        "## All runs\n\n" + runs_table(records, kept),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"


def results_table(fams: Sequence[Family], speed: SpeedRecord | None, paper: str) -> str:
    """Return the one-screen table of the fair comparison: per model its parameters, the lr
    validation picked, test ppl ± sd over seeds, the paper's number where the model is in the
    paper's setting, its ratios to the RNN's and the LSTM's mean, and tokens/s."""
    if not fams:
        return "_No finished run._"
    rnn, lstm = _reference(fams, "RNN"), _reference(fams, "LSTM")
    papers = [paper_cell(family.first.config, paper) for family in fams]
    with_paper = any(cell is not None for cell in papers)  # a column only in the paper's setting
    headers = ["model", "params", "lr", "test ppl"]
    headers += [paper_column(paper)] if with_paper else []
    headers += ["× RNN", "× LSTM", "tokens/s"]
    rows = []
    for family, cell in zip(fams, papers, strict=True):
        group = family.picked
        row = [family.label, f"{family.first.parameters:,}", _lr(group), group.test.text()]
        row += [cell or NONE] if with_paper else []
        for reference in (rnn, lstm):
            row.append(_ratio(group.test, reference.picked.test) if reference else NONE)
        row.append(_speed(family, speed))
        rows.append(row)
    return markdown_table(headers, rows, frozenset({"model", "tokens/s"}))


def fair_sections(
    records: Sequence[RunRecord], speed: SpeedRecord | None, paper: str = "none"
) -> list[str]:
    """Return the fair layout's Markdown sections: the models, the verdicts, the lr picked, and
    validation by epoch."""
    fams = families(records)
    if not fams:
        return ["## Each model over its seeds\n\n_No finished run._"]
    epoch = equal_token_epoch(fams)
    rnn, lstm = _reference(fams, "RNN"), _reference(fams, "LSTM")
    at = f"valid ppl by epoch {epoch} (equal tokens)"
    ended = _how_ended(fams)
    headers = ["model", "recipe (lr)", "seeds", "params", "recurrent", at, f"test ppl ({ended})"]
    headers += ["× RNN"] if rnn else []
    headers += ["× LSTM"] if lstm else []
    headers += ["lr at the end (halvings)", "epochs", "tokens/s"]
    rows = []
    for family in fams:
        group = family.picked
        first = group.runs[0]
        row = [family.label, f"{group.recipe or NONE} (lr {_lr(group)})", str(len(group.runs))]
        row += [f"{first.parameters:,}", f"{recurrent_parameters(first.config.model):,}"]
        row += [group.valid_by_epoch(epoch).text() if epoch else NONE, group.test.text()]
        for reference in (rnn, lstm):
            if reference is not None:
                row.append(_ratio(group.test, reference.picked.test))
        row.append(_per_seed([f"{r.final_lr:g} ({r.halvings})" for r in group.runs]))
        row.append(_per_seed([f"{r.epochs:g}" for r in group.runs]))
        row.append(_speed(family, speed))
        rows.append(row)
    speed_note = (
        f"tokens/s: from the speed record {speed.describe()}; the fastest row for each model."
        if speed is not None
        else "tokens/s: no speed record given (`--speed-record PATH`); the runs' own tokens/s "
        "shared their machine with each other and are not shown."
    )
    notes = [
        "Each model keeps the recipe with the lowest mean best validation perplexity over its "
        "seeds (validation only). Mean ± sd over seeds (sample sd); × RNN and × LSTM are "
        f"ratios of the test means ({ended}). Test ppl: each run's best checkpoint by validation. "
        "params: the whole model; recurrent: its layers between the embedding and the output "
        "layer. lr at the end: the lr each run's last epoch trained at, with the number of "
        "halvings, one per seed; epochs likewise.",
        speed_note,
    ]
    sections = [
        "## In one table\n\n" + results_table(fams, speed, paper) + _paper_note(fams, paper),
        "## Each model over its seeds (fair comparison)\n\n"
        + markdown_table(headers, rows, FAIR_TEXT_COLUMNS)
        + "\n\n"
        + "\n\n".join(notes),
        "## Verdicts\n\n" + _verdicts(fams, rnn, lstm, epoch, ended),
        "## Lr picked by validation\n\n" + _recipes_table(fams),
        "## Best validation perplexity by epoch (equal tokens)\n\n" + _epochs_table(fams),
    ]
    return sections


def _paper_note(fams: Sequence[Family], paper: str) -> str:
    """Return a line under the one-screen table saying where the paper's numbers come from."""
    if not any(paper_cell(family.first.config, paper) for family in fams):
        return ""
    return (
        f'\n\n{paper_column(paper)}: the paper\'s test perplexity, no dropout; "(borrowed)" marks '
        "a number its summary table took from another paper, not trained under its recipe. "
        "A model at another hidden size has none."
    )


def _how_ended(fams: Sequence[Family]) -> str:
    """Return "converged" where the stopping rule ended every picked run, else how many runs
    ended otherwise (e.g. at train.epochs: their test column is at equal tokens, not converged)."""
    runs = [run for family in fams for run in family.picked.runs]
    early = sum(run.stop_code != "converged" for run in runs)
    return "converged" if not early else f"not converged: {early} of {len(runs)} runs"


def _verdicts(
    fams: Sequence[Family], rnn: Family | None, lstm: Family | None, epoch: int, ended: str
) -> str:
    references = [f for f in (rnn, lstm) if f is not None]
    if not references:
        return "_No RNN or LSTM among the models: no verdicts._"
    headers = ["model"]
    for ref in references:
        headers += [f"vs {ref.label}: test ({ended})", f"vs {ref.label}: valid by epoch {epoch}"]
    rows = []
    for family in fams:
        row = [family.label]
        for ref in references:
            if family is ref:
                row += ["(itself)", "(itself)"]
                continue
            row.append(noise_verdict(family.picked.test, ref.picked.test).text())
            if epoch:
                a, b = family.picked.valid_by_epoch(epoch), ref.picked.valid_by_epoch(epoch)
                row.append(noise_verdict(a, b).text())
            else:
                row.append(NONE)
        rows.append(row)
    rule = (
        f"A model is called better or worse only where the gap of the means exceeds "
        f"{NOISE_FACTOR:g} × the larger of the two seed sds and Welch's t-test gives p < "
        f"{P_LEVEL:g}; otherwise it is within noise. With one seed there is no sd and no verdict."
    )
    return markdown_table(headers, rows, frozenset(headers)) + "\n\n" + rule


def _recipes_table(fams: Sequence[Family]) -> str:
    headers = ["model", "picked", "valid ppl by recipe"]
    rows = []
    for family in fams:
        picked = family.picked
        cells = [
            f"{g.recipe or NONE} (lr {_lr(g)}): {g.valid.text()}{' ✓' if g is picked else ''}"
            for g in family.groups
        ]
        rows.append([family.label, picked.recipe or NONE, "; ".join(cells)])
    return markdown_table(headers, rows, frozenset(headers))


def _epochs_table(fams: Sequence[Family]) -> str:
    last = max((f.picked.epochs_reached() for f in fams), default=0)
    if not last:
        return "_No run validated at an epoch's end._"
    headers = ["epoch", *[f.label for f in fams]]
    rows = []
    for epoch in range(1, last + 1):
        row = [str(epoch)]
        for family in fams:
            group = family.picked
            row.append(
                group.valid_by_epoch(epoch).text() if epoch <= group.epochs_reached() else ""
            )
        rows.append(row)
    return (
        markdown_table(headers, rows, frozenset({"epoch"}))
        + "\n\nA cell is empty past the last epoch every run of its model reached."
    )
