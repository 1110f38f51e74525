"""Prepare a corpus: text source -> vocabulary (train split) -> token shards + manifest, once.

Two streaming passes over the text: count the train words, then encode every split. Each pass
reads pieces of at most a few tens of MB in chunks of `chunk_bytes`, so memory does not grow
with the corpus (only the word counts do, with its number of distinct words). With workers > 1
the pieces go to a pool of processes; the encoded pieces are concatenated in order, so the
shards are byte-identical for any number of workers.

The work runs in a child process of its own (with its pool): the calling process stays free to
beat its heartbeat (the GIL is never held by a long regex call there) and ends the child and its
workers at once on SIGTERM or SIGINT.

The result is one folder `cache_dir/<name>-<hash>` where the hash covers every setting that
changes the folder's contents; it is built under a temporary name and renamed when complete,
with manifest.json written last, so a folder that exists under its final name is complete.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import multiprocessing
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hornn_dist.data import hub, text_files, vocab
from hornn_dist.data.config import DataConfig, apply_preset
from hornn_dist.data.progress import progress_meter
from hornn_dist.data.shards import (
    FORMAT_VERSION,
    MANIFEST,
    TOKENIZER,
    ShardWriter,
    open_corpus,
)
from hornn_dist.runtime import STOP_SIGNALS
from hornn_dist.util.errors import ConfigError, DataError, HornnError, described
from hornn_dist.util.files import open_for_writing, sha256_file, write_json

log = logging.getLogger(__name__)
SPLITS = ("train", "valid", "test")
MAX_PIECE_BYTES = 64 << 20
SAMPLE_CHARS = 1 << 16  # the saved tokenizer must read this much of the train text as we did


@dataclass(frozen=True)
class TextOptions:
    """How a piece's text becomes words."""

    chunk_bytes: int
    errors: str
    lowercase: bool
    add_eos: bool
    word_pattern: str = ""


def corpus_name(cfg: DataConfig) -> str:
    """Return the corpus's name: data.name, else derived from the hub id, else "corpus"."""
    name = cfg.name or (cfg.hub_id if cfg.source == "hub" else "") or "corpus"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "corpus"


_HUB_KEYS = ("hub_id", "hub_config", "hub_revision", "hub_data_dir", "text_column")
_SPLIT_KEYS = ("train_split", "valid_split", "test_split")
_TOKEN_KEYS = (
    "min_count",
    "max_vocab",
    "lowercase",
    "add_eos",
    "errors",
    "heldout_chars",
    "valid_chars",
)


@dataclass(frozen=True)
class CorpusPlan:
    """A [data] section resolved once: its preset applied, the settings that name its prepared
    folder, and that folder (nothing on disk is read)."""

    resolved: DataConfig  # the preset's values in every key the user did not set
    settings: dict[str, Any]  # `token_settings`: what changes the shards
    folder: Path  # cache_dir / "<name>-<hash of settings>"


def plan_corpus(cfg: DataConfig) -> CorpusPlan:
    """Return cfg's corpus plan: the one place a [data] section's preset is resolved."""
    resolved = apply_preset(cfg)
    settings = token_settings(cfg, resolved)
    folder = Path(resolved.cache_dir) / f"{corpus_name(resolved)}-{settings_hash(settings)}"
    return CorpusPlan(resolved, settings, folder)


