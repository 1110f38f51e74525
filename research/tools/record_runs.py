"""A run as a benchmark record keeps it, read back as it ran: one folder holding the run's
config.toml (read as written: no default of today fills a key, no check of today refuses an
old value), its metrics.jsonl (the trainer's events, `training/events.py`) and its last
checkpoint's trainer_state.json (through the one reader of that file,
`run_state.TrainerState.read`). No reader parses its train.log, which is for people.

What the run did is read from these files only, never recomputed by today's code: under
`optim.clip_mode = "auto"` the clip is the one its start events say auto resolved to. (Runs
recorded before metrics.jsonl got one derived from their train.log, each event marked
`derived_from`; commit f9c4731's message says how.)

As a script it prints each run's learning curve, one epoch after another, for a record's text,
or with --sessions its starts (time, commit, clean or not) and stops (time, why):
    python research/tools/record_runs.py [--sessions] RUN_FOLDER [RUN_FOLDER ...]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hornn_dist.config import ModelConfig, OptimConfig, read_toml
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run import run_layout
from hornn_dist.run.run_state import TrainerState
from hornn_dist.training.events import read_events
from hornn_dist.training.metrics import perplexity
from hornn_dist.util import provenance
from hornn_dist.util.errors import ConfigError

# the training ppl of an epoch in a curve: the median of its last this many train events
CURVE_TRAIN_LINES = 10


@dataclass(frozen=True)
class RecordRun:
    """One run folder of a record: its trainer state, its config as written, its events."""

    folder: Path
    state: dict[str, Any]
    config: dict[str, Any]
    events: list[dict[str, Any]]  # its metrics.jsonl's, in order ([] when it keeps none)

    @property
    def name(self) -> str:
        return self.folder.name

    def setting(self, key: str) -> Any:
        """Return the value of `section.key` in the run's config.toml; raise ConfigError (one
        line) when the file has no such key."""
        section, _, name = key.partition(".")
        table = self.config.get(section)
        if not isinstance(table, dict) or name not in table:
            raise ConfigError(
                f"{self.folder / run_layout.CONFIG_FILE} has no {key}; name a key the run's "
                "config.toml holds"
            )
        return table[name]

    def of(self, kind: str) -> list[dict[str, Any]]:
        """Return the run's events of one kind ("start", "train", ...), in order."""
        return [e for e in self.events if e.get("event") == kind]

    def clip(self) -> str:
        """Return the clip the run trained under, as "norm 1", or "norm 0.5 (auto)" where its
        config left it to `auto` (read from its start events, which say what auto gave)."""
        optim = self.config.get("optim", {})
        mode = optim.get("clip_mode", "auto")
        if mode != "auto":
            return f"{mode} {optim.get('clip', 1.0):g}"
        found = {(e["clip_mode"], e["clip"]) for e in self.of("start")}
        if len(found) != 1:
            what = "no start event" if not found else "start events whose clips differ"
            raise ConfigError(
                f"{self.folder}: optim.clip_mode is auto and its {run_layout.EVENTS_FILE} has "
                f"{what}, so the clip it trained under is unknown; keep the run's own "
                f"{run_layout.EVENTS_FILE} in the record"
            )
        ((mode, value),) = found
        return f"{mode} {value:g} (auto)"

    def recipe(self) -> str:
        """Return the run's training recipe in one phrase: lr, momentum, clip, column norm,
        weight decay, lr schedule, dropout, weight drop, FOFE's alpha (eq. 5: it scales every
        feedback path, so it is part of the recipe), the feedback scale and tied weights, as its
        config.toml set them."""
        optim, model = self.config.get("optim", {}), self.config.get("model", {})
        parts = [f"lr {optim.get('lr', math.nan):g}"]
        if optim.get("momentum", 0):
            parts.append(f"momentum {optim['momentum']:g}")
        parts.append(f"clip {self.clip()}")
        if optim.get("max_col_norm", 0):
            parts.append(f"column norm {optim['max_col_norm']:g}")
        if optim.get("weight_decay", 0):
            parts.append(f"weight decay {optim['weight_decay']:g}")
        schedule = str(optim.get("schedule", "plateau"))
        if schedule == "fixed_then_halve":  # the epochs at the first lr make the schedule
            schedule += f" after {optim.get('halve_after', OptimConfig.halve_after)}"
        elif optim.get("halve_patience", 1) != 1:  # failed epochs in a row before a halving
            schedule += f" (patience {optim['halve_patience']})"
        parts.append(schedule)
        if model.get("dropout", 0):
            mask = model.get("dropout_mask", "step")
            parts.append(
                f"dropout {model['dropout']:g}" + (f" ({mask} mask)" if mask != "step" else "")
            )
        if model.get("weight_drop", 0):
            parts.append(f"weight drop {model['weight_drop']:g}")
        if model.get("arch", "hornn") == "hornn" and model.get("pooling") == "fofe":
            parts.append(f"alpha {model.get('alpha', ModelConfig.alpha):g}")
        if model.get("feedback_scale", 1.0) != 1.0:
            parts.append(f"feedback × {model['feedback_scale']:g}")
        if model.get("tie_weights", False):
            parts.append("tied")
        return ", ".join(parts)

    def startup_recipe(self) -> str:
        """Return the first start event's init and clip, as "init ...; clip norm (auto) 1"."""
        found = [e for e in self.of("start") if "init" in e]
        if not found:
            raise ConfigError(
                f"{self.folder}: no start event of its {run_layout.EVENTS_FILE} names the init "
                "(the trainer's start events name it since 2026-12-01); keep the run's own "
                f"{run_layout.EVENTS_FILE} in the record, or drop the column"
            )
        first = found[0]
        auto = " (auto)" if self.config.get("optim", {}).get("clip_mode", "auto") == "auto" else ""
        return f"{first['init']}; clip {first['clip_mode']}{auto} {first['clip']:g}"

    def train_losses(self) -> dict[int, float]:
        """Return the training loss at each step with a train event (the last one written of a
        step, as a resumed run appends), by step."""
        return {int(e["step"]): _number(e.get("loss")) for e in self.of("train")}

    def largest_train_ppl(self) -> float:
        """Return the largest training perplexity of its train events (NaN when none)."""
        ppl = [_number(e.get("ppl")) for e in self.of("train")]
        return max((p for p in ppl if not math.isnan(p)), default=math.nan)

    def epoch_curve(self) -> list[tuple[float, float, float, float]]:
        """Return (epoch, lr, training ppl, validation ppl) at each validation: the lr of the
        epoch's last train event and the median ppl of its last `CURVE_TRAIN_LINES` (NaN where
        it has none, e.g. a record whose run keeps no events); of a step a resumed run trained
        again, the last event written."""
        by_step = {int(e["step"]): e for e in self.of("train") if "lr" in e}
        lines = [(s, _number(e.get("ppl")), _number(e["lr"])) for s, e in sorted(by_step.items())]
        curve, start = [], 0
        for entry in self.valid_history:
            end = int(entry["step"])
            epoch = [(ppl, lr) for step, ppl, lr in lines if start < step <= end]
            ppls = [ppl for ppl, _ in epoch[-CURVE_TRAIN_LINES:]]
            train = statistics.median(ppls) if ppls else math.nan
            lr = epoch[-1][1] if epoch else math.nan
            curve.append((float(entry["epoch"]), lr, train, _ppl(entry)))
            start = end
        return curve

    def curve_text(self) -> str:
        """Return the epoch curve in one line: "1: 5, 377 / 319.73; 2: ..." (epoch: lr,
        training ppl / validation ppl)."""
        return "; ".join(
            f"{epoch:g}: {lr:g}, {train:.0f} / {valid:.2f}"
            for epoch, lr, train, valid in self.epoch_curve()
        )

    def sessions_text(self) -> str:
        """Return its starts and stops in one line, in UTC, for a record's run entry: "start
        2026-12-02 06:41:20 commit d9f3bc9 (clean), step 0; stop 07:38:51, step 24784: converged"
        (a start's commit as its event says, "commit unknown" where the event predates it)."""
        parts, day = [], ""
        for event in self.events:
            kind = event.get("event")
            if kind not in ("start", "stop") or "time" not in event:
                continue
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(event["time"])))
            when = stamp if stamp[:10] != day else stamp[11:]
            day = stamp[:10]
            if kind == "start":
                code = event.get("code")
                known = isinstance(code, dict) and code.get("commit")
                where = provenance.describe_commit(code if known else provenance.UNKNOWN)
                parts.append(f"start {when} {where}, step {event.get('step', 0)}")
            else:
                why = " ".join(str(event[k]) for k in ("code", "signal") if event.get(k)) or "stop"
                parts.append(f"stop {when}, step {event.get('step', '?')}: {why}")
        return "; ".join(parts) or "no start or stop events"

    @property
    def valid_history(self) -> list[dict[str, Any]]:
        return list(self.state.get("valid_history") or [])

    def validations(self) -> list[tuple[int, float]]:
        """Return (step, perplexity) of every validation, in order."""
        return [(int(v["step"]), _ppl(v)) for v in self.valid_history]

    def valid_ppl(self, epoch: int | None = None) -> float:
        """Return the validation perplexity at the end of `epoch`, or of the last validation
        when `epoch` is None (NaN when there is none)."""
        history = self.valid_history
        if epoch is not None:
            history = [v for v in history if float(v.get("epoch", math.nan)) == epoch]
        return _ppl(history[-1]) if history else math.nan

    def best_valid_ppl(self) -> float:
        """Return the lowest validation perplexity of the run (NaN before any validation)."""
        return min((_ppl(v) for v in self.valid_history), default=math.nan)

    def test_ppl(self, last: bool = False) -> float:
        """Return the test perplexity of the best checkpoint by validation (`test`), or of the
        last weights (`test_last`); NaN where the run has none (not finished)."""
        scores = self.state.get("test_last" if last else "test") or {}
        return float(scores.get("ppl", math.nan))


