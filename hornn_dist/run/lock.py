"""One run per output folder: an exclusive lock on `output_dir/.lock` for the life of the run.

The main process holds an flock on the file; the kernel drops it when the process ends in
any way (a crash or SIGKILL included), so a lock file left behind is stale and the next run
simply takes it. The file names the holder (host, PID, start time) for the error a second
run gets. On NFS, Linux maps flock to NFS locks, so runs on different hosts exclude each
other too. A link at `.lock` is refused, never followed: the lock writes its file.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

from hornn_dist.run.run_layout import LOCK_FILE
from hornn_dist.util.errors import ConfigError
from hornn_dist.util.files import link_refused


class RunLock:
    """The lock of one run folder; `acquire` raises ConfigError naming the holder if taken."""

    def __init__(
        self,
        folder: str | Path,
        name: str = LOCK_FILE,
        busy: str = "in use by another run ({holder}); wait for it to end or set another "
        "train.output_dir",
    ) -> None:
        """name: the lock file in `folder`; busy: what the error says after the folder when
        the lock is held (`{holder}` names the holder)."""
        self.path = Path(folder) / name
        self.busy = busy
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise ConfigError naming the run that holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_symlink():  # O_NOFOLLOW below refuses it too; this names the target
            raise link_refused(self.path)
        try:  # never through a link: the lock truncates and writes the file
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as err:
            raise ConfigError(
                f"cannot open the run lock {self.path} ({err.strerror}); it must be a plain "
                "file: remove what is there, or set another train.output_dir"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(f"{self.path.parent} is {self.busy.format(holder=holder)}") from None
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        try:
            os.ftruncate(fd, 0)
            os.pwrite(
                fd, f"host {socket.gethostname()}, PID {os.getpid()}, since {started}\n".encode(), 0
            )
        except OSError:  # a full disk: the caller names it; the lock and its file go with it
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Let the lock go (the file stays, unlocked)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
