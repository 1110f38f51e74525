"""Error types that reach users as one-line messages instead of tracebacks."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager


class HornnError(Exception):
    """Base class of every user-facing error; its message is one line naming the problem and the fix."""


class ConfigError(HornnError, ValueError):
    """A configuration key has a wrong name, type or value."""


class DataError(HornnError):
    """Input data is missing, malformed, or inconsistent with its manifest."""


class CheckpointError(HornnError):
    """A checkpoint is missing, incomplete, or incompatible with the run."""


def first_line(err: BaseException, default: str | None = None) -> str:
    """Return the first line of an exception's message; without one, `default` (or its type's name)."""
    text = str(err).strip()
    if text:
        return text.splitlines()[0]
    return type(err).__name__ if default is None else default


def described(err: BaseException, limit: int = 300) -> str:
    """Return `Type: first line of the message` of an exception, at most `limit` characters."""
    return f"{type(err).__name__}: {first_line(err, '')}"[:limit]


class PathError(HornnError):
    """A file or folder cannot be read or written (full disk, read-only, a file in the way)."""


# What to do about a failed file operation, by errno; {key} names the config key or option
_OS_FIXES = {
    errno.ENOSPC: "the disk is full: free space there, or point {key} at another disk",
    errno.EDQUOT: "the disk quota is used up: free space there, or point {key} at another disk",
    errno.EROFS: "the file system is read-only: point {key} at a writable folder",
    errno.EACCES: "no permission to write there: point {key} at a folder of yours",
    errno.EPERM: "no permission to write there: point {key} at a folder of yours",
    errno.EEXIST: "a file is in the way where a folder is needed: move it, or point {key} elsewhere",
    errno.ENOTDIR: "a file is in the way where a folder is needed: move it, or point {key} elsewhere",
    errno.EISDIR: "a folder is in the way where a file is needed: move it, or point {key} elsewhere",
    errno.ELOOP: "the path runs in a loop of symbolic links: fix the link, or point {key} elsewhere",
    errno.ENAMETOOLONG: "a name in the path is longer than the file system allows (255 bytes "
    "a name, 4096 the path): shorten {key}",
    errno.ENOENT: "a folder on the path does not exist: check {key}",
    errno.EFBIG: "the file grew past the size the file system or `ulimit -f` allows: point {key} "
    "at another disk, or raise the limit",
    errno.EIO: "the disk or network file system failed (input/output error): check it, or point "
    "{key} at another disk",
}


def os_error_line(err: OSError, path: str | os.PathLike[str] | None = None, key: str = "") -> str:
    """Return one line for a failed file operation: the path (the error's own, else `path`),
    the key that set it, what went wrong and the fix."""
    where = err.filename if err.filename is not None else path
    head = f"{os.fsdecode(where)}: " if where is not None else ""
    if key:
        head = f"{head[:-2]} ({key}): " if head else f"{key}: "
    reason = (err.strerror or first_line(err)).rstrip(".")
    name = errno.errorcode.get(err.errno or 0, "")
    fix = _OS_FIXES.get(err.errno or 0, "")
    text = f"{head}{reason[:1].lower()}{reason[1:]}"
    text += f" ({name})" if name else ""
    return text + (f"; {fix.format(key=key or 'the path')}" if fix else "")


@contextmanager
def naming_path(path: str | os.PathLike[str], key: str) -> Iterator[None]:
    """Turn a file-system OSError raised inside into a PathError naming the file (the error's
    own, else `path`, the folder the work is in) and, for a file under `path`, the config key
    or option that set it. Other OSErrors (a lost connection) pass unchanged."""
    try:
        yield
    except Exception as raised:
        err = as_os_error(raised)
        if err is None or err.errno not in _OS_FIXES:
            raise
        inside = err.filename is None or _is_under(err.filename, path)
        raise PathError(os_error_line(err, path, key if inside else "")) from None


_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def as_os_error(err: BaseException) -> OSError | None:
    """Return `err` as an OSError: itself, or one made from the "(os error N)" that libraries
    written in Rust (tokenizers, safetensors) put in their own exceptions; else None."""
    if isinstance(err, OSError):
        return err
    found = _RUST_OS_ERROR.search(str(err))
    if found is None:
        return None
    number = int(found.group(1))
    return OSError(number, os.strerror(number))


def _is_under(name: str | bytes | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Return whether the path `name` is `folder` or lies below it (compared as written)."""
    name, folder = os.path.abspath(os.fsdecode(name)), os.path.abspath(os.fspath(folder))
    return name == folder or name.startswith(folder.rstrip(os.sep) + os.sep)
