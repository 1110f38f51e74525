"""Token shards on disk: the .bin format, the manifest, the writer, and a memory-mapped reader.

A prepared corpus is one folder:

    tokenizer.json           WordLevel tokenizer (ids 0 = <unk>, 1 = <eos>)
    train_000000.bin ...     per split, shards of at most shard_tokens tokens
    manifest.json            written last: format version, splits, per-shard tokens + sha256,
                             dtype, vocabulary size and hash, source and preprocessing settings
    .verified-HOST.json      written by `Corpus.verify_shards` on machine HOST: the shards whose
                             sha256 it checked, each with its stat at the time (see there)

Each .bin file is a 64-byte little-endian header, then the token ids (uint16 or uint32):

    offset  size  field
    0       8     magic b"HORNNTOK"
    8       4     format version (uint32)
    12      4     bytes per token: 2 (uint16) or 4 (uint32)
    16      8     number of tokens (uint64)
    24      4     vocabulary size (uint32)
    28      16    first 16 hex digits of the vocabulary's sha256 (ASCII)
    44      20    zero
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import os
import socket
import struct
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

import numpy as np

from hornn_dist.data.vocab import Vocabulary
from hornn_dist.util.errors import DataError
from hornn_dist.util.files import open_for_writing, sha256_file, write_json

MAGIC = b"HORNNTOK"
FORMAT_VERSION = 1
HEADER = struct.Struct("<8sIIQI16s20x")
HEADER_BYTES = HEADER.size  # 64
MANIFEST = "manifest.json"
TOKENIZER = "tokenizer.json"
_REDO = "HINT: delete {folder} and run `python -m hornn_dist.prepare CONFIG` again"
# threads that hash shards: enough to outrun most disks (docs/data.md, "What the shard check costs")
HASH_THREADS = 8

log = logging.getLogger(__name__)


class ShardWriter:
    """Writes one split's tokens as numbered .bin shards of at most shard_tokens tokens each."""

    def __init__(
        self,
        folder: Path,
        split: str,
        shard_tokens: int,
        dtype: np.dtype,
        vocab_size: int,
        vocab_hash: str,
    ) -> None:
        self.folder, self.split, self.shard_tokens = folder, split, shard_tokens
        self.dtype, self.vocab_size, self.vocab_hash = np.dtype(dtype), vocab_size, vocab_hash
        self.shards: list[dict[str, Any]] = []
        self._file: IO[bytes] | None = None
        self._count = 0

    def _header(self, count: int) -> bytes:
        return HEADER.pack(
            MAGIC,
            FORMAT_VERSION,
            self.dtype.itemsize,
            count,
            self.vocab_size,
            self.vocab_hash[:16].encode(),
        )

    def _path(self) -> Path:
        return self.folder / f"{self.split}_{len(self.shards):06d}.bin"

    def append(self, ids: np.ndarray) -> None:
        """Add tokens at the end of the split, starting new shards as they fill."""
        ids = np.ascontiguousarray(ids, dtype=self.dtype)
        while len(ids):
            if self._file is None:
                self._file = open_for_writing(self._path())
                self._file.write(self._header(0))
                self._count = 0
            take = min(len(ids), self.shard_tokens - self._count)
            self._file.write(ids[:take].tobytes())
            self._count += take
            ids = ids[take:]
            if self._count == self.shard_tokens:
                self._finish()

    def _finish(self) -> None:
        assert self._file is not None
        self._file.seek(0)
        self._file.write(self._header(self._count))
        self._file.close()
        self._file = None
        path = self._path()
        self.shards.append(
            {
                "file": path.name,
                "tokens": self._count,
                "bytes": path.stat().st_size,
                "sha256": sha256_file(path),
            }
        )

    def close(self) -> list[dict[str, Any]]:
        """Finish the last shard; return the shards' records (file, tokens, bytes, sha256)."""
        if self._file is not None:
            self._finish()
        return self.shards