def token_settings(cfg: DataConfig, resolved: DataConfig) -> dict[str, Any]:
    """Return the settings that change the prepared folder's contents (they name the folder).

    Inputs are taken as the user wrote them in `cfg` (path, train, valid, test) and never
    looked up on disk, so the same config finds the same folder on a machine that has only the
    shards. Everything else is taken from `resolved`, cfg with its preset applied.
    """
    inputs: dict[str, Any] = {"path": os.path.normpath(cfg.path) if cfg.path else ""}
    inputs.update({s: [os.path.normpath(p) for p in getattr(cfg, s)] for s in SPLITS})
    if resolved.source == "hub":
        inputs.update({k: getattr(resolved, k) for k in _HUB_KEYS + _SPLIT_KEYS})
    return {
        "format_version": FORMAT_VERSION,
        "name": corpus_name(resolved),
        "preset": cfg.preset,
        "source": resolved.source,
        "inputs": inputs,
        "shard_tokens": resolved.shard_tokens,
        **{k: getattr(resolved, k) for k in _TOKEN_KEYS},
        # only when set: the folders prepared before the key existed keep their names
        **({"word_pattern": resolved.word_pattern} if resolved.word_pattern else {}),
    }


def settings_hash(settings: dict[str, Any]) -> str:
    """Return the short hash that names a settings combination."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:10]


def default_workers() -> int:
    """Return the number of cores this process may run on (its CPU affinity), at least 1: the
    default number of preparation workers, so that preparing uses every core it is given."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def corpus_folder(cfg: DataConfig) -> Path:
    """Return the folder where prepare_corpus puts (or finds) the shards of cfg; prepares nothing."""
    return plan_corpus(cfg).folder


# ---------------------------------------------------------------- worker tasks (top level: picklable)


def _count_piece(
    piece: text_files.Piece, opts: TextOptions, on_bytes: text_files.OnBytes
) -> Counter[str]:
    blocks = text_files.iter_blocks(piece, opts.chunk_bytes, opts.errors, on_bytes)
    return vocab.count_words(blocks, opts.lowercase, opts.add_eos, opts.word_pattern)


def _encode_piece(
    piece: text_files.Piece,
    opts: TextOptions,
    stoi: dict[str, int],
    dtype: np.dtype,
    on_bytes: text_files.OnBytes,
) -> Iterator[np.ndarray]:
    for block in text_files.iter_blocks(piece, opts.chunk_bytes, opts.errors, on_bytes):
        yield vocab.encode_words(
            vocab.split_words(block, opts.lowercase, opts.add_eos, opts.word_pattern), stoi, dtype
        )


def _count_task(args: tuple[text_files.Piece, TextOptions]) -> tuple[Counter[str], int]:
    """Worker: return the word counts of a piece and the bytes read."""
    piece, opts = args
    read = [0]
    counts = _count_piece(piece, opts, lambda n: read.__setitem__(0, read[0] + n))
    return counts, read[0]


def _encode_task(
    args: tuple[text_files.Piece, TextOptions, list[str], str, str],
) -> tuple[str, int]:
    """Worker: write the ids of a piece to a file; return its path and the bytes read."""
    piece, opts, itos, dtype_name, out = args
    stoi = {w: i for i, w in enumerate(itos)}
    read = [0]
    with open_for_writing(out) as f:
        for ids in _encode_piece(
            piece, opts, stoi, np.dtype(dtype_name), lambda n: read.__setitem__(0, read[0] + n)
        ):
            f.write(ids.tobytes())
    return out, read[0]


# ---------------------------------------------------------------- orchestration


def _total(pieces: list[text_files.Piece]) -> int | None:
    sizes = [text_files.piece_size(p) for p in pieces]
    return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)


def _plan(
    cfg: DataConfig, files: dict[str, list[str]], workers: int
) -> dict[str, list[text_files.Piece]]:
    """Return the pieces of each split, cut for the workers."""
    if cfg.heldout_chars:
        text = [f for s in SPLITS for f in files.get(s, [])]
        pieces = text_files.char_cut(text, cfg.heldout_chars, cfg.valid_chars, cfg.chunk_bytes)
    else:
        pieces = {s: [text_files.Piece(f) for f in files[s]] for s in SPLITS if files.get(s)}
    planned: dict[str, list[text_files.Piece]] = {}
    for split, parts in pieces.items():
        total = _total(parts) or 0
        unit = max(cfg.chunk_bytes, min(MAX_PIECE_BYTES, math.ceil(total / (4 * workers))))
        planned[split] = [q for p in parts for q in text_files.subdivide(p, unit)]
    return planned


