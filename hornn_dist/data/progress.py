"""How data preparation shows its progress: a tqdm bar on a terminal, and plain log lines now
and then where the output is redirected to a file (a batch job's log), so that a long
preparation of a large corpus is never silent."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from hornn_dist.util.wording import fmt_duration

log = logging.getLogger(__name__)

LINES = "lines"  # `progress` value: log lines, not a bar
LINE_EVERY_S = 30.0  # at most one line per this many seconds of one step


def on_terminal() -> bool:
    """Return whether stderr, where bars are drawn, is a terminal."""
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def progress_meter(progress: bool | str, desc: str, total: int | None) -> Any:
    """Return the meter of one step of preparation (`update(bytes)`, a context manager): a
    tqdm bar (`progress` true), log lines (`LINES`), or nothing (false)."""
    if progress == LINES:
        return ProgressLines(desc, total)
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        disable=not progress,
        # on a terminal a done step leaves no bar; in a file (log.progress = true) its last
        # state ends its line, so that the next line (an error's, say) starts one
        leave=not on_terminal(),
    )


def mib(n: float) -> str:
    """Return a byte count as "12.3 MiB"."""
    return f"{n / 2**20:,.1f} MiB"


class ProgressLines:
    """A bar's `update` as log lines: `desc: 312.0 MiB of 1,200.0 MiB (26%), 1m10s left` at
    most every `every` seconds, and one line at the end of a step that printed any."""

    def __init__(
        self,
        desc: str,
        total: int | None,
        every: float | None = None,  # None: LINE_EVERY_S
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.desc, self.total, self.clock = desc, total, clock
        self.every = LINE_EVERY_S if every is None else every
        self.done = 0
        self.started = self.last = clock()
        self.lines = 0

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        """Count `n` more bytes done; log a line when `every` seconds passed since the last."""
        self.done += n
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            self.lines += 1
            log.info("%s", self.line(now))

    def line(self, now: float) -> str:
        """Return where the step is: done, of the total, and the time left at the rate so far."""
        if not self.total:
            return f"{self.desc}: {mib(self.done)} so far ({fmt_duration(now - self.started)})"
        rate = self.done / max(now - self.started, 1e-9)
        left = max(self.total - self.done, 0) / max(rate, 1e-9)
        share = self.done / self.total
        return (
            f"{self.desc}: {mib(self.done)} of {mib(self.total)} ({share:.0%}), "
            f"{fmt_duration(left)} left"
        )

    def close(self) -> None:
        """End the step: one closing line when it printed any."""
        if self.lines:
            log.info(
                "%s: done, %s in %s",
                self.desc,
                mib(self.done),
                fmt_duration(self.clock() - self.started),
            )
            self.lines = 0
