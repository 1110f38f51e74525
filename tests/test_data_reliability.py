"""Preparation that cannot silently go wrong or hang: the saved tokenizer's own matcher cuts a
`data.word_pattern`'s words, a changed source text is refused, a backtracking pattern and a stop
signal end preparation within seconds, and the heartbeat moves while the preparing code holds
the GIL."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hornn_dist.config import load_config
from hornn_dist.data import pipeline, prepare_wait, vocab
from hornn_dist.data.config import DataConfig
from hornn_dist.data.pipeline import prepare_corpus
from hornn_dist.data.shards import open_corpus
from hornn_dist.runtime import StopFlag
from hornn_dist.util.errors import ConfigError, DataError
from tests.test_checkpoint_files import VOCAB_HASH, compatible, make_checkpoint

REPO = Path(__file__).resolve().parents[1]
TEXT = "hello world\nthe cat sat on the mat\nhello cat\n" * 3


def _cfg(tmp_path: Path, text: str, **kw) -> DataConfig:
    train = tmp_path / "train.txt"
    train.write_text(text, encoding="utf-8")
    return DataConfig(train=[str(train)], cache_dir=str(tmp_path / "cache"), **kw)


def _train_ids(folder: Path) -> list[int]:
    reader = open_corpus(folder).split("train")
    return reader.read(0, len(reader)).tolist()


def _tokenizer_ids(folder: Path, text: str) -> list[int]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).ids


# ---------------------------------------------------------------- one matcher (item 1)


@pytest.mark.parametrize("pattern", ["([a-z])[a-z]*", "([a-z])([a-z]*)"])
def test_a_pattern_with_groups_prepares_whole_words_as_the_tokenizer_reads_them(
    tmp_path: Path, pattern: str
) -> None:
    folder = prepare_corpus(_cfg(tmp_path, TEXT, word_pattern=pattern), progress=False)
    ids = _train_ids(folder)
    words = open_corpus(folder).decode(ids).split()
    assert words[:3] == ["hello", "world", "the"]
    assert ids == _tokenizer_ids(folder, TEXT)


def test_unicode_classes_and_nfd_text_split_as_the_tokenizer_splits_them(tmp_path: Path) -> None:
    # Python's \w and Oniguruma's differ: a combining accent (NFD "é") is a word character for
    # Oniguruma only, a superscript digit for Python only
    text = "cafe\u0301 x\u00b2 na\u0308ive\nword cafe\u0301\n" * 2
    folder = prepare_corpus(_cfg(tmp_path, text, word_pattern=r"\w+"), progress=False)
    assert _train_ids(folder) == _tokenizer_ids(folder, text)
    assert "cafe\u0301" in open_corpus(folder).itos()


@pytest.mark.parametrize("pattern", ["(?=a)", r"\b", "a|(?=b)"])
def test_a_pattern_that_matches_empty_words_is_refused_at_config_time(pattern: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"data.word_pattern='{pattern}'"])
    line = str(err.value)
    assert "data.word_pattern" in line and "empty" in line and "\n" not in line
    assert "min_count" not in line


def test_the_agreement_check_names_a_tokenizer_that_reads_otherwise(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    itos = ["<unk>", "<eos>", "the", "cat", "The", "Cat"]
    vocab.save_tokenizer(itos, path, lowercase=True, add_eos=True)  # lowercases; we do not
    sample = "The Cat\nthe cat\n"
    vocab.check_tokenizer_reads(path, sample, itos, lowercase=True, add_eos=True)
    with pytest.raises(DataError) as err:
        vocab.check_tokenizer_reads(path, sample, itos, lowercase=False, add_eos=True)
    line = str(err.value)
    assert str(path) in line and "'The'" in line and "\n" not in line


# ---------------------------------------------------------------- changed source (item 3)


def test_a_changed_source_text_is_refused_with_one_line(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, TEXT)
    folder = prepare_corpus(cfg, progress=False)
    train = Path(cfg.train[0])
    train.write_text(TEXT, encoding="utf-8")  # same text, new mtime: still the same corpus
    os.utime(train, ns=(0, 123_456_789))
    assert prepare_corpus(cfg, progress=False) == folder
    train.write_text(TEXT.replace("cat", "dog"), encoding="utf-8")
    with pytest.raises(DataError) as err:
        prepare_corpus(cfg, progress=False)
    line = str(err.value)
    assert str(train) in line and str(folder) in line and "delete" in line and "\n" not in line


def test_allow_corpus_change_says_the_text_changed_and_what_happens(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = make_checkpoint(tmp_path, 10, corpus_hash="a" * 64)
    allowed = load_config(None, ["train.allow_corpus_change=true"])
    with caplog.at_level(logging.WARNING, logger="hornn_dist.train"):
        compatible(folder, allowed, VOCAB_HASH, "b" * 64)
    assert "training text changed" in caplog.text and "step 10" in caplog.text


# ---------------------------------------------------------------- hangs (item 5)

_PREPARE = """
import sys
from hornn_dist.data.config import DataConfig
from hornn_dist.data.pipeline import prepare_corpus
from hornn_dist.util.errors import HornnError
cfg = DataConfig(train=[sys.argv[1]], cache_dir=sys.argv[2], word_pattern=sys.argv[3])
try:
    print(prepare_corpus(cfg, progress=False))
