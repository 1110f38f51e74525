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
import logging
import math
import time
from pathlib import Path
from typing import IO, Any

from hornn_dist.run.run_layout import EVENTS_FILE
from hornn_dist.util.files import open_for_writing

STOP_CODES = ("converged", "max_steps", "epochs", "signal")

logger = logging.getLogger(__name__)
_WARNED: set[tuple[str, int, int]] = set()  # the files read_events warned about


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
    """Return the events of a metrics.jsonl in order: the JSON objects with an `event` name.

    A line a killed write cut short (not JSON; a resumed run appends after it) is left out
    quietly; any other line that is not an event (not UTF-8, or JSON such as `42` or
    `{"x": 1}`: written by something else) is left out with one warning naming the file and
    its lines."""
    events, foreign = [], []
    data = Path(path).read_bytes()
    for number, raw in enumerate(data.splitlines(), 1):
        try:  # json.dumps writes ASCII: a kill never cuts a line mid-character
            event = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            foreign.append(f"{number} (not UTF-8)")
            continue
        except json.JSONDecodeError:
            continue  # a killed write's partial line
        if isinstance(event, dict) and isinstance(event.get("event"), str):
            events.append(event)
        else:
            foreign.append(f"{number} (not an event object)")
    seen = (str(Path(path).resolve()), len(data), hash(data))
    if foreign and seen not in _WARNED:  # once per file as it is, however many readers read it
        _WARNED.add(seen)
        logger.warning(
            "%s: skipped %s: %s (not written by the trainer)",
            path,
            "line" if len(foreign) == 1 else "lines",
            ", ".join(foreign),
        )
    return events