def _input_files(cfg: DataConfig, work: Path, progress: bool | str) -> dict[str, list[str]]:
    """Return the local text files of each split, downloading a hub dataset into work/ first."""
    if cfg.source == "hub":
        if not cfg.hub_id:
            raise ConfigError(
                'data.hub_id must be set when data.source = "hub" (e.g. "Salesforce/wikitext")'
            )
        with progress_meter(progress, f"{corpus_name(cfg)}: download", None) as bar:
            return hub.download_hub(
                cfg, work / "download", joined=cfg.heldout_chars > 0, on_bytes=bar.update
            )
    if not cfg.train:
        raise ConfigError(
            'data.train is empty; set data.train = ["path/to/train.txt"] (paths or globs) or a data.preset'
        )
    text_files.check_preset_path(cfg)
    return {s: text_files.expand(getattr(cfg, s), s) for s in SPLITS if getattr(cfg, s)}


def _file_stats(files: dict[str, list[str]]) -> list[dict[str, Any]]:
    out = []
    for path in dict.fromkeys(f for fs in files.values() for f in fs):
        st = os.stat(path)
        out.append(
            {
                "path": os.path.abspath(path),
                "bytes": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                # no call sets ctime back, as os.utime does mtime: an edit always changes it
                "ctime_ns": st.st_ctime_ns,
                "sha256": sha256_file(Path(path)),
            }
        )
    return out


def check_inputs_unchanged(manifest: dict[str, Any], folder: Path) -> None:
    """Raise DataError when a text file that `folder` was prepared from now holds other bytes
    (its size differs, or its sha256 where its size, mtime or ctime changed: an mtime set back
    leaves the ctime of the edit); a file that is gone is fine (the shards may have been
    copied without it)."""
    for item in manifest.get("input_files", []):
        try:
            st = os.stat(item["path"])
        except OSError:
            continue
        recorded = (item["bytes"], item["mtime_ns"], item.get("ctime_ns", st.st_ctime_ns))
        if (st.st_size, st.st_mtime_ns, st.st_ctime_ns) == recorded:
            continue
        if st.st_size != item["bytes"]:
            what = f"{item['bytes']:,} bytes then, {st.st_size:,} now"
        elif "sha256" not in item:  # prepared before the manifest recorded it
            what = "modified since, and the manifest has no sha256 to compare"
        elif sha256_file(Path(item["path"])) != item["sha256"]:
            what = "same size, other bytes"
        else:
            continue  # rewritten or touched with the same bytes
        raise DataError(
            f"{item['path']} changed since {folder} was prepared from it ({what}); delete "
            f"{folder} to prepare it again from the new text, or restore the file"
        )


