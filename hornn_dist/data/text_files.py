"""Text from local files (plain or compressed), read in bounded chunks; text8's character cuts.

Everything is read as *pieces*: a byte range of one file's (decompressed) text. A split is a list
of pieces in order; its token stream is the concatenation of the pieces' token streams. Pieces
start and end on token boundaries (after an ASCII whitespace byte), except the character cuts
of `heldout_chars` (text8), which are literal: a word straddling the cut is split in two, as
`head -c`/`tail -c` did for the original files (see `char_cut`).
"""

from __future__ import annotations

import bz2
import codecs
import contextlib
import glob
import gzip
import lzma
import os
import re
import stat
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from hornn_dist.data.config import PRESET_DOWNLOADS, preset_hub_id
from hornn_dist.util.errors import DataError

COMPRESSED = (".gz", ".bz2", ".xz", ".zip")
_ASCII_SPACE = re.compile(rb"[ \t\n\r\x0b\x0c]")
_BLANK_BYTES = b" \t\r\x0b\x0c"
_ANY_SPACE = re.compile(r"\s(?=\S*\Z)")
_NOT_CONTINUATION = bytes(b for b in range(256) if not 0x80 <= b <= 0xBF)
_BOM = codecs.BOM_UTF8
OnBytes = Callable[[int], None] | None
# the longest run of characters without whitespace that reading holds (one word): far beyond
# any word of real text, and it bounds memory where a file (a small .gz) holds no separator
MAX_WORD_CHARS = 1 << 20


@dataclass(frozen=True)
class Piece:
    """A byte range [start, end) of one file's decompressed text; end None = to the end of the file."""

    path: str
    start: int = 0
    end: int | None = None


def expand(patterns: list[str], key: str) -> list[str]:
    """Return the files matching paths/globs, in order (each glob sorted); DataError if one matches nothing."""
    files: list[str] = []
    for pattern in patterns:
        path = os.path.expanduser(pattern)
        if not glob.has_magic(pattern) and os.path.exists(path) and not os.path.isfile(path):
            raise DataError(f"data.{key}: {pattern!r} is {_not_a_file(path)}")
        matches = sorted(glob.glob(path)) if glob.has_magic(pattern) else [path]
        matches = [m for m in matches if os.path.isfile(m)]
        if not matches:
            raise DataError(
                f"data.{key}: no file matches {pattern!r}; HINT: check the path (relative paths start at {os.getcwd()})"
            )
        files.extend(matches)
    return files


def _not_a_file(path: str) -> str:
    """Return what a path that exists but is no regular file is, and what to name instead."""
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        return f"a folder, not a file; HINT: name the files in it, e.g. '{path.rstrip('/')}/*.txt'"
    kind = "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a device or socket"
    return (
        f"{kind}, not a regular file; HINT: write the text to a file and name that (preparing "
        "reads each file more than once, which a stream cannot give)"
    )


def check_preset_path(cfg: Any) -> None:
    """Raise DataError when a preset's data.path, or a file the preset reads from it, is missing.

    The error names data.path (the key the user set, not the data.train the preset made of
    it), where the corpus comes from, where to put it, and the hub alternative."""
    if cfg.preset not in PRESET_DOWNLOADS or not cfg.path or cfg.source != "files":
        return
    root = os.path.normpath(cfg.path)
    if not os.path.exists(root):
        problem = "does not exist"
    else:
        ours = [f for s in ("train", "valid", "test") for f in getattr(cfg, s)]
        ours = [f for f in ours if os.path.normpath(f).startswith(root)]  # not the user's own
        missing = [f for f in ours if not glob.has_magic(f) and not os.path.isfile(f)]
        if not missing:
            return
        problem = f"has no {os.path.relpath(missing[0], root)}"
    hint = PRESET_DOWNLOADS[cfg.preset].format(path=cfg.path)
    hub_id = preset_hub_id(cfg.preset)
    if hub_id:
        hint += f", or leave data.path empty to stream it from the hub ({hub_id})"
    raise DataError(
        f"data.path = {cfg.path!r} {problem} (data.preset = {cfg.preset!r}, relative paths "
        f"start at {os.getcwd()}); HINT: {hint}"
    )


def is_compressed(path: str) -> bool:
    """Return whether the file is read through a decompressor (.gz, .bz2, .xz, .zip)."""
    return path.lower().endswith(COMPRESSED)


class _Stream:
    """A binary stream of a file's text whose read errors become a DataError naming the file."""

    def __init__(self, raw: IO[bytes], path: str, seekable: bool) -> None:
        self.raw, self.path, self.seekable = raw, path, seekable

    def read(self, size: int) -> bytes:
        """Return up to size bytes (b"" at the end)."""
        try:
            return self.raw.read(size)
        except (OSError, EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile) as e:
            raise DataError(
                f"{self.path}: read failed ({e}); HINT: the file is truncated or corrupt, fetch it again"
            ) from None

    def skip(self, count: int) -> None:
        """Advance by count bytes (a seek for plain files, else read and drop)."""
        if self.seekable:
            self.raw.seek(count, os.SEEK_CUR)
            return
        while count > 0:
            data = self.read(min(count, 1 << 20))
            if not data:
                return
            count -= len(data)