def read_header(path: Path) -> tuple[int, int, int, int, str]:
    """Return (version, bytes per token, tokens, vocabulary size, vocabulary hash prefix) of a shard."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except OSError as e:
        raise _unreadable(path, e) from None
    if len(raw) < HEADER_BYTES or raw[:8] != MAGIC:
        raise DataError(
            f"{path}: not a hornn_dist token shard (bad magic); {_REDO.format(folder=path.parent)}"
        )
    magic, version, itemsize, count, vocab_size, vhash = HEADER.unpack(raw)
    return version, itemsize, count, vocab_size, vhash.decode("ascii", "replace")


def _unreadable(path: Path, error: OSError) -> DataError:
    return DataError(
        f"{path}: cannot read shard ({error.strerror}); HINT: the folder is incomplete, re-run prepare"
    )


class TokenReader:
    """One split's tokens across its shards: len() tokens, read(a, b) returns tokens [a, b).

    `vocab_size` (when given) is the bound the streams check each batch's ids against, and
    `bad_id(k)` their error for token k, naming its shard and place there."""

    def __init__(
        self,
        folder: Path,
        split: str,
        shards: list[dict[str, Any]],
        dtype: np.dtype,
        vocab_size: int | None = None,
    ) -> None:
        self.folder, self.split, self.dtype = folder, split, np.dtype(dtype)
        self.vocab_size = vocab_size
        self._files = [folder / s["file"] for s in shards]
        counts = [int(s["tokens"]) for s in shards]
        self._starts = [0]
        for c in counts:
            self._starts.append(self._starts[-1] + c)
        self._maps: list[np.memmap | None] = [None] * len(shards)

    def __len__(self) -> int:
        return self._starts[-1]

    def __repr__(self) -> str:
        return f"TokenReader({self.split!r}, {len(self):,} tokens, {len(self._files)} shards, {self.dtype.name})"

    def _map(self, i: int) -> np.memmap:
        if self._maps[i] is None:
            count = self._starts[i + 1] - self._starts[i]
            self._maps[i] = np.memmap(
                self._files[i], dtype=self.dtype, mode="r", offset=HEADER_BYTES, shape=(count,)
            )
        return self._maps[i]  # type: ignore[return-value]

    def id_counts(self, vocab_size: int) -> np.ndarray:
        """Return how often each id 0..vocab_size-1 occurs in the split (int64), one shard at a
        time."""
        counts = np.zeros(vocab_size, dtype=np.int64)
        for i in range(len(self._files)):
            counts += np.bincount(self._map(i), minlength=vocab_size)[:vocab_size]
        return counts

    def read(self, a: int, b: int) -> np.ndarray:
        """Return a new array (the shards' dtype) of the tokens [a, b), across shard boundaries."""
        if not 0 <= a <= b <= len(self):
            raise IndexError(
                f"token range [{a}, {b}) is outside split {self.split!r} of {len(self):,} tokens"
            )
        parts = []
        i = bisect.bisect_right(self._starts, a) - 1
        while a < b:
            lo, hi = self._starts[i], self._starts[i + 1]
            take = min(b, hi) - a
            parts.append(self._map(i)[a - lo : a - lo + take])
            a += take
            i += 1
        return np.concatenate(parts) if parts else np.empty(0, dtype=self.dtype)

    def bad_id(self, k: int) -> DataError:
        """Return the error for token k of the split, an id past `vocab_size` (the streams')."""
        i = bisect.bisect_right(self._starts, k) - 1
        local = k - self._starts[i]
        value = int(self._map(i)[local])
        return _bad_id(self._files[i], local, value, self.vocab_size or 0, self.dtype.itemsize)


def _bad_id(path: Path, token: int, value: int, vocab_size: int, itemsize: int) -> DataError:
    return DataError(
        f"{path}: token {token} (byte {HEADER_BYTES + token * itemsize}) has id {value}, outside "
        f"the vocabulary of {vocab_size} words: the shard is damaged; "
        + _REDO.format(folder=path.parent)
    )


class Corpus:
    """A prepared corpus folder: its manifest, split readers and tokenizer."""

    def __init__(self, folder: Path, manifest: dict[str, Any]) -> None:
        self.folder = folder
        self.manifest = manifest
        self.vocab_size: int = int(manifest["vocab_size"])
        self.vocab_hash: str = manifest["vocab_hash"]
        self.content_hash = content_hash(manifest)
        self.dtype = np.dtype(manifest["dtype"])
        self.splits: list[str] = list(manifest["splits"])
        self._readers: dict[str, TokenReader] = {}
        self.vocab = Vocabulary(
            folder / TOKENIZER,
            self.vocab_size,
            self.vocab_hash,
            "the shards' vocabulary",
            _REDO.format(folder=folder),
            manifest.get("tokenizer_sha256"),
        )

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s} {self.manifest['splits'][s]['tokens']:,}" for s in self.splits)
        return f"Corpus({str(self.folder)!r}, vocab {self.vocab_size:,}, {sizes})"

    def split(self, name: str) -> TokenReader:
        """Return the reader of one split ('train', 'valid', 'test')."""
        if name not in self.manifest["splits"]:
            held_out = (
                ""
                if name == "train"
                else " (or hold out the end of the train text: data.heldout_chars)"
            )
            raise DataError(
                f"{self.folder} has no split {name!r} (it has {', '.join(self.splits)}); HINT: configure data.{name}{held_out} and prepare again"
            )
        if name not in self._readers:
            self._readers[name] = TokenReader(
                self.folder,
                name,
                self.manifest["splits"][name]["shards"],
                self.dtype,
                self.vocab_size,
            )
        return self._readers[name]

    def tokenizer(self) -> Any:
        """Return the corpus's `tokenizers.Tokenizer` (loaded once, checked against the manifest)."""
        return self.vocab.tokenizer()

    def itos(self) -> list[str]:
        """Return the id-to-word table (read from tokenizer.json, checked against the manifest)."""
        return self.vocab.itos()

    def encode(self, text: str) -> list[int]:
        """Return the ids of text as the saved tokenizer encodes it (each newline is <eos> when add_eos)."""
        return self.vocab.encode(text)

    def decode(self, ids: Any) -> str:
        """Return the words of ids joined by spaces, each <eos> as a line end."""
        return self.vocab.decode(ids)

    def check(self, verify: bool = False) -> None:
        """Check every shard's header and size against the manifest, and its sha256 when verify
        (every shard read again, the record neither used nor written); and tokenizer.json
        against the manifest (its id table, and its sha256 where the manifest has one)."""
        for split in self.splits:
            for shard in self.manifest["splits"][split]["shards"]:
                path = self.folder / shard["file"]
                version, itemsize, count, vocab_size, vhash = read_header(path)
                if version != FORMAT_VERSION or itemsize != self.dtype.itemsize:
                    raise DataError(
                        f"{path}: shard format {version}/{itemsize} bytes per token, expected {FORMAT_VERSION}/{self.dtype.itemsize}; "
                        + _REDO.format(folder=self.folder)
                    )
                if vocab_size != self.vocab_size or vhash != self.vocab_hash[:16]:
                    raise DataError(
                        f"{path}: shard was written with another vocabulary than the manifest's; "
                        + _REDO.format(folder=self.folder)
                    )
                expected = HEADER_BYTES + int(shard["tokens"]) * itemsize
                if count != int(shard["tokens"]) or path.stat().st_size != expected:
                    raise DataError(
                        f"{path}: {path.stat().st_size} bytes / {count} tokens, the manifest says {expected} / {shard['tokens']} (truncated?); "
                        + _REDO.format(folder=self.folder)
                    )
        self.vocab.read_checked()
        if verify:
            self.verify_shards(record=False)

    def verify_shards(self, splits: Iterable[str] | None = None, record: bool = True) -> int:
        """Check the sha256 of the shards of `splits` (default: all) against the manifest.

        Raise DataError naming the first damaged shard (in manifest order) and, where an id
        lies past the vocabulary, the token and byte of the first one. Shards are hashed in
        threads (hashlib releases the GIL). With `record`, what was checked goes to this
        machine's record (`.verified-HOST.json` in the folder) with each shard's size, mtime,
        ctime, inode and device, and a shard whose stat is still the same is not read again:
        any write to it changes its mtime and ctime. Return the bytes read (0: all recorded).
        """
        wanted = self.splits if splits is None else [s for s in splits if s in self.splits]
        shards = [s for name in wanted for s in self.manifest["splits"][name]["shards"]]
        known = _read_record(self.folder) if record else {}
        todo: list[tuple[dict[str, Any], list[int]]] = []
        for shard in shards:
            stat = _stat_key(self.folder / shard["file"])
            if known.get(shard["file"]) != {"stat": stat, "sha256": shard["sha256"]}:
                todo.append((shard, stat))
        if not todo:
            return 0
        started = time.perf_counter()
        paths = [self.folder / shard["file"] for shard, _ in todo]
        with ThreadPoolExecutor(min(len(todo), os.cpu_count() or 1, HASH_THREADS)) as pool:
            digests = list(pool.map(sha256_file, paths))
        done = {}
        for (shard, stat), path, digest in zip(todo, paths, digests, strict=True):
            if digest != shard["sha256"]:
                raise self._damaged(path)
            done[shard["file"]] = {"stat": stat, "sha256": digest}
        size = sum(p.stat().st_size for p in paths)
        log.info(
            "data: checked the sha256 of %d shard(s), %.2f GB, in %.1f s",
            len(paths),
            size / 1e9,
            time.perf_counter() - started,
        )
        if record:
            try:
                _write_record(self.folder, {**known, **done})
            except OSError as e:
                log.debug("data: cannot record the checked shards in %s (%s)", self.folder, e)
        return size

    def _damaged(self, path: Path) -> DataError:
        """Return the error for a shard whose sha256 differs: its first id past the vocabulary if any."""
        ids = np.memmap(path, dtype=self.dtype, mode="r", offset=HEADER_BYTES)
        block = 1 << 24
        for a in range(0, len(ids), block):
            bad = np.flatnonzero(ids[a : a + block] >= self.vocab_size)
            if len(bad):
                k = a + int(bad[0])
                return _bad_id(path, k, int(ids[k]), self.vocab_size, self.dtype.itemsize)
        return DataError(
            f"{path}: sha256 checksum mismatch (file corrupted or changed since prepare); "
            + _REDO.format(folder=self.folder)
        )