except HornnError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(2)
"""


def _prepare_elsewhere(tmp_path: Path, text: str, pattern: str) -> subprocess.CompletedProcess:
    """Prepare in another process (a pattern that hangs must not hang the test run)."""
    train = tmp_path / "train.txt"
    train.write_text(text, encoding="utf-8")
    args = [sys.executable, "-c", _PREPARE, str(train), str(tmp_path / "cache"), pattern]
    return subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=60)


def test_a_catastrophically_backtracking_pattern_prepares(tmp_path: Path) -> None:
    done = _prepare_elsewhere(tmp_path, "a" * 40 + "\nhello world\n" * 3, "(?:a+)+b|[a-z]+")
    assert done.returncode == 0, done.stderr  # within _prepare_elsewhere's timeout
    assert "a" * 40 in open_corpus(Path(done.stdout.strip())).itos()


def test_a_pattern_that_cannot_finish_is_one_line_naming_the_key(tmp_path: Path) -> None:
    done = _prepare_elsewhere(tmp_path, "hello world\n" + "a" * 40 + "\n", "(?:a|aa)+b|[a-z]+")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: data.word_pattern") and done.stderr.count("\n") == 1
    assert not list((tmp_path / "cache").glob("*.tmp-*"))


def _children() -> list[int]:
    """Return the ids of this process's live child processes (Linux)."""
    found = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_preparation_before_it_finishes(tmp_path: Path, signum: int) -> None:
    # each word costs both regex engines milliseconds of backtracking: about 10 s in all
    cfg = _cfg(
        tmp_path, ("a" * 24 + " ") * 600 + "\nhello world\n", word_pattern="(?:a|aa)+b|[a-z]+"
    )
    before = set(_children())
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    flag = StopFlag()
    flag.install()  # as `train` does before it prepares
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signum))
    try:
        timer.start()
        with pytest.raises(DataError) as err:  # unstopped, it would finish and return
            prepare_corpus(cfg, workers=1, progress=False)
        assert signal.getsignal(signal.SIGTERM) == flag._handle  # the run's handler is back
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
    line = str(err.value)
    assert signal.Signals(signum).name in line and "\n" not in line
    assert not list((tmp_path / "cache").glob("*.tmp-*"))
    deadline = time.monotonic() + 5
    while set(_children()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(_children()) - before


def test_a_preparing_process_killed_from_outside_is_one_line(tmp_path: Path) -> None:
    cfg = _cfg(
        tmp_path, ("a" * 24 + " ") * 600 + "\nhello world\n", word_pattern="(?:a|aa)+b|[a-z]+"
    )
    before = set(_children())

    def kill_the_child() -> None:  # as the kernel's OOM killer would
        for pid in set(_children()) - before:
            os.kill(pid, signal.SIGKILL)

    timer = threading.Timer(1.0, kill_the_child)
    timer.start()
    try:
        with pytest.raises(DataError) as err:
            prepare_corpus(cfg, workers=1, progress=False)
    finally:
        timer.cancel()
    line = str(err.value)
    assert "ended without a result (killed by SIGKILL" in line and "\n" not in line
    assert not list((tmp_path / "cache").glob("*.tmp-*"))


# ---------------------------------------------------------------- heartbeat (item 6)


def test_the_heartbeat_moves_while_preparation_holds_the_gil(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg(tmp_path, TEXT)
    window = tmp_path / "window.txt"
    real_build = pipeline._build

    def build_after_a_long_regex(*args, **kwargs):
        started = time.time()
        re.match(r"(?:a+)+b", "a" * 24)  # one C call, about 0.5 s, the GIL held throughout
        window.write_text(f"{started} {time.time()}")
        return real_build(*args, **kwargs)

    monkeypatch.setattr(pipeline, "_build", build_after_a_long_regex)
    monkeypatch.setattr(prepare_wait, "HEARTBEAT_S", 0.05)
    beat = tmp_path / "corpus.heartbeat"
    seen: list[tuple[float, str]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                seen.append((time.time(), beat.read_text()))
            except OSError:
                pass
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with prepare_wait._beating(beat):
            prepare_corpus(cfg, progress=False)
    finally:
        done.set()
        watcher.join()
    start, end = map(float, window.read_text().split())
    inside = {value for when, value in seen if start < when < end}
    assert end - start > 0.2
    assert len(inside) >= 3, (end - start, seen[:5])


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_every_rank_stops_with_the_same_line_when_the_source_changed(tmp_path: Path) -> None:
    from tests.train_helpers import launch_two_ranks, prepared_tiny

    folder = prepared_tiny(tmp_path)
    train = folder / "train.txt"
    train.write_text(train.read_text() + "one more line\n")
    args = [str(folder / "config.toml"), "--set", "train.max_steps=2"]
    proc = launch_two_ranks("hornn_dist.train", *args, "--set", "train.collective_timeout=20")
    log = proc.stdout + proc.stderr
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0, log[-4000:]
    assert len(errors) == 1 and "changed since" in errors[0], log[-4000:]
    assert log.count(f"traceback : {errors[0]}") == 2, log[-4000:]  # each rank raised it


def test_an_edit_of_the_same_size_with_its_mtime_set_back_is_caught(tmp_path: Path) -> None:
    from hornn_dist.data.pipeline import check_inputs_unchanged
    from hornn_dist.data.shards import MANIFEST
    from tests.train_helpers import prepared_tiny

    folder = prepared_tiny(tmp_path)
    [prepared] = [p for p in (folder / "cache").iterdir() if (p / MANIFEST).is_file()]
    manifest = json.loads((prepared / MANIFEST).read_text())
    check_inputs_unchanged(manifest, prepared)  # nothing changed: no error
    train = folder / "train.txt"
    before = train.stat()
    text = train.read_text()
    train.write_text(text.replace("w1", "w9", 1))  # the same size, other bytes
    os.utime(train, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime set back
    assert (train.stat().st_size, train.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    with pytest.raises(DataError, match="same size, other bytes"):
        check_inputs_unchanged(manifest, prepared)
    train.write_text(text)  # the bytes restored: the ctime moved, the sha256 says it is the same
    check_inputs_unchanged(manifest, prepared)
