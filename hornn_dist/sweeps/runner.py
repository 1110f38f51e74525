"""Run a sweep's training runs as ordinary `hornn_dist.train` processes, one per slot at a time.

A slot is one GPU (`CUDA_VISIBLE_DEVICES=i`, one run per GPU at a time) or, without GPUs, a
share of the CPU cores (`OMP_NUM_THREADS` = cores / jobs, so concurrent runs do not fight over
the same cores). A finished run is skipped; an unfinished one resumes from its checkpoints (the
trainer's own resume). Each run's output goes to `output_dir/NAME/train.log`; the sweep prints
one line as a run starts and one as it ends, with the sweep's time left (`time_left`: the
epochs left at the seconds per epoch of its runs so far). A failed run is reported and the
sweep goes on.
SIGINT/SIGTERM are passed to the running runs, which checkpoint and exit, and the sweep stops.
One sweep at a time per output_dir: a second one is refused with one line (`SWEEP_LOCK`, held
for the life of the sweep; the kernel drops it when the sweep ends in any way).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from hornn_dist.run.lock import RunLock
from hornn_dist.run.run_layout import RUN_LOG
from hornn_dist.sweeps.params import (
    fmt_params,
    recurrent_parameters,
    total_parameters,
    vocabulary_size,
)
from hornn_dist.sweeps.results import read_run
from hornn_dist.sweeps.sweep_file import RUNS_FILE, PlannedRun, SweepPlan
from hornn_dist.util.files import open_for_writing, write_json
from hornn_dist.util.wording import counted, fmt_duration

logger = logging.getLogger("hornn_dist.sweep")

SWEEP_LOCK = ".sweep.lock"  # in output_dir, held by the sweep that trains there


@dataclass
class SweepOutcome:
    """How many runs of a sweep ended which way."""

    finished: int = 0
    skipped: int = 0  # finished before this sweep started
    failed: int = 0
    left_out: int = 0  # not selected by `sweep --only`
    interrupted: bool = False


@dataclass
class _Running:
    run: PlannedRun
    index: int
    slot: int
    process: subprocess.Popen
    started: float
    log: object


def run_sweep(
    plan: SweepPlan,
    slots: list[dict[str, str]],
    poll_seconds: float = 1.0,
    only: frozenset[str] | None = None,
) -> SweepOutcome:
    """Train every run of `plan` not finished yet (of those named in `only`, `select_runs`'s
    answer to `--only`, where given), one per slot (`slots`: each one's extra environment, from
    `gpu_slots` or `cpu_slots`) at a time; return the outcome. Call it inside
    `sweep_lock(plan)`."""
    write_json(plan.output_dir / RUNS_FILE, plan.record())  # every run: report reads the plan
    outcome = SweepOutcome()
    todo: list[tuple[int, PlannedRun, bool]] = []  # (index, run, resuming)
    total = len(plan.runs)
    for index, run in enumerate(plan.runs, 1):
        if only is not None and run.name not in only:
            outcome.left_out += 1
            logger.info("[%d/%d] %s: not selected by --only, left as it is", index, total, run.name)
            continue
        record = read_run(plan.output_dir / run.name, planned=run.config)
        if record is not None and record.finished:
            outcome.skipped += 1
            logger.info(
                "[%d/%d] %s: already finished (test ppl %.2f), skipped",
                index,
                total,
                run.name,
                record.test_ppl,
            )
        else:
            todo.append((index, run, record is not None))
    free = list(range(len(slots)))
    running: list[_Running] = []
    stop = _SignalForwarder(lambda: [r.process for r in running])
    with stop:
        while (todo and not stop.requested) or running:
            while todo and free and not stop.requested:
                index, run, resuming = todo.pop(0)
                running.append(_start(plan, run, index, total, resuming, free.pop(0), slots))
            time.sleep(poll_seconds)
            for item in [r for r in running if r.process.poll() is not None]:
                running.remove(item)
                free.append(item.slot)
                left = "" if stop.requested else f"; sweep: {time_left(plan, len(slots), only)}"
                _report_end(plan, item, total, outcome, stop.requested, left)
    outcome.interrupted = stop.requested
    return outcome


def size_note(run: PlannedRun) -> str:
    """Return a run's size for the sweep's log: H, E and its total and recurrent parameter
    counts (the total once its corpus is prepared: it needs the vocabulary), and the run
    match_params sized it to."""
    model = run.config.model
    vocab = vocabulary_size(run.config.data, prepare=False)
    total = total_parameters(model, vocab) if vocab else None
    note = (
        f"H {model.hidden_size}, E {model.embedding_size or model.hidden_size}: "
        f"{fmt_params(total, recurrent_parameters(model))}"
    )
    return note + (f" (match_params: sized to {run.matched_to})" if run.matched_to else "")


@contextmanager
def sweep_lock(plan: SweepPlan) -> Iterator[None]:
    """Hold the output_dir of `plan` for one sweep: raise ConfigError (one line), having
    written nothing, when another sweep holds it."""
    lock = RunLock(
        plan.output_dir,
        SWEEP_LOCK,
        "in use by another sweep ({holder}); wait for it to end, or give this sweep another "
        "output_dir",
    )
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


@dataclass
class Left:
    """What is left of a sweep: its runs to train and their epochs, and a time estimate."""

    to_train: int  # runs not finished (of those selected)
    finished: int
    epochs: float  # up to: each run's train.epochs less the epochs it has trained
    per_epoch: float | None  # seconds per epoch of the runs so far (None: none trained one)
    at_once: int  # runs trained at a time

    @property
    def seconds(self) -> float | None:
        """Return the time the epochs left take at `per_epoch`, `at_once` at a time."""
        return None if self.per_epoch is None else self.per_epoch * self.epochs / self.at_once


def sweep_left(plan: SweepPlan, jobs: int, only: frozenset[str] | None = None) -> Left:
    """Return what is left of `plan` (of the runs in `only`, where given) with `jobs` runs at a
    time, timed by the seconds per epoch of every run that trained one (its newest checkpoint)."""
    to_train, finished, epochs, seconds, done_epochs = 0, 0, 0.0, 0.0, 0.0
    for run in plan.runs:
        record = read_run(plan.output_dir / run.name, planned=run.config)
        if record is not None and record.train_seconds > 0 and record.epochs > 0:
            seconds += record.train_seconds
            done_epochs += record.epochs
        if only is not None and run.name not in only:
            continue
        if record is not None and record.finished:
            finished += 1
        else:
            to_train += 1
            epochs += max(run.config.train.epochs - (record.epochs if record else 0.0), 0.0)
    per_epoch = seconds / done_epochs if done_epochs else None
    at_once = max(1, min(jobs, to_train))  # more jobs than runs: the rest wait idle
    return Left(to_train, finished, epochs, per_epoch, at_once)


def time_left(plan: SweepPlan, jobs: int, only: frozenset[str] | None = None) -> str:
    """Return the sweep's time left in words, for a run's end line: its runs and epochs to
    train, and how long they take at the seconds per epoch so far (an upper bound: a run that
    converges stops sooner)."""
    left = sweep_left(plan, jobs, only)
    if not left.to_train:
        return "every run trained"
    line = (
        f"{counted(left.to_train, 'run')} to train, up to {counted(round(left.epochs, 1), 'epoch')}"
    )
    if left.seconds is None or left.per_epoch is None:
        return line + ", no time estimate until a run has trained an epoch"
    return (
        f"{line}, at most about {fmt_duration(left.seconds)} left at {left.at_once} at a time "
        f"({fmt_duration(left.per_epoch)} per epoch so far)"
    )


def dry_run_summary(plan: SweepPlan, jobs: int, only: frozenset[str] | None = None) -> str:
    """Return what a sweep would train: its runs and epochs (each run's train.epochs, less the
    epochs it has trained; of the runs in `only`, where given), and a time estimate from the
    seconds per epoch of its runs that trained one already, or, before any has, a plain
    statement that there is none yet (a guess from a few timed steps would cost a corpus and a
    model per run, and say little of the epochs a run takes to converge)."""
    left = sweep_left(plan, jobs, only)
    left_out = len(plan.runs) - left.to_train - left.finished
    line = (
        f"dry run: {counted(len(plan.runs), 'run')} in {plan.output_dir}, "
        f"{left.to_train} to train ({left.finished} finished"
        f"{f', {left_out} not selected by --only' if left_out else ''}): "
        f"up to {counted(round(left.epochs, 1), 'epoch')}"
        " in all (train.epochs; a run that converges stops sooner)"
    )
    if left.seconds is not None and left.per_epoch is not None and left.epochs:
        line += (
            f"; about {fmt_duration(left.seconds)} at {left.at_once} at a time, from "
            f"{fmt_duration(left.per_epoch)} per epoch in the runs trained so far"
        )
    elif left.epochs:
        line += (
            "; no time estimate yet: none of its runs has trained an epoch to time (run the "
            "sweep; after its first epoch, --dry-run estimates from the seconds per epoch)"
        )
    return line


def gpu_slots(gpus: int) -> list[dict[str, str]]:
    """Return one slot per GPU (a single slot, the default device, for one GPU)."""
    return [{"CUDA_VISIBLE_DEVICES": str(i)} for i in range(gpus)] if gpus > 1 else [{}]


def cpu_slots(jobs: int, cores: int) -> list[dict[str, str]]:
    """Return `jobs` slots sharing `cores` CPU cores (at least one thread each)."""
    if jobs <= 1:
        return [{}]
    return [{"OMP_NUM_THREADS": str(max(1, cores // jobs))} for _ in range(jobs)]


def train_command(plan: SweepPlan, run: PlannedRun) -> list[str]:
    """Return the command line that trains one run of the sweep."""
    command = [sys.executable, "-m", "hornn_dist.train", str(run.base)]
    for item in (*run.overrides, f"train.output_dir={plan.output_dir / run.name}"):
        command += ["--set", item]
    return command


def _start(
    plan: SweepPlan,
    run: PlannedRun,
    index: int,
    total: int,
    resuming: bool,
    slot: int,
    slots: list[dict],
) -> _Running:
    folder = plan.output_dir / run.name
    folder.mkdir(parents=True, exist_ok=True)
    log = open_for_writing(folder / RUN_LOG, append=True, binary=False)  # closed at the end
    env_slot = slots[slot]
    if "CUDA_VISIBLE_DEVICES" in env_slot:
        where = f" on GPU {env_slot['CUDA_VISIBLE_DEVICES']}"
    elif "OMP_NUM_THREADS" in env_slot:
        where = f" with {env_slot['OMP_NUM_THREADS']} CPU thread(s)"
    else:
        where = ""
    logger.info(
        "[%d/%d] %s: %s%s, %s (log: %s)",
        index,
        total,
        run.name,
        "resuming" if resuming else "training",
        where,
        size_note(run),
        folder / RUN_LOG,
    )
    env = {**os.environ, **slots[slot]}
    process = subprocess.Popen(
        train_command(plan, run),
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # a terminal's Ctrl-C reaches the sweep, which passes it on once
    )
    return _Running(run, index, slot, process, time.monotonic(), log)


def _report_end(
    plan: SweepPlan, item: _Running, total: int, outcome: SweepOutcome, stopping: bool, left: str
) -> None:
    """Say how a run ended, and then `left`: the sweep's time left."""
    item.log.close()
    took = fmt_duration(time.monotonic() - item.started)
    folder = plan.output_dir / item.run.name
    code = item.process.returncode
    record = read_run(folder, planned=item.run.config)
    prefix = f"[{item.index}/{total}] {item.run.name}"
    if code == 0 and record is not None and record.finished:
        outcome.finished += 1
        logger.info(
            "%s: done in %s: best valid ppl %.2f, test ppl %.2f (best checkpoint), %.1f epochs "
            "(%s); %s%s",
            prefix,
            took,
            record.best_valid_ppl,
            record.test_ppl,
            record.epochs,
            record.stop_reason,
            fmt_params(record.parameters, recurrent_parameters(record.config.model)),
            left,
        )
    elif code == 0:  # stopped with a checkpoint: by the sweep's stop, or on its own (a signal)
        if not stopping:  # not finished, and nothing asked it to stop
            outcome.failed += 1
        logger.log(
            logging.INFO if stopping else logging.ERROR,
            "%s: stopped after %s with a checkpoint, not finished; the next sweep resumes it%s",
            prefix,
            took,
            left,
        )
    else:
        outcome.failed += 1
        logger.error(
            "%s: FAILED (exit %s) after %s: %s; see %s%s",
            prefix,
            code,
            took,
            _last_error(folder / RUN_LOG),
            folder / RUN_LOG,
            left,
        )


def _last_error(log: Path) -> str:
    """Return the run log's last `error:` line, else its last line."""
    try:
        lines = [
            line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()
        ]
    except OSError:
        return "no log"
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["empty log"])[-1][:300]


class _SignalForwarder:
    """Within its block, SIGINT/SIGTERM set `requested` and reach each running run once."""

    def __init__(self, processes: Callable[[], list[subprocess.Popen]]) -> None:
        self.processes = processes
        self.requested = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _SignalForwarder:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.requested:
            logger.info(
                "%s received: the running runs checkpoint and stop; run the sweep again to go on",
                signal.Signals(signum).name,
            )
        self.requested = True
        for process in self.processes():
            if process.poll() is None:
                process.send_signal(signum)