def content_hash(manifest: dict[str, Any]) -> str:
    """Return the identity of a prepared corpus: the sha256 of its vocabulary hash and of each
    split's shards (tokens and sha256, in order). It names what the tokens are, not when or
    where they were prepared: a folder rebuilt from the same text has the same one."""
    splits = {
        name: [[s["tokens"], s["sha256"]] for s in info["shards"]]
        for name, info in sorted(manifest["splits"].items())
    }
    text = json.dumps({"vocab_hash": manifest["vocab_hash"], "splits": splits}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def verified_record_name() -> str:
    """Return the file name of this machine's record of checked shards."""
    return f".verified-{socket.gethostname()}.json"


def _stat_key(path: Path) -> list[int]:
    try:
        st = path.stat()
    except OSError as e:
        raise _unreadable(path, e) from None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _read_record(folder: Path) -> dict[str, Any]:
    """Return this machine's record of checked shards, less its racy entries ({} if none).

    As with git's index: a shard whose mtime or ctime is not older than the record's own
    mtime may have been written again within the same clock tick, so it is checked again.
    """
    path = folder / verified_record_name()
    try:
        with open(path, encoding="utf-8") as f:
            stamp = os.fstat(f.fileno()).st_mtime_ns
            shards = json.load(f)["shards"]
        return {
            name: entry
            for name, entry in shards.items()
            if max(entry["stat"][1], entry["stat"][2]) < stamp
        }
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return {}  # none yet, or unreadable: check everything again


def _write_record(folder: Path, shards: dict[str, Any]) -> None:
    write_json(
        folder / verified_record_name(),
        {"format": "hornn_dist-verified", "shards": shards},
        indent=0,
    )


def read_manifest(folder: Path) -> dict[str, Any]:
    """Return the folder's manifest, checked for its format and version."""
    path = folder / MANIFEST
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise DataError(
            f"{folder} has no {MANIFEST}: not a prepared corpus, or an interrupted run; HINT: run `python -m hornn_dist.prepare CONFIG`"
        ) from None
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: unreadable ({e}); " + _REDO.format(folder=folder)) from None
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if not isinstance(version, int) or manifest.get("format") != "hornn_dist-shards":
        raise DataError(f"{path}: not a hornn_dist shard manifest; " + _REDO.format(folder=folder))
    if version < FORMAT_VERSION:
        raise DataError(
            f"{path}: manifest format {version} is older than this hornn_dist's format {FORMAT_VERSION}; "
            + _REDO.format(folder=folder)
        )
    if version > FORMAT_VERSION:
        raise DataError(
            f"{path}: manifest format {version} is newer than this hornn_dist's format {FORMAT_VERSION}; HINT: upgrade hornn_dist"
        )
    problem = _manifest_problem(manifest)
    if problem:
        raise DataError(f"{path}: {problem}; " + _REDO.format(folder=folder))
    return manifest


def _manifest_problem(manifest: dict[str, Any]) -> str:
    """Return what a manifest lacks that reading the corpus needs ("" if nothing)."""
    for key, kind in (("vocab_size", int), ("vocab_hash", str), ("dtype", str), ("splits", dict)):
        if not isinstance(manifest.get(key), kind):
            return f"key {key!r} is missing or not {'an' if kind is int else 'a'} {kind.__name__}"
    if manifest["dtype"] not in ("uint16", "uint32"):
        return f"dtype {manifest['dtype']!r} is not uint16 or uint32"
    for split, info in manifest["splits"].items():
        if not _has(info, tokens=int, unk_tokens=int, shards=list):
            return f"split {split!r} lacks its tokens, unk_tokens or list of shards"
        for i, shard in enumerate(info["shards"]):
            if not _has(shard, file=str, tokens=int, sha256=str):
                return f"shard {i} of split {split!r} lacks its file, tokens or sha256"
            name = shard["file"]
            if name in ("", ".", "..") or "/" in name or os.sep in name or "\0" in name:
                # a path such as ../../x would read, and the hint would delete, outside the folder
                return f"shard {i} of split {split!r} names {name[:80]!r}, not a file of the folder"
    return ""


def _has(record: Any, **kinds: type) -> bool:
    """Return whether record is a dict with a value of each kind under each key."""
    return isinstance(record, dict) and all(isinstance(record.get(k), t) for k, t in kinds.items())


def open_corpus(folder: str | os.PathLike[str], check: bool = True, verify: bool = False) -> Corpus:
    """Return the prepared corpus in folder; check headers and sizes (default) and sha256 (verify)."""
    folder = Path(folder)
    corpus = Corpus(folder, read_manifest(folder))
    if check or verify:
        corpus.check(verify=verify)
    return corpus
