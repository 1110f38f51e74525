"""Where a run's scalars and hyper-parameters go: Accelerate's trackers, named by log.trackers.

TensorBoard is Accelerate's tracker by name (its folder `output_dir/tensorboard/<start>`, its
hyper-parameters written by `dashboard.py`). Every other tracker is built here, so that it
gets a project named `hornn_dist` and a run named after the output_dir (Accelerate would name
both after the TensorBoard folder), and its hyper-parameters through its own
`store_init_configuration`. The packages are optional (pyproject extras of the same names).

Every tracker but TensorBoard (local files, checked writable before the run) runs behind a
`Guarded` wrapper: its calls run on a thread of its own, in order; the run waits for its start
and its final flush at most WAIT_S seconds each (and no longer once a stop signal came), never
for a log call. A tracker that fails to
start or to log, or does not answer in time, is one warning line and the run goes on without it
(its scalars are still in TensorBoard and train.log). mlflow without MLFLOW_TRACKING_URI writes
a file store inside the run folder (`output_dir/mlruns`), not mlflow's default `./mlflow.db`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelerate.tracking import LOGGER_TYPE_TO_CLASS, GeneralTracker

from hornn_dist.config import TRACKER_MODULES
from hornn_dist.run.run_layout import MLFLOW_STORE
from hornn_dist.runtime import skip_exit_handlers
from hornn_dist.util.errors import ConfigError, described

logger = logging.getLogger(__name__)

PROJECT = "hornn_dist"  # the project (wandb), experiment (mlflow), ... of every run
# how each tracker is told the run's name (Accelerate passes the rest to the package's init)
RUN_NAME_KEY = {"wandb": "name", "mlflow": "run_name", "comet_ml": "experiment_name"}
# seconds the run waits for a tracker's start, and for its last values at the end, before it goes
# on without it; a stop signal ends the wait within STOP_POLL_S
WAIT_S = 20.0
STOP_POLL_S = 0.1


def require_installed(names: list[str]) -> None:
    """Raise ConfigError (one line naming the extra) for the first tracker not installed."""
    for name in names:
        if importlib.util.find_spec(TRACKER_MODULES[name]) is None:
            raise ConfigError(
                f"log.trackers names {name}, which is not installed: pip install "
                f"'hornn-dist[{name}]' (or take {name} out of log.trackers)"
            )


def build_trackers(
    names: list[str], output_dir: Path, stop: threading.Event | None = None
) -> list[Any]:
    """Return what `Accelerator(log_with=...)` takes for `names`: "tensorboard" as a name, every
    other tracker as an instance named for this run (checked installed first), whose waits end
    when `stop` is set."""
    require_installed(names)
    out: list[Any] = []
    for name in names:
        if name == "tensorboard":
            out.append(name)
            continue
        cls = LOGGER_TYPE_TO_CLASS[name]
        kwargs: dict[str, Any] = {}
        if name in RUN_NAME_KEY:
            kwargs[RUN_NAME_KEY[name]] = Path(output_dir).resolve().name
        if name == "wandb":
            kwargs["dir"] = str(output_dir)  # its files beside the run's, not in the cwd
        if name == "mlflow" and not os.environ.get("MLFLOW_TRACKING_URI"):
            # mlflow 3's default is ./mlflow.db (sqlite, which mlflow-skinny cannot open)
            store = (Path(output_dir) / MLFLOW_STORE).absolute()
            os.environ["MLFLOW_TRACKING_URI"] = store.as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3 asks for it
        if cls.requires_logging_directory:
            tracker = cls(PROJECT, str(output_dir), **kwargs)
        else:
            tracker = cls(PROJECT, **kwargs)
        out.append(Guarded(tracker, stop))
    return out


class Guarded(GeneralTracker):
    """A tracker whose calls run in order on a thread of its own: `start` and `finish` wait at
    most WAIT_S seconds, `log` and `store_init_configuration` not at all; the first failure or
    timeout is one warning and the tracker is dropped (the run goes on without it)."""

    requires_logging_directory = False

    def __init__(self, inner: Any, stop: threading.Event | None = None) -> None:
        super().__init__(_blank=True)
        self.inner = inner
        self.stop = stop or threading.Event()  # a stop signal: wait no longer
        self.name = inner.name
        self.main_process_only = getattr(inner, "main_process_only", True)
        self._calls: queue.SimpleQueue[tuple[str, Callable[[], Any], threading.Event]] = (
            queue.SimpleQueue()
        )
        self._dropped = False
        self._dropping = threading.Lock()  # the worker's failure and the run's timeout: one line
        self._thread: threading.Thread | None = None

    @property
    def tracker(self) -> Any:
        """The package's own run object (Accelerate's `get_tracker(name, unwrap=True)`)."""
        return self.inner.tracker

    def start(self) -> None:
        """Start the tracker's run; wait for it at most WAIT_S seconds."""
        self._thread = threading.Thread(target=self._work, name=f"tracker-{self.name}", daemon=True)
        self._thread.start()
        self._wait(self._call("start", self.inner.start), "at start")

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Queue the run's hyper-parameters."""
        self._call(
            "store its hyper-parameters", lambda: self.inner.store_init_configuration(values)
        )

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Queue `values` at `step`."""
        self._call("log", lambda: self.inner.log(values, step=step, **kwargs))

    def finish(self) -> None:
        """Close the tracker's run after the queued calls; wait at most WAIT_S seconds."""
        if self._thread is not None:
            self._wait(self._call("finish", self.inner.finish), "sending its last values")

    def _call(self, what: str, fn: Callable[[], Any]) -> threading.Event:
        """Queue `fn` (nothing once dropped); return the event set when it has run."""
        done = threading.Event()
        if self._dropped or self._thread is None:
            done.set()
        else:
            self._calls.put((what, fn, done))
        return done

    def _wait(self, done: threading.Event, doing: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not done.wait(STOP_POLL_S):
            if self._dropped:
                return
            if self.stop.is_set():
                self._drop(f"had not answered when a stop signal came ({doing})")
                return
            if time.monotonic() >= deadline:
                self._drop(f"did not answer within {WAIT_S:g} s ({doing})")
                return

    def _work(self) -> None:
        while True:
            what, fn, done = self._calls.get()
            try:
                if not self._dropped:
                    fn()
            except Exception as err:  # a package's errors have many types; each is one line
                self._drop(f"failed to {what} ({described(err, 200)})")
            finally:
                done.set()

    def _drop(self, why: str) -> None:
        with self._dropping:
            if self._dropped:
                return
            self._dropped = True
        logger.warning("log.trackers: %s %s; the run goes on without it", self.name, why)
        skip_exit_handlers()  # the package's own at-exit calls would wait on it again


def describe_run(trackers: list[Any], hparams: dict[str, Any]) -> None:
    """Store the run's hyper-parameters in every tracker but TensorBoard (dashboard.py's)."""
    for tracker in trackers:
        if tracker.name != "tensorboard":
            tracker.store_init_configuration(hparams)
