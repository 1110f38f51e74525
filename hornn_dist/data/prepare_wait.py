"""Prepare a corpus once for all the processes of a run: one prepares, the others wait on its files.

No collective is held while preparing (it may take longer than any collective timeout): the
preparing process writes a heartbeat file beside the corpus folder while it works and, if it
fails, a failure marker holding its one-line error; the others poll the folder, the heartbeat
and the marker (`prepare_or_wait`; docs/data.md).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hornn_dist.data.config import DataConfig
from hornn_dist.data.pipeline import corpus_folder, default_workers, prepare_corpus
from hornn_dist.data.shards import MANIFEST
from hornn_dist.util.errors import DataError, HornnError, described
from hornn_dist.util.files import write_text

log = logging.getLogger(__name__)
WAIT_LOG_S = 30.0  # a waiting process says what it waits for this often
HEARTBEAT_S = 2.0  # the preparing process rewrites its heartbeat file this often
LONG_WAIT_S = 10.0  # a wait for the preparation longer than this is a warning, else INFO


def failure_marker(folder: Path) -> Path:
    """Return the file where the preparing process writes the one line of its failure."""
    return folder.with_name(f"{folder.name}.failed")


def heartbeat_file(folder: Path) -> Path:
    """Return the file the preparing process rewrites every HEARTBEAT_S seconds."""
    return folder.with_name(f"{folder.name}.heartbeat")


def prepare_or_wait(
    cfg: DataConfig, accelerator: Any, progress: bool | str = False, poll_s: float = 0.5
) -> Path:
    """Return the prepared folder of `cfg`: prepared by this process, or waited for.

    The preparing process is the run's first (data.cache_shared = true: every machine sees
    cache_dir) or each machine's first (false: a cache_dir of its own); it uses every core it
    may use. The others wait, with no collective (preparing may take longer than any
    collective timeout), for the folder's manifest.json (written last, the folder renamed
    into place when complete) with the heartbeat file gone (written before the others look,
    removed when the preparing process is done: an existing folder may still be refused,
    e.g. for a changed source text) or for the failure marker, logging what they wait for every
    30 s. Meanwhile a thread of the preparing process rewrites a heartbeat file beside the
    folder; a waiter that sees it still for data.prepare_timeout seconds (the process was
    stopped, died or its machine hangs) ends with one line. A failed preparation ends every
    process with the same one line: the preparing process writes it to the marker, the others
    raise it. The only collectives are at the start (all present: an earlier run's marker is
    gone before anyone looks) and after a failure (all present: everyone has read the line
    before the launcher stops the processes)."""
    bars = progress if accelerator.is_main_process else False  # "lines" stays lines
    if accelerator.num_processes == 1:
        return prepare_corpus(cfg, workers=default_workers(), progress=bars)
    folder = corpus_folder(cfg)
    marker = failure_marker(folder)
    prepares = (
        accelerator.is_main_process if cfg.cache_shared else accelerator.is_local_main_process
    )
    beat = heartbeat_file(folder)
    if prepares:
        marker.unlink(missing_ok=True)
        folder.parent.mkdir(parents=True, exist_ok=True)
        _write_line(beat, "0")  # there before the others look: they wait while it is
    accelerator.wait_for_everyone()
    if prepares:
        try:
            with _beating(beat):  # removed last, after a failure's marker is written
                try:
                    return prepare_corpus(cfg, workers=default_workers(), progress=bars)
                except Exception as err:
                    line = str(err) if isinstance(err, HornnError) else _unexpected(err, folder)
                    _write_line(marker, line)
                    raise
        except Exception:
            _barrier_quietly(accelerator)
            raise
    return _wait_for(folder, marker, accelerator, cfg, poll_s)


@contextmanager
def _beating(beat: Path) -> Iterator[None]:
    """Rewrite `beat` with a growing count every HEARTBEAT_S seconds from a thread while the
    block runs (a stopped or dead process stops it); remove it afterwards."""
    done = threading.Event()

    def beat_until_done() -> None:
        count = 0
        while True:
            count += 1
            _write_line(beat, str(count))
            if done.wait(HEARTBEAT_S):
                return

    thread = threading.Thread(target=beat_until_done, name="prepare-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        beat.unlink(missing_ok=True)


def _unexpected(err: BaseException, folder: Path) -> str:
    return f"preparing {folder} failed on {socket.gethostname()} ({described(err)})"


def _write_line(path: Path, line: str) -> None:
    """Write one line to path at once (a reader sees all of it or no file)."""
    try:
        write_text(path, line + "\n")
    except OSError:  # the others then stop with the launcher; this process's error still shows
        pass


def _barrier_quietly(accelerator: Any) -> None:
    """Meet the others; a peer already gone must not replace the error being raised."""
    try:
        accelerator.wait_for_everyone()
    except RuntimeError:
        pass


def _read_beat(beat: Path) -> str | None:
    """Return the heartbeat file's content, None while there is none."""
    try:
        return beat.read_text(encoding="utf-8")
    except OSError:
        return None


def _wait_for(folder: Path, marker: Path, accelerator: Any, cfg: DataConfig, poll_s: float) -> Path:
    """Wait until folder is prepared (return it), its preparation failed, or the preparing
    process's heartbeat stood still for data.prepare_timeout seconds (raise DataError)."""
    rank = accelerator.process_index
    who = (
        "rank 0"
        if cfg.cache_shared
        else f"this machine's first process (rank {rank - accelerator.local_process_index})"
    )
    beat = heartbeat_file(folder)
    started = time.monotonic()
    next_log = started + LONG_WAIT_S  # a short wait (the usual start) says nothing
    last_beat, moved = _read_beat(beat), started  # by this clock: another machine's may differ
    while True:
        # a complete folder is not enough (an earlier run's may be refused): the heartbeat must
        # be gone too, and is looked at before the marker, which is written before it goes
        settled = not beat.exists()
        if marker.is_file():
            line = marker.read_text(encoding="utf-8").strip()
            _barrier_quietly(accelerator)
            raise DataError(line)
        if settled and (folder / MANIFEST).is_file():
            break
        now = time.monotonic()
        current = _read_beat(beat)
        if current != last_beat:
            last_beat, moved = current, now
        elif now - moved > cfg.prepare_timeout:
            # no barrier: the preparing process would never reach it
            raise DataError(
                f"rank {rank}: {who} preparing {folder} shows no sign of life: its heartbeat "
                f"{beat} has not moved for {now - moved:.0f} s (data.prepare_timeout = "
                f"{cfg.prepare_timeout}); it was stopped, died or its machine hangs: see its "
                "log and run again (the preparation restarts), or raise data.prepare_timeout"
            )
        if now >= next_log:
            log.warning(
                "rank %d: waiting for %s to prepare %s (%.0f s so far; its heartbeat moved "
                "%.0f s ago, data.prepare_timeout = %d s)",
                rank,
                who,
                folder,
                now - started,
                now - moved,
                cfg.prepare_timeout,
            )
            next_log = now + WAIT_LOG_S
        time.sleep(poll_s)
    waited = time.monotonic() - started
    level = logging.WARNING if waited >= LONG_WAIT_S else logging.INFO
    log.log(level, "rank %d: %s is prepared; waited %.1f s", rank, folder, waited)
    return folder
