"""`accelerate launch` without torchrun's noise: `python -m hornn_dist.launch [accelerate launch options] -m hornn_dist.train CONFIG ...`.

Runs `accelerate launch` with the same arguments and passes its output through, except what
torchrun adds when a rank fails or a signal stops the run: its elastic log lines, and the
launcher's `ChildFailedError` / `SignalException` traceback with its failure summary (about 40
lines), which become one `launch:` line. The ranks' own lines, errors included, pass
unchanged; the exit code is the launcher's. Its output goes through a pipe, so the progress
bar is off unless `log.progress = true` (then drawn a line at a time).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from types import FrameType

# e.g. "E1127 02:18:52.926000 29664 site-packages/torch/distributed/elastic/...] failed (..."
ELASTIC_LOG = re.compile(r"^[DIWE]\d{4} [\d:.]+ +\d+ \S*torch/distributed/elastic/")
TRACEBACK = "Traceback (most recent call last):"
LAUNCHER_ERRORS = (
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
    "torch.distributed.elastic.multiprocessing.api.SignalException",
)
_RANK = re.compile(r"^\s*rank\s*: (\d+)")
_EXIT = re.compile(r"^\s*exitcode\s*: (-?\d+)")
_SIGNAL = re.compile(r"got signal: (\d+)")


def summary(error: str, rest: list[str]) -> str:
    """Return the one line that stands for the launcher's traceback ending in `error` and the
    failure summary `rest` after it."""
    found = _SIGNAL.search(error)
    if found:
        name = signal.Signals(int(found.group(1))).name
        return f"launch: the launcher got {name} and passed it on to the ranks"
    ranks, failures = "", []
    for line in rest:
        if match := _RANK.match(line):
            ranks = match.group(1)
        elif (match := _EXIT.match(line)) and ranks:
            code = int(match.group(1))
            how = f"ended by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            failures.append(f"rank {ranks} {how}")
            ranks = ""
    return f"launch: failed ({', '.join(sorted(set(failures))) or 'a rank exited non-zero'})"


def filtered(lines: Iterable[str]) -> Iterator[str]:
    """Yield the launcher's output lines less torchrun's noise (see the module docstring)."""
    block: list[str] = []  # a traceback being read, held until its last line says whose it is
    source = iter(lines)
    for line in source:
        if block:
            block.append(line)
            if line.startswith((" ", "\t")):
                continue
            if line.startswith(LAUNCHER_ERRORS):
                yield summary(line, list(source)) + "\n"  # the launcher ends after it
                return
            yield from block
            block = []
        elif line.startswith(TRACEBACK):
            block = [line]
        elif not ELASTIC_LOG.match(line):
            yield line
    yield from block


def main(argv: list[str] | None = None) -> int:
    """Run `accelerate launch ARGS` with its output filtered; return its exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    command = [sys.executable, "-m", "accelerate.commands.launch", *args]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, errors="replace")

    def forward(signum: int, frame: FrameType | None) -> None:
        process.send_signal(signum)

    # Ctrl-C reaches the launcher and the ranks from the terminal already: keep reading
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, forward)
    assert process.stderr is not None
    for line in filtered(process.stderr):
        sys.stderr.write(line)
        sys.stderr.flush()
    return process.wait()


if __name__ == "__main__":
    sys.exit(main())