@contextlib.contextmanager
def open_bytes(path: str) -> Iterator[_Stream]:
    """Yield a binary stream of the file's text, decompressing .gz/.bz2/.xz and one-member .zip."""
    with contextlib.ExitStack() as stack:
        try:
            lower = path.lower()
            if lower.endswith(".gz"):
                stream: IO[bytes] = stack.enter_context(gzip.open(path, "rb"))
            elif lower.endswith(".bz2"):
                stream = stack.enter_context(bz2.open(path, "rb"))
            elif lower.endswith(".xz"):
                stream = stack.enter_context(lzma.open(path, "rb"))
            elif lower.endswith(".zip"):
                archive = stack.enter_context(zipfile.ZipFile(path))
                members = [m for m in archive.infolist() if not m.is_dir()]
                if len(members) != 1:
                    raise DataError(
                        f"{path}: a .zip input must hold exactly one file, it holds {len(members)}; "
                        "HINT: unzip it and list the files"
                    )
                stream = stack.enter_context(archive.open(members[0]))
            else:
                stream = stack.enter_context(open(path, "rb"))
        except FileNotFoundError:
            raise DataError(
                f"{path}: file not found; HINT: check data.path / data.train / data.valid / data.test"
            ) from None
        except (OSError, zipfile.BadZipFile) as e:
            raise DataError(
                f"{path}: cannot open ({e}); HINT: check that the file is readable and not truncated"
            ) from None
        yield _Stream(stream, path, seekable=not is_compressed(path))


def _bom_len(path: str) -> int:
    """Return 3 if the file's text starts with a UTF-8 byte order mark, else 0."""
    with open_bytes(path) as f:
        return len(_BOM) if f.read(len(_BOM)) == _BOM else 0


def piece_size(piece: Piece) -> int | None:
    """Return the piece's length in bytes, or None when it runs to the end of a compressed file."""
    if piece.end is not None:
        return piece.end - piece.start
    if is_compressed(piece.path):
        return None
    try:
        return os.path.getsize(piece.path) - piece.start
    except OSError:
        return None


def _last_space(text: str) -> int:
    """Return the index of the last whitespace character of text (-1 if none)."""
    i = max(text.rfind(" "), text.rfind("\n"), text.rfind("\t"), text.rfind("\r"))
    if i < 0:
        m = _ANY_SPACE.search(text)
        i = m.start() if m else -1
    return i