def _number(value: Any) -> float:
    """Return an event's number as a float (null, a non-finite number in JSON, as NaN)."""
    return math.nan if value is None else float(value)


def _ppl(entry: dict[str, Any]) -> float:
    """Return a validation entry's perplexity (from its loss where it has no `ppl`)."""
    return float(entry["ppl"]) if "ppl" in entry else perplexity(entry["loss"], 1)


def read_record_run(folder: Path) -> RecordRun:
    """Return the run a record keeps in `folder`; raise ConfigError or CheckpointError (one
    line) when its trainer_state.json or config.toml is missing or unreadable."""
    if not (folder / ckpt.STATE_FILE).is_file():
        raise ConfigError(
            f"run folder {folder} has no {ckpt.STATE_FILE}; a record's run folder holds the "
            "run's config.toml, metrics.jsonl and last trainer_state.json"
        )
    state = asdict(TrainerState.read(folder))
    config = read_toml(folder / run_layout.CONFIG_FILE, "a record run's config", "config.toml")
    events_path = folder / run_layout.EVENTS_FILE
    events = read_events(events_path) if events_path.is_file() else []
    return RecordRun(folder, state, config, events)


def main(argv: list[str] | None = None) -> int:
    """Print each run folder's learning curve (the script's use, in the module docstring)."""
    parser = argparse.ArgumentParser(
        description="Print each record run's learning curve: per epoch, the lr, then the median "
        f"training ppl of its last {CURVE_TRAIN_LINES} train events / the validation ppl."
    )
    parser.add_argument("runs", nargs="+", type=Path, help="a record's run folders")
    parser.add_argument(
        "--sessions",
        action="store_true",
        help="print each run's starts (UTC time, commit, clean or not) and stops instead",
    )
    args = parser.parse_args(argv)
    try:
        for folder in args.runs:
            run = read_record_run(folder)
            print(f"- {folder.name}: {run.sessions_text() if args.sessions else run.curve_text()}")
    except (ConfigError, ckpt.CheckpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
