"""The run's own log file: the main process's log lines appended to `output_dir/train.log`.

Lines logged before the run folder is known (preparing the corpus) are held in memory and
written once the folder is taken, after a separator line that says how the run started (fresh,
or resumed from which checkpoint). When stderr already writes into that file (a sweep hands
each run's console to it, or `2>> runs/demo/train.log`), the console lines are the log and no
second handler writes them again.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
import time
import traceback
from pathlib import Path

from hornn_dist.run.run_layout import RUN_LOG
from hornn_dist.util.errors import HornnError, first_line
from hornn_dist.util.files import open_for_writing

FORMAT = "%(asctime)s %(levelname)s %(message)s"


def stderr_writes_to(path: Path) -> bool:
    """Return whether this process's stderr is the file at `path` already."""
    try:
        ours, theirs = os.fstat(sys.stderr.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):  # no such file, or stderr is not a real file
        return False
    return (ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino)


class RunLog:
    """Appends the main process's log to `output_dir/train.log` from `open()` to `close()`."""

    def __init__(self, is_main: bool) -> None:
        self.is_main = is_main
        self.path: Path | None = None
        self._file: logging.Handler | None = None
        self._buffer: logging.handlers.MemoryHandler | None = None
        if is_main:  # hold the lines logged before the run folder is known
            self._buffer = logging.handlers.MemoryHandler(capacity=100_000, flushLevel=100)
            self._buffer.setLevel(logging.INFO)
            logging.getLogger().addHandler(self._buffer)

    def open(self, output_dir: Path, started: str) -> None:
        """Start appending to output_dir/train.log: a separator line saying how the run
        `started`, then the held lines, then every line logged until `close()`."""
        if not self.is_main:
            return
        self.path = output_dir / RUN_LOG
        stream = open_for_writing(self.path, append=True, binary=False)  # never through a link
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        separator = f"===== {stamp} {started} ====="
        if stderr_writes_to(self.path):  # the console is the log already
            stream.close()
            print(separator, file=sys.stderr, flush=True)
            self._drop_buffer()
            return
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter(FORMAT, datefmt="%H:%M:%S"))
        handler.setLevel(logging.INFO)
        handler.stream.write(separator + "\n")
        if self._buffer is not None:
            self._buffer.setTarget(handler)
            self._buffer.flush()
        self._drop_buffer()
        logging.getLogger().addHandler(handler)
        self._file = handler

    def failed(self, err: BaseException) -> None:
        """Write how the run failed: the one-line `error:` of a user-facing error, else the
        traceback (the console gets them from the CLI as usual)."""
        if self._file is None:
            return
        if isinstance(err, HornnError):
            text = f"error: {first_line(err)}\n"
        elif isinstance(err, KeyboardInterrupt):  # a second Ctrl-C: no traceback, as on screen
            text = f"interrupted: {err}\n" if str(err) else "interrupted\n"
        else:
            text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        self._file.acquire()
        try:
            self._file.stream.write(text)
            self._file.flush()
        finally:
            self._file.release()

    def close(self) -> None:
        """Stop writing to train.log (and drop lines still held)."""
        self._drop_buffer()
        if self._file is not None:
            logging.getLogger().removeHandler(self._file)
            self._file.close()
            self._file.stream.close()  # a StreamHandler leaves its stream open
            self._file = None

    def _drop_buffer(self) -> None:
        if self._buffer is not None:
            logging.getLogger().removeHandler(self._buffer)
            self._buffer.setTarget(None)
            self._buffer.close()
            self._buffer = None