def iter_blocks(
    piece: Piece, chunk_bytes: int, errors: str = "strict", on_bytes: OnBytes = None
) -> Iterator[str]:
    """Yield the piece's text in blocks of about chunk_bytes that end on whitespace.

    At the end of a file whose last line has words but no newline, a newline is added, so that
    line counts as a line (gets its <eos>).
    A byte order mark at the start of a file is skipped. Invalid UTF-8 raises DataError with
    the file and byte offset (errors="strict") or becomes U+FFFD (errors="replace").
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors)
    start = piece.start or _bom_len(piece.path)
    remaining = None if piece.end is None else piece.end - start
    position = start  # byte offset of the next read

    def decode(data: bytes, final: bool) -> str:
        pending = len(decoder.getstate()[0])
        try:
            return decoder.decode(data, final=final)
        except UnicodeDecodeError as e:
            where = " of the decompressed text" if is_compressed(piece.path) else ""
            raise DataError(
                f"{piece.path}: invalid UTF-8 at byte {position - pending + e.start}{where}; "
                'HINT: fix the file, or set data.errors = "replace" to read it with U+FFFD replacements'
            ) from None

    carry = ""
    last_line_has_word = False  # words after the last newline read so far

    def track(block: str) -> None:
        nonlocal last_line_has_word
        newline = block.rfind("\n")
        if newline >= 0:
            last_line_has_word = not block[newline + 1 :].isspace() and newline + 1 < len(block)
        elif block and not block.isspace():
            last_line_has_word = True

    with open_bytes(piece.path) as f:
        f.skip(start)
        while remaining is None or remaining > 0:
            data = f.read(chunk_bytes if remaining is None else min(chunk_bytes, remaining))
            if not data:
                if remaining is not None:
                    raise DataError(
                        f"{piece.path}: ended at byte {position}, expected {piece.end}; HINT: the file changed while reading, re-run"
                    )
                break
            text = carry + decode(data, final=False)
            position += len(data)
            if remaining is not None:
                remaining -= len(data)
            if on_bytes is not None:
                on_bytes(len(data))
            cut = _last_space(text) + 1
            carry = text[cut:]
            if len(carry) > MAX_WORD_CHARS:
                where = " of the decompressed text" if is_compressed(piece.path) else ""
                raise DataError(
                    f"{piece.path}: no space or newline in the {len(carry):,} characters before "
                    f"byte {position}{where}, over the {MAX_WORD_CHARS:,} one word may hold; "
                    "HINT: this is not word-level text (a binary file, or words joined by "
                    "another separator): convert it, or leave it out of the data"
                )
            if cut:
                block = text[:cut]
                track(block)
                yield block
        tail = carry + decode(b"", final=True)
    track(tail)
    if piece.end is None and last_line_has_word:
        tail += "\n"
    if tail:
        yield tail


def _has_word_or_newline(path: str, start: int, end: int) -> bool:
    """Return whether bytes [start, end) of an uncompressed file hold anything but blanks."""
    with open(path, "rb") as f:
        f.seek(start)
        while start < end:
            data = f.read(min(1 << 20, end - start))
            if not data:
                return False
            if data.translate(None, _BLANK_BYTES):
                return True
            start += len(data)
    return False


def subdivide(piece: Piece, unit_bytes: int) -> list[Piece]:
    """Return the piece cut into parts of about unit_bytes, each cut after an ASCII whitespace byte.

    Compressed files cannot be entered in the middle and stay whole.
    """
    if is_compressed(piece.path):
        return [piece]
    end = os.path.getsize(piece.path) if piece.end is None else piece.end
    cuts = [piece.start]
    with open(piece.path, "rb") as f:
        target = piece.start + unit_bytes
        while target < end:
            f.seek(target)
            found = -1
            while found < 0:
                data = f.read(1 << 16)
                if not data:
                    break
                m = _ASCII_SPACE.search(data)
                if m:
                    found = target + m.start() + 1
                else:
                    target += len(data)
            if found < 0 or found >= end:
                break
            cuts.append(found)
            target = found + unit_bytes
    blank_from = end
    while len(cuts) > 1 and not _has_word_or_newline(piece.path, cuts[-1], blank_from):
        blank_from = (
            cuts.pop()
        )  # a last part of blanks alone cannot tell whether the last line has words
    ends: list[int | None] = [*cuts[1:], piece.end]
    return [Piece(piece.path, a, b) for a, b in zip(cuts, ends, strict=True)]


def _chars(data: bytes) -> int:
    """Return the number of UTF-8 characters that start in data (bytes that are not continuations)."""
    return len(data) - len(data.translate(None, _NOT_CONTINUATION))


def count_chars(path: str, chunk_bytes: int) -> int:
    """Return the number of characters of a file's text (a leading byte order mark not counted)."""
    total = 0
    with open_bytes(path) as f:
        while data := f.read(max(chunk_bytes, 1 << 20)):
            total += _chars(data)
    return total - (1 if _bom_len(path) else 0)


def char_offsets(path: str, positions: list[int], chunk_bytes: int) -> list[int]:
    """Return the byte offset of each character position (sorted) in a file's text."""
    bom = _bom_len(path)
    targets = [p + (1 if bom else 0) for p in positions]
    offsets: list[int] = []
    seen = 0  # characters before the current chunk
    base = 0  # bytes before the current chunk
    with open_bytes(path) as f:
        while len(offsets) < len(targets) and (data := f.read(max(chunk_bytes, 1 << 20))):
            n = _chars(data)
            while len(offsets) < len(targets) and targets[len(offsets)] < seen + n:
                starts = np.flatnonzero((np.frombuffer(data, dtype=np.uint8) & 0xC0) != 0x80)
                offsets.append(base + int(starts[targets[len(offsets)] - seen]))
            seen += n
            base += len(data)
    offsets.extend([base] * (len(targets) - len(offsets)))  # positions at the very end
    return offsets


def char_cut(
    files: list[str], heldout_chars: int, valid_chars: int, chunk_bytes: int
) -> dict[str, list[Piece]]:
    """Return train/valid/test pieces of one text (the files in order): the last heldout_chars held out.

    The held-out part's first valid_chars characters are valid, the rest test (Mikolov et al. 2014:
    first 99,000,000 characters of text8 train, last 1,000,000 held out). The cuts are at exact
    character positions, like `head -c` / `tail -c` made the original files: a word straddling a
    cut becomes two tokens, its head at the end of one split and its tail at the start of the next.
    """
    lengths = [count_chars(f, chunk_bytes) for f in files]
    total = sum(lengths)
    if total <= heldout_chars:
        raise DataError(
            f"the text has {total:,} characters, not more than data.heldout_chars = {heldout_chars:,}; "
            "HINT: lower data.heldout_chars or check the input files"
        )
    bounds = {
        "train": (0, total - heldout_chars),
        "valid": (total - heldout_chars, total - heldout_chars + valid_chars),
    }
    bounds["test"] = (bounds["valid"][1], total)
    pieces: dict[str, list[Piece]] = {}
    for split, (a, b) in bounds.items():
        pieces[split] = []
        first = 0
        for path, length in zip(files, lengths, strict=True):
            lo, hi = max(a, first) - first, min(b, first + length) - first
            if lo < hi:
                start, stop = char_offsets(path, [lo, hi], chunk_bytes)
                pieces[split].append(Piece(path, start, None if hi == length else stop))
            first += length
    return pieces