class _Runner:
    """Runs tasks in order in a pool of processes, started when first needed."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pool: Any = None

    def parallel(self, tasks: int) -> bool:
        """Return whether that many tasks go to the pool (else they run in this process)."""
        return self.workers > 1 and tasks > 1

    def map(self, fn: Callable[[Any], Any], tasks: list[Any]) -> Iterator[Any]:
        """Return fn over tasks, in order, computed by the pool."""
        if self.pool is None:
            self.pool = _context().Pool(self.workers, _obedient, (os.getpid(),))
        return self.pool.imap(fn, tasks)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


def _count(
    runner: _Runner,
    pieces: list[text_files.Piece],
    opts: TextOptions,
    progress: bool | str,
    desc: str,
) -> Counter[str]:
    counts: Counter[str] = Counter()
    with progress_meter(progress, desc, _total(pieces)) as bar:
        if not runner.parallel(len(pieces)):
            for piece in pieces:
                counts.update(_count_piece(piece, opts, bar.update))
        else:
            for partial, nbytes in runner.map(_count_task, [(p, opts) for p in pieces]):
                counts.update(partial)
                bar.update(nbytes)
    return counts


def _encode(
    runner: _Runner,
    pieces: list[text_files.Piece],
    opts: TextOptions,
    itos: list[str],
    writer: ShardWriter,
    work: Path,
    progress: bool | str,
    desc: str,
) -> int:
    """Append the tokens of the pieces to writer; return how many are <unk>."""
    unknown = 0
    with progress_meter(progress, desc, _total(pieces)) as bar:
        if not runner.parallel(len(pieces)):
            stoi = {w: i for i, w in enumerate(itos)}
            for piece in pieces:
                for ids in _encode_piece(piece, opts, stoi, writer.dtype, bar.update):
                    unknown += int(np.count_nonzero(ids == 0))
                    writer.append(ids)
            return unknown
        units = work / "units"
        units.mkdir(exist_ok=True)
        tasks = [
            (p, opts, itos, writer.dtype.name, str(units / f"{writer.split}_{i:06d}.ids"))
            for i, p in enumerate(pieces)
        ]
        for out, nbytes in runner.map(_encode_task, tasks):
            with open(out, "rb") as f:
                while block := f.read(1 << 24):
                    ids = np.frombuffer(block, dtype=writer.dtype)
                    unknown += int(np.count_nonzero(ids == 0))
                    writer.append(ids)
            os.remove(out)
            bar.update(nbytes)
    return unknown


def _build(
    cfg: DataConfig, settings: dict[str, Any], work: Path, workers: int, progress: bool | str
) -> dict[str, Any]:
    """Write tokenizer.json, the shards and manifest.json of cfg into work/; return the manifest."""
    started = time.time()
    name = corpus_name(cfg)
    files = _input_files(cfg, work, progress)
    pieces = _plan(cfg, files, workers)
    counted_from = time.time()
    opts = TextOptions(cfg.chunk_bytes, cfg.errors, cfg.lowercase, cfg.add_eos, cfg.word_pattern)
    runner = _Runner(workers)
    try:
        counts = _count(runner, pieces["train"], opts, progress, f"{name}: vocabulary (train)")
        timings = {
            "plan": round(counted_from - started, 2),
            "count": round(time.time() - counted_from, 2),
        }
        train_words = sum(counts.values())
        pattern = f" and data.word_pattern = {cfg.word_pattern!r}" if cfg.word_pattern else ""
        if not train_words:
            raise DataError(
                f"split 'train' of {name} has no words (files: {', '.join(files.get('train', []))}); HINT: check data.train{pattern}"
            )
        itos = vocab.build_vocab(counts, cfg.min_count, cfg.max_vocab)
        words = len(itos) - len(vocab.SPECIALS)
        if words < 2:
            raise DataError(
                f"the vocabulary of {name} has {words} word(s) besides <unk> and <eos> (min_count = {cfg.min_count}, "
                f"{len(counts)} distinct train words); HINT: "
                + ("lower data.min_count or " if cfg.min_count > 1 else "")  # 1 keeps every word
                + "use more training text"
                + (f", or raise data.max_vocab = {cfg.max_vocab}" if cfg.max_vocab else "")
                + (
                    f", or check data.word_pattern = {cfg.word_pattern!r}"
                    if cfg.word_pattern
                    else ""
                )
            )
        kept = sum(counts[w] for w in itos[len(vocab.SPECIALS) :])
        del counts
        vhash = vocab.vocab_hash(itos)
        dtype = vocab.token_dtype(len(itos))
        vocab.save_tokenizer(itos, work / TOKENIZER, cfg.lowercase, cfg.add_eos, cfg.word_pattern)
        vocab.check_tokenizer_reads(
            work / TOKENIZER,
            _sample(pieces["train"][0], opts),
            itos,
            cfg.lowercase,
            cfg.add_eos,
            cfg.word_pattern,
        )
        splits: dict[str, Any] = {}
        encode_from = time.time()
        timings["vocab"] = round(encode_from - counted_from - timings["count"], 2)
        for split, parts in pieces.items():
            writer = ShardWriter(work, split, cfg.shard_tokens, dtype, len(itos), vhash)
            unknown = _encode(
                runner, parts, opts, itos, writer, work, progress, f"{name}: encode {split}"
            )
            shards = writer.close()
            tokens = sum(s["tokens"] for s in shards)
            if not tokens:
                raise DataError(
                    f"split {split!r} of {name} is empty (no words); HINT: check data.{split} or the held-out sizes"
                )
            splits[split] = {"tokens": tokens, "unk_tokens": unknown, "shards": shards}
        timings["encode"] = round(time.time() - encode_from, 2)
    finally:
        runner.close()
    log.debug("data: %s phases (s): %s", name, timings)
    shutil.rmtree(work / "units", ignore_errors=True)
    shutil.rmtree(work / "download", ignore_errors=True)
    manifest = {
        "format": "hornn_dist-shards",
        "format_version": FORMAT_VERSION,
        "name": name,
        "settings_hash": settings_hash(settings),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(time.time() - started, 2),
        "phase_seconds": timings,
        "dtype": dtype.name,
        "header_bytes": 64,
        "vocab_size": len(itos),
        "vocab_hash": vhash,
        "specials": {w: i for i, w in enumerate(vocab.SPECIALS)},
        "tokenizer": TOKENIZER,
        "tokenizer_sha256": sha256_file(work / TOKENIZER),
        "train_word_coverage": round(kept / max(train_words, 1), 6),
        "splits": splits,
        "settings": settings,
        "config": dataclasses.asdict(cfg),
        "input_files": _file_stats(files) if cfg.source == "files" else [],
    }
    write_json(work / MANIFEST, manifest)
    return manifest


def _sample(piece: text_files.Piece, opts: TextOptions) -> str:
    """Return the first SAMPLE_CHARS characters of a piece's text."""
    blocks = text_files.iter_blocks(piece, min(opts.chunk_bytes, 4 * SAMPLE_CHARS), opts.errors)
    try:
        return next(iter(blocks), "")[:SAMPLE_CHARS]
    finally:
        getattr(blocks, "close", lambda: None)()  # the file, closed now


