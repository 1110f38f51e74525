"""What a training run left behind, read back: its config and its newest checkpoint's trainer state."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hornn_dist.config import RunConfig
from hornn_dist.data.pipeline import corpus_folder
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.resume import completion
from hornn_dist.run.run_layout import CONFIG_FILE, EVENTS_FILE
from hornn_dist.run.run_state import STATE_FILE, StateVersionError, TrainerState
from hornn_dist.sweeps.sweep_file import RUNS_FILE, run_name_problem
from hornn_dist.training.events import read_events
from hornn_dist.training.metrics import perplexity
from hornn_dist.util.errors import ConfigError, HornnError


@dataclass
class RunRecord:
    """One run of a sweep as its newest checkpoint tells it."""

    name: str
    folder: Path
    config: RunConfig
    model: str = ""  # the sweep's name for the model (without the recipe)
    recipe: str = ""
    finished: bool = False  # epochs, max_steps or convergence reached, test scored
    step: int = 0
    epochs: float = 0.0
    best_valid_ppl: float = math.inf
    test_ppl: float = math.nan  # the run's: its best checkpoint's by validation (test_checkpoint)
    test_checkpoint: str = ""  # the checkpoint test_ppl scored ("" before the run's end)
    last_test_ppl: float = math.nan  # the last weights'
    parameters: int = 0
    tokens_per_sec: float = 0.0
    train_seconds: float = 0.0
    hardware: str = ""
    stop_reason: str = ""  # the sentence, for people; programs read stop_code
    stop_code: str = ""  # converged | max_steps | epochs | signal ("" while it trains)
    stop_signal: str = ""  # the signal's name when stop_code is "signal" ("" where unknown)
    valid_history: list[dict[str, float]] = field(default_factory=list)
    final_lr: float = math.nan  # the lr its last epoch trained at
    halvings: int = 0  # of the lr, by the schedule
    damage: str = ""  # its newer checkpoints that are damaged, and what is wrong with each
    corpus: str = ""  # the prepared corpus it trained on: its folder's name (`corpus_folder`)
    corpus_hash: str = ""  # and the hash of its manifest
    sweep_corpus: str = ""  # the sweep's [corpora] entry it trained on ("" without one)


def read_run(
    folder: Path,
    name: str = "",
    model: str = "",
    recipe: str = "",
    planned: RunConfig | None = None,
) -> RunRecord | None:
    """Return the record of the run in `folder` from its newest checkpoint that reads, or None
    when it has none (`run_damage` says why, where its checkpoints are damaged); `finished`
    judged by `planned` (a sweep's config for it now) or else the run's own config."""
    found, damaged = _newest_readable(folder)
    if found is None:
        return None
    config, state = found
    history = state.valid_history
    test, last = state.test or {}, state.test_last or {}
    return RunRecord(
        name=name or folder.name,
        folder=folder,
        config=config,
        model=model or folder.name,
        recipe=recipe,
        finished=bool(completion(state, planned or config)),
        step=state.step,
        epochs=float(history[-1]["epoch"]) if history else float(state.epoch),
        best_valid_ppl=perplexity(state.best_valid, 1),  # best_valid is a mean loss
        test_ppl=float(test.get("ppl", math.nan)),
        test_checkpoint=state.test_checkpoint,
        last_test_ppl=float(last.get("ppl", math.nan)),
        parameters=state.parameters,
        tokens_per_sec=float(state.tokens_per_sec),
        train_seconds=float(state.train_seconds),
        hardware=state.hardware,
        stop_reason=state.stop_reason,
        **dict(zip(("stop_code", "stop_signal"), stop_of(folder, state), strict=True)),
        valid_history=history,
        final_lr=_final_lr(state.schedule, config),
        halvings=int(state.schedule.get("halvings", 0) or 0),
        damage="; ".join(damaged),
        corpus=corpus_folder(config.data).name,
        corpus_hash=state.corpus_hash,
    )


def stop_of(folder: Path, state: TrainerState) -> tuple[str, str]:
    """Return how a run stopped, as a code of `events.STOP_CODES`, and the signal's name: its
    metrics.jsonl's stop event at the state's step (("", "") while it trains, or without one),
    never the wording of its stop reason."""
    events = folder / EVENTS_FILE
    stops = [e for e in read_events(events) if e["event"] == "stop"] if events.is_file() else []
    if stops and stops[-1].get("step") == state.step:
        return str(stops[-1]["code"]), str(stops[-1].get("signal") or "")
    return "", ""


def _newest_readable(folder: Path) -> tuple[tuple[RunConfig, TrainerState] | None, list[str]]:
    """Return (config, trainer state) of the run's newest checkpoint whose files are all there
    and whose state and config verify and read (None if none does), and what is wrong with each
    newer checkpoint folder, newest first; a folder without checkpoints that holds a
    trainer_state.json and config.toml (a run kept in a benchmark record, whose fair tables,
    speed rows and grid listings read it here) reads from those."""
    damaged: list[str] = []
    for step in reversed(ckpt.step_folders(folder) if folder.is_dir() else []):
        problem = ckpt.problem_with(step, deep=False) or ckpt.problem_with(
            step, deep=True, only=(STATE_FILE, CONFIG_FILE)
        )
        if problem is None:
            try:
                return (ckpt.read_config(step), TrainerState.read(step)), damaged
            except StateVersionError:  # not damage: the run is one an older commit reports
                raise
            except HornnError as err:
                problem = str(err)
        damaged.append(f"checkpoint {step.name} is damaged: {problem}")
    if not damaged and (folder / STATE_FILE).is_file() and (folder / CONFIG_FILE).is_file():
        # a run as a benchmark record keeps it: its last state and config, no checkpoint
        return (ckpt.read_config(folder), TrainerState.read(folder)), damaged
    return None, damaged


def run_damage(folder: Path) -> str:
    """Return what is wrong with the checkpoints of the run in `folder` newer than the newest
    one that reads ("" when none is damaged)."""
    return "; ".join(_newest_readable(folder)[1])


def _final_lr(schedule: dict[str, Any], config: RunConfig) -> float:
    """Return the lr a run's last epoch trained at: the schedule's `epoch_lr` (0 before its
    first epoch ends: the initial lr then)."""
    lr = float(schedule.get("epoch_lr", 0.0))
    return lr if lr > 0 else float(config.optim.lr)


def read_runs(runs_dir: Path) -> list[RunRecord]:
    """Return the records of every run under `runs_dir` that has a checkpoint: the sweep's runs
    in its order when runs_dir holds a sweep.json, the run itself when runs_dir is one run's
    output_dir, else every sub-folder by name."""
    sweep = read_sweep_record(runs_dir)
    if sweep:
        entries: list[dict[str, Any]] = sweep["runs"]
    elif ckpt.checkpoint_root(runs_dir).is_dir():  # a single run's own folder
        record = read_run(runs_dir)
        return [record] if record is not None else []
    else:
        entries = [{"name": p.name} for p in sorted(runs_dir.iterdir()) if p.is_dir()]
    records = []
    for entry in entries:
        record = read_run(
            runs_dir / entry["name"], entry["name"], entry.get("model", ""), entry.get("recipe", "")
        )
        if record is not None:
            records.append(replace(record, sweep_corpus=str(entry.get("corpus", ""))))
    return records


def read_sweep_record(runs_dir: Path) -> dict:
    """Return the sweep.json of `runs_dir` ({} without one); raise ConfigError (one line) when
    the folder is missing or the file unreadable."""
    if not runs_dir.is_dir():
        what = "is a file, not a folder" if runs_dir.exists() else "not found"
        raise ConfigError(
            f"runs folder {runs_dir} {what}; pass the output_dir of a sweep, "
            "e.g. runs/sweeps/demo_orders"
        )
    listing = runs_dir / RUNS_FILE
    if not listing.is_file():
        return {}
    try:
        record = json.loads(listing.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(
            f"{listing} is unreadable ({err}); run the sweep again to rewrite it"
        ) from None
    if not isinstance(record, dict) or not isinstance(record.get("runs"), list):
        raise ConfigError(f"{listing} has no list of runs; run the sweep again to rewrite it")
    for index, entry in enumerate(record["runs"]):
        name = entry.get("name") if isinstance(entry, dict) else None
        if name is None:
            problem = f"run {index} ({entry!r:.80}) is not a table with a name"
        elif run_name_problem(name):  # a name such as ../x or /x reads outside runs_dir
            problem = f"run {index}'s name {name!r:.80} {run_name_problem(name)}"
        else:
            continue
        raise ConfigError(f"{listing}: {problem}; run the sweep again to rewrite it")
    return record
