"""Safe file writes and hashes: atomic writes that never follow a link, sha256 tables of folders.

Every file the tools write goes through here, under one rule: a symbolic link at the name being
written is never followed, so a link planted in a run folder (`.lock`, `config.toml`, a report)
cannot make a run overwrite a file outside it.

- `atomic_writer` / `write_bytes` / `write_text` / `write_json`: the data goes to a new temporary
  file in the same folder (created exclusively, never through a link), is fsynced, and is renamed
  over the name: a reader sees the old file or the new one, never half of one, and a link at the
  name is replaced by the file while its target stays as it was.
- Temporary names are hidden, beside the name, and say which process of which host made them
  (`.NAME.HOST-PID-RANDOM.tmp`, NAME cut to keep it within 255 bytes): `remove_stale_beside`
  deletes those whose process is gone (a kill -9 leaves them).
- `open_for_writing`: a file written in place (shards, a log appended to), opened with O_NOFOLLOW;
  a link at its name is refused with one line.
- `write_checksums` / `checksums_problem`: `checksums.json`, the size and sha256 of the files of a
  folder (a checkpoint, an exported model), and the check of a folder against it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from hornn_dist.util.errors import ConfigError

CHECKSUMS = "checksums.json"
_BLOCK = 1 << 22  # bytes per read when hashing
_TEXT = {"encoding": "utf-8", "newline": ""}  # text files hold exactly the "\n" written


def sha256_file(path: Path) -> str:
    """Return the sha256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


NAME_MAX = 255  # bytes in one name, on the file systems we write to


def _temporary_name(path: Path) -> Path:
    """Return a fresh hidden name beside `path` for a temporary file or folder, naming this
    host and process; `path`'s name is cut to keep it within NAME_MAX bytes."""
    owner = f".{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}.tmp"
    room = NAME_MAX - 1 - len(os.fsencode(owner))
    return path.with_name(f".{os.fsdecode(os.fsencode(path.name)[:room])}{owner}")


def remove_stale_beside(path: Path) -> list[Path]:
    """Delete the temporary files and folders of `path` (`_temporary_name`) that a process of
    this host left and that is gone (killed before it renamed or removed them); return them."""
    owner = re.compile(rf"\.{re.escape(socket.gethostname())}-(\d+)-[0-9a-f]{{8}}\.tmp")
    name = os.fsencode(path.name)
    removed = []
    for item in path.parent.glob(".*.tmp"):
        found = owner.search(item.name)
        stem = os.fsencode(item.name[1 : found.start()]) if found else b""
        cut = len(os.fsencode(item.name)) == NAME_MAX and name.startswith(stem)  # a long name
        if not found or found.end() != len(item.name) or not stem or not (stem == name or cut):
            continue
        try:
            os.kill(int(found.group(1)), 0)
            continue  # still running
        except PermissionError:  # another user's process, running
            continue
        except ProcessLookupError:
            pass
        if item.is_dir() and not item.is_symlink():
            shutil.rmtree(item, ignore_errors=True)
        else:
            item.unlink(missing_ok=True)
        removed.append(item)
    return removed


def _new_temporary(path: Path) -> tuple[int, Path]:
    """Create a new file beside `path` (O_EXCL, so never through a link); return (fd, its path)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    while True:
        tmp = _temporary_name(path)
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # a leftover of the same name: draw another
            continue


def new_folder_beside(path: Path) -> Path:
    """Create and return a new empty folder beside `path` (never an existing one or a link), to
    build `path`'s content in before it is renamed into place."""
    while True:
        tmp = _temporary_name(path)
        try:
            tmp.mkdir()
            return tmp
        except FileExistsError:
            continue


@contextmanager
def atomic_writer(path: str | Path, binary: bool = True) -> Iterator[IO[Any]]:
    """Yield a file whose content replaces `path` atomically when the block ends without error.

    The file is a temporary one in the same folder; on success it is flushed, fsynced and
    renamed over `path` (a link there is replaced, its target untouched); on error it is removed
    and `path` stays as it was.
    """
    path = Path(path)
    fd, tmp = _new_temporary(path)
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else _TEXT)) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically, never through a link at `path`."""
    with atomic_writer(path) as f:
        f.write(data)


def write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically, never through a link at `path`."""
    with atomic_writer(path, binary=False) as f:
        f.write(text)


def write_json(path: str | Path, data: Any, indent: int | None = 1) -> None:
    """Write `data` as JSON (and a final newline) to `path` atomically, never through a link."""
    write_text(path, json.dumps(data, indent=indent) + "\n")


def open_for_writing(path: str | Path, append: bool = False, binary: bool = True) -> IO[Any]:
    """Return `path` opened for writing in place (truncated, or appended to), never through a link.

    Raise ConfigError naming the file when a symbolic link stands at its name.
    """
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise link_refused(Path(path)) from None
        raise
    mode = ("a" if append else "w") + ("b" if binary else "")
    return os.fdopen(fd, mode, **({} if binary else _TEXT))


def link_refused(path: Path) -> ConfigError:
    """Return the one-line error for a symbolic link where a file is to be written."""
    return ConfigError(
        f"{path} is a symbolic link (to {os.readlink(path) if path.is_symlink() else '?'}); "
        "hornn_dist never writes through one: remove the link and run the command again"
    )


def fsync_folder(folder: Path) -> None:
    """Fsync every file of `folder`, then the folder itself (its entries)."""
    for item in folder.iterdir():
        if item.is_file() and not item.is_symlink():
            with open(item, "rb") as handle:
                os.fsync(handle.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checksums(folder: Path, names: Iterable[str]) -> None:
    """Write `folder/checksums.json`: the size and sha256 of each named file of the folder."""
    table = {}
    for name in sorted(names):
        path = folder / name
        table[name] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    write_json(folder / CHECKSUMS, table, indent=2)


def checksums_problem(
    folder: Path, deep: bool, required: Iterable[str] = (), only: Iterable[str] = ()
) -> str | None:
    """Return what is wrong with the files of `folder` against its checksums.json, or None.

    The table must exist, list every name of `required`, and each listed file (each of `only`,
    when given) must be there with its size; with `deep` also with its sha256.
    """
    path = folder / CHECKSUMS
    if not path.is_file():
        return f"{CHECKSUMS}, the list of its files, is missing"
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
        records = [(name, int(rec["bytes"]), str(rec["sha256"])) for name, rec in table.items()]
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        return f"{CHECKSUMS} is unreadable ({type(err).__name__})"
    listed = {name for name, _, _ in records}
    unlisted = [name for name in required if name not in listed]
    if unlisted:
        return f"{CHECKSUMS} does not list {unlisted[0]}"
    wanted = set(only)
    for name, size, digest in records:
        if wanted and name not in wanted:
            continue
        file = folder / name
        if os.sep in name or name in ("", ".", "..") or not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != size:
            return f"{name} has {file.stat().st_size} bytes, {CHECKSUMS} says {size} (truncated?)"
        if deep and sha256_file(file) != digest:
            return f"{name} does not match its sha256 in {CHECKSUMS} (the file was damaged)"
    return None