def _remove_stale(folder: Path) -> None:
    """Delete temporary folders of earlier runs of this host whose process is gone."""
    host = socket.gethostname()
    for tmp in folder.parent.glob(f"{folder.name}.tmp-*"):
        owner, _, pid = tmp.name.rsplit(".tmp-", 1)[1].rpartition("-")
        if owner != host or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except PermissionError:
            pass


def _summary(manifest: dict[str, Any]) -> str:
    sizes = ", ".join(f"{s} {v['tokens']:,}" for s, v in manifest["splits"].items())
    return f"vocab {manifest['vocab_size']:,} ({manifest['dtype']}), tokens: {sizes}"


def prepare_corpus(
    cfg: DataConfig, workers: int = 1, progress: bool | str = True, verify: bool = False
) -> Path:
    """Return the shard folder of cfg's corpus, preparing it first unless it is already complete.

    When the folder exists this is a no-op (headers and sizes checked; sha256 too with verify;
    its source files, where present, unchanged) that imports neither `datasets` nor, without
    a data.word_pattern (checked by the tokenizer's regex engine), `tokenizers`.
    """
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    plan = plan_corpus(cfg)
    resolved, settings, folder = plan.resolved, plan.settings, plan.folder
    if (folder / MANIFEST).exists():
        corpus = open_corpus(folder, verify=verify)
        check_inputs_unchanged(corpus.manifest, folder)
        log.info(
            "data: %s is already prepared (%s); nothing to do", folder, _summary(corpus.manifest)
        )
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(folder)
    work = folder.with_name(f"{folder.name}.tmp-{socket.gethostname()}-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    try:
        work.mkdir()
        manifest = _run_apart(_build, (resolved, settings, work, workers, progress), folder)
        if folder.exists() and not (folder / MANIFEST).exists():
            shutil.rmtree(folder)  # an incomplete folder under the final name: not ours to keep
        try:
            os.rename(work, folder)
        except OSError:
            if not (folder / MANIFEST).exists():
                raise
            log.info("data: %s was prepared by another process meanwhile; using it", folder)
            return folder
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log.info("data: prepared %s in %.1f s: %s", folder, manifest["seconds"], _summary(manifest))
    return folder


# ---------------------------------------------------------------- the preparing child process


def _context() -> Any:
    """Return the multiprocessing context: fork where there is one (no `if __name__ ==
    "__main__"` guard needed in the caller's script), else spawn."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _run_apart(fn: Callable[..., Any], args: tuple[Any, ...], folder: Path) -> Any:
    """Return fn(*args) computed in a child process (its own process group, with its workers).

    Here the main thread only waits, so the GIL stays free for a heartbeat thread whatever the
    child runs; SIGTERM or SIGINT (while this is the main thread) end the child and its workers
    at once and raise DataError. The child's errors are raised here as they were raised there.
    """
    context = _context()
    receive, send = context.Pipe(duplex=False)
    caught: list[int] = []
    previous = _catch_stop_signals(caught)
    child = context.Process(target=_child, args=(send, os.getpid(), fn, args), name="prepare")
    finished = False
    try:
        child.start()
        send.close()
        while not receive.poll(0.1) and child.is_alive() and not caught:
            pass
        if caught:  # the child may have died of the same signal (sent to every process)
            raise DataError(
                f"stopped by {signal.Signals(caught[0]).name} while preparing {folder}; "
                "nothing was kept: run the command again to prepare it"
            )
        try:
            kind, value = receive.recv()
        except EOFError:
            child.join()
            raise DataError(_ended_without_result(child.exitcode, folder)) from None
        child.join(30)
        finished = True
    finally:
        if child.pid is not None and (not finished or child.is_alive()):
            _end_group(child)
        receive.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if kind == "error":
        raise value
    return value


def _catch_stop_signals(caught: list[int]) -> dict[int, Any]:
    """Record SIGTERM and SIGINT in `caught` (main thread only); return the handlers replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda received, frame: caught.append(received))
    return {s: h for s, h in previous.items() if h is not None}  # None: set outside Python


