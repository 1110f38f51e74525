"""A run's events as data: `output_dir/metrics.jsonl`, one JSON object per line, appended.

train.log is for people; this file is for programs (a report, a plot, your own script), so that
no reader parses a log line. The main process writes, from the run's start to its end, each
object with its `event` and the unix `time`:

    start  step (0, or the step resumed from), started, processes, device, mixed_precision,
           parameters, steps_per_epoch, vocabulary, init (the init rule in words, with the
           stds it resolved to), clip_mode, clip (what optim.clip_mode "auto" resolved to),
           code (commit and dirty, hornn_dist.util.provenance), versions (hornn_dist, torch),
           hardware (e.g. "Intel Xeon ... (1 thread)"), config (the resolved config, as TOML
           reads it)
    train  step, epoch, loss, ppl, lr, tokens_per_sec, grad_norm, path_grad_norms (name: value),
           epoch_seconds_left, run_seconds_left (at this speed; null: no train.epochs or max_steps)
    valid  step, epoch, loss, ppl, lr (for the next steps), best
    test   step, checkpoint, loss, ppl, tokens, last_loss, last_ppl
    stop   step, code (converged | max_steps | epochs | signal), signal (its name, or ""),
           reason

Non-finite numbers are written as null (JSON has no NaN). A resumed run appends; its `start`
says where it resumed, and a reader keeps, per step, the last object written.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import IO, Any

from hornn_dist.run.run_layout import EVENTS_FILE
from hornn_dist.util.files import open_for_writing

STOP_CODES = ("converged", "max_steps", "epochs", "signal")


def _plain(value: Any) -> Any:
    """Return `value` with every non-finite float as None (JSON has no NaN or infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


class EventLog:
    """Appends a run's events to `output_dir/metrics.jsonl` (main process) from `open()` to
    `close()`; a no-op elsewhere and before `open()`."""

    def __init__(self, is_main: bool) -> None:
        self.is_main = is_main
        self.path: Path | None = None
        self._stream: IO[str] | None = None

    def open(self, output_dir: Path) -> None:
        """Start appending to output_dir/metrics.jsonl (never through a link)."""
        if not self.is_main:
            return
        self.path = Path(output_dir) / EVENTS_FILE
        self._stream = open_for_writing(self.path, append=True, binary=False)

    def write(self, event: str, **fields: Any) -> None:
        """Append one event object and flush it, so that a reader sees it at once."""
        if self._stream is None:
            return
        if event == "stop" and fields.get("code") not in STOP_CODES:
            raise ValueError(f"stop code {fields.get('code')!r} is not one of {STOP_CODES}")
        line = json.dumps({"event": event, "time": round(time.time(), 3), **_plain(fields)})
        self._stream.write(line + "\n")
        self._stream.flush()

    def close(self) -> None:
        """Stop appending."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None


def read_events(path: Path) -> list[dict[str, Any]]:
    """Return the events of a metrics.jsonl in order (a last line cut short by a kill is left
    out)."""
    events = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # only a killed write leaves a partial line, and only the last
    return events
