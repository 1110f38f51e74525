"""Check, before any work, that the folders a command writes into can be written to.

A folder passes when a file can be created in it (a mode or ownership check would pass a
read-only mount, or a root user's read-only folder, that then fails at the first save); a
failure is one line naming the path and the config key or option that set it.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from hornn_dist.run.run_layout import CHECKPOINTS, LOCK_FILE, TENSORBOARD
from hornn_dist.util.errors import PathError, naming_path, os_error_line


def check_writable_folder(folder: str | os.PathLike[str], key: str) -> None:
    """Create `folder` (and its parents) if missing, then create and remove a file in it;
    raise PathError naming `key` when either fails."""
    folder = Path(folder)
    with naming_path(folder, key):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd, name = tempfile.mkstemp(prefix=".write-check-", dir=folder)
        except OSError as err:  # named by the folder: the probe's name means nothing to a user
            raise OSError(err.errno, err.strerror, str(folder)) from None
        os.close(fd)
        os.unlink(name)


def check_run_folder(out: str | os.PathLike[str], key: str = "train.output_dir") -> None:
    """Check that a training run can write its output folder and the folders it fills later
    (checkpoints, TensorBoard: a file in their place failed only at the first save), and
    that its lock is not a folder."""
    out = Path(out)
    check_writable_folder(out, key)
    for folder in (out / CHECKPOINTS, out / TENSORBOARD):
        if os.path.lexists(folder):
            check_writable_folder(folder, key)
    lock = out / LOCK_FILE
    if lock.is_dir() and not lock.is_symlink():
        err = IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(lock))
        raise PathError(os_error_line(err, key=key))