def _end_group(child: Any) -> None:
    """Kill the child and its workers (its process group) and reap the child."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (OSError, AttributeError):  # not yet its own group, gone, or no killpg (Windows)
        pass
    child.kill()
    child.join()


def _ended_without_result(code: int | None, folder: Path) -> str:
    if code == -signal.SIGKILL:
        how = "killed by SIGKILL: out of memory, or killed from outside"
    elif code is not None and code < 0:
        how = f"stopped by {signal.Signals(-code).name} from outside"
    else:
        how = f"exit code {code}"
    return (
        f"the process preparing {folder} ended without a result ({how}); nothing was kept: "
        "run the command again to prepare it"
    )


def _child(send: Any, parent: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Child process: send ("done", fn(*args)) or ("error", the exception) to the parent."""
    if hasattr(os, "setpgid"):  # the parent ends it and its workers with one killpg
        os.setpgid(0, 0)
    _obedient(parent)
    try:
        message: tuple[str, Any] = ("done", fn(*args))
    except (HornnError, OSError) as err:
        message = ("error", err)
    except BaseException as err:  # a bug: its traceback here, one line in the parent
        traceback.print_exc()
        message = ("error", RuntimeError(described(err)))
    try:
        send.send(message)
    except Exception as err:  # an exception that does not pickle
        send.send(("error", RuntimeError(described(err))))
    send.close()


def _obedient(parent: int) -> None:
    """Make a preparing process leave SIGINT to its parent, end at once on SIGTERM (it may be in
    a long regex call) and, on Linux, end when its parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)
