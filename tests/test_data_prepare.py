"""prepare_corpus end to end on small generated files: counts, vocabulary, shards, re-runs, bad input."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from hornn_dist.data.config import DataConfig
from hornn_dist.data.pipeline import corpus_folder, prepare_corpus
from hornn_dist.data.shards import open_corpus
from hornn_dist.util.errors import ConfigError, DataError

WORDS = [f"w{i}" for i in range(300)] + ["the", "of", "N", "<unk>", "$", "'s"]


def _ptb_lines(rng: random.Random, n: int) -> list[str]:
    """Lines in Mikolov's PTB format: ' word word ... \\n'."""
    weights = [1.0 / (i + 1) for i in range(len(WORDS))]
    return [
        " " + " ".join(rng.choices(WORDS, weights, k=rng.randint(1, 25))) + " \n" for _ in range(n)
    ]


@pytest.fixture()
def ptb(tmp_path: Path) -> Path:
    rng = random.Random(0)
    folder = tmp_path / "ptb"
    folder.mkdir()
    for split, n, extra in (
        ("train", 600, ""),
        ("valid", 60, " oov1 the oov2 \n"),
        ("test", 70, ""),
    ):
        (folder / f"ptb.{split}.txt").write_text("".join(_ptb_lines(rng, n)) + extra)
    return folder


def _cfg(tmp_path: Path, **kw) -> DataConfig:
    kw.setdefault("cache_dir", str(tmp_path / "cache"))
    return DataConfig(**kw)


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(folder.iterdir())
        if p.suffix in (".bin", ".json") and p.name != "manifest.json"
    }


def test_ptb_format_counts_vocabulary_and_round_trip(tmp_path: Path, ptb: Path) -> None:
    from tokenizers import Tokenizer

    folder = prepare_corpus(_cfg(tmp_path, preset="ptb", path=str(ptb)), progress=False)
    corpus = open_corpus(folder, verify=True)
    texts = {s: (ptb / f"ptb.{s}.txt").read_text() for s in ("train", "valid", "test")}
    train_words = set(texts["train"].split())
    assert corpus.vocab_size == len(train_words | {"<unk>", "<eos>"})
    assert (
        corpus.tokenizer().get_vocab()["<unk>"] == 0
        and corpus.tokenizer().get_vocab()["<eos>"] == 1
    )
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    for split, text in texts.items():
        lines = text.splitlines()
        reader = corpus.split(split)
        assert len(reader) == sum(len(line.split()) for line in lines) + len(lines)  # words + <eos>
        ids = reader.read(0, len(reader))
        assert ids.dtype == np.uint16
        assert ids.tolist() == tokenizer.encode(text).ids  # shards == what tokenizer.json produces
        normalised = "".join(
            " ".join(w if w in train_words else "<unk>" for w in line.split()) + "\n"
            for line in lines
        )
        assert corpus.decode(ids) == normalised
    unknown = [w for w in texts["valid"].split() if w not in train_words or w == "<unk>"]
    assert "oov1" in unknown and corpus.manifest["splits"]["valid"]["unk_tokens"] == len(unknown)
    assert folder == corpus_folder(_cfg(tmp_path, preset="ptb", path=str(ptb)))


def test_workers_give_byte_identical_shards(tmp_path: Path, ptb: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text((ptb / "ptb.train.txt").read_text() * 3)
    kw = dict(
        train=[str(big)],
        valid=[str(ptb / "ptb.valid.txt")],
        test=[str(ptb / "ptb.test.txt")],
        lowercase=True,
        shard_tokens=997,
        chunk_bytes=64,
    )
    one = prepare_corpus(
        _cfg(tmp_path, cache_dir=str(tmp_path / "c1"), **kw), workers=1, progress=False
    )
    two = prepare_corpus(
        _cfg(
            tmp_path,
            cache_dir=str(tmp_path / "c2"),
            chunk_bytes=1000,
            **{k: v for k, v in kw.items() if k != "chunk_bytes"},
        ),
        workers=2,
        progress=False,
    )
    assert one.name == two.name  # chunk size and cache_dir are not part of the settings
    assert len(list(one.glob("train_*.bin"))) > 5
    assert _files(one) == _files(two)
    m1, m2 = (json.loads((f / "manifest.json").read_text()) for f in (one, two))
    assert m1["splits"] == m2["splits"]


def test_rerun_is_a_noop_and_a_changed_config_makes_a_new_folder(
    tmp_path: Path, ptb: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = _cfg(tmp_path, preset="ptb", path=str(ptb))
    folder = prepare_corpus(cfg, progress=False)
    stamps = {p: p.stat().st_mtime_ns for p in folder.iterdir()}
    with caplog.at_level(logging.INFO, logger="hornn_dist.data.pipeline"):
        assert prepare_corpus(cfg, progress=False, verify=True) == folder
    assert "already prepared" in caplog.text and "nothing to do" in caplog.text
    assert {p: p.stat().st_mtime_ns for p in folder.iterdir()} == stamps
    other = prepare_corpus(_cfg(tmp_path, preset="ptb", path=str(ptb), min_count=2), progress=False)
    assert other != folder and other.name.startswith("ptb-")
    assert open_corpus(other).vocab_size < open_corpus(folder).vocab_size
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted(
        [folder.name, other.name]
    )


def test_noop_imports_neither_datasets_nor_tokenizers(tmp_path: Path, ptb: Path) -> None:
    cfg = _cfg(tmp_path, preset="ptb", path=str(ptb))
    folder = prepare_corpus(cfg, progress=False)
    code = (
        "import sys\n"
        "from hornn_dist.data.config import DataConfig\n"
        "from hornn_dist.data.pipeline import prepare_corpus\n"
        f"f = prepare_corpus(DataConfig(preset='ptb', path={str(ptb)!r}, cache_dir={cfg.cache_dir!r}))\n"
        "bad = [m for m in ('datasets', 'tokenizers') if m in sys.modules]\n"
        "print(f, bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"{folder} []"


def test_interrupted_run_leaves_nothing_that_looks_complete(tmp_path: Path, ptb: Path) -> None:
    bad = tmp_path / "valid.txt"
    bad.write_bytes(b" fine words \n" * 50 + b" broken \xc3\x28 here \n")
    cfg = _cfg(tmp_path, train=[str(ptb / "ptb.train.txt")], valid=[str(bad)], name="broken")
    with pytest.raises(DataError, match=r"valid.txt: invalid UTF-8 at byte 658; HINT"):
        prepare_corpus(cfg, progress=False)
    cache = tmp_path / "cache"
    assert list(cache.rglob("manifest.json")) == [] and list(cache.iterdir()) == []
    replaced = prepare_corpus(
        _cfg(
            tmp_path,
            train=[str(ptb / "ptb.train.txt")],
            valid=[str(bad)],
            name="broken",
            errors="replace",
        ),
        progress=False,
    )
    assert open_corpus(replaced).manifest["splits"]["valid"]["tokens"] == 50 * 3 + 4


def test_bad_inputs_give_one_line_errors(tmp_path: Path, ptb: Path) -> None:
    train = str(ptb / "ptb.train.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n" * 0 + "   ")
    one = tmp_path / "one.txt"
    one.write_text("same same same\n")
    cases = [
        (_cfg(tmp_path, train=[str(tmp_path / "nope.txt")]), DataError, "no file matches"),
        (
            _cfg(tmp_path, preset="ptb", path=str(tmp_path / "nowhere")),
            DataError,
            r"^data.path = '.*nowhere' does not exist",
        ),
        (
            _cfg(tmp_path, train=[train], valid=[str(empty)]),
            DataError,
            "split 'valid' of corpus is empty",
        ),
        (  # min_count 1 keeps every word already: no advice to lower it
            _cfg(tmp_path, train=[str(one)], add_eos=False, min_count=1),
            DataError,
            r"has 1 word.*; HINT: use more training text$",
        ),
        (
            _cfg(tmp_path, train=[train], min_count=10**6),
            DataError,
            "has 0 word.*HINT: lower data.min_count or use more training text",
        ),
        (_cfg(tmp_path), ConfigError, "data.train is empty"),
    ]
    for cfg, kind, text in cases:
        with pytest.raises(kind, match=text) as e:
            prepare_corpus(cfg, progress=False)
        assert "\n" not in str(e.value)
        assert kind is ConfigError or "HINT" in str(e.value)
    assert list((tmp_path / "cache").iterdir()) == []


def test_text8_cut_on_a_generated_single_line_file(tmp_path: Path) -> None:
    rng = random.Random(5)
    pool = [f"x{i}" for i in range(60)]
    text = " ".join(
        rng.choices(pool, [1.0 / (i + 1) for i in range(60)], k=6000)
    )  # one line, no newline
    path = tmp_path / "text8"
    path.write_text(text)
    with zipfile.ZipFile(tmp_path / "text8.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.write(path, "text8")
    n, held, valid = len(text), 3000, 1000
    kw = dict(
        preset="text8", heldout_chars=held, valid_chars=valid, chunk_bytes=100, shard_tokens=500
    )
    folder = prepare_corpus(_cfg(tmp_path, path=str(path), **kw), progress=False)
    corpus = open_corpus(folder)
    parts = {
        "train": text[: n - held],
        "valid": text[n - held : n - held + valid],
        "test": text[n - held + valid :],
    }
    counts = Counter(parts["train"].split())
    assert corpus.itos()[2:] == sorted(
        (w for w in counts if counts[w] >= 10), key=lambda w: (-counts[w], w)
    )
    for split, part in parts.items():
        ids = corpus.split(split).read(0, len(corpus.split(split)))
        expected = [w if counts[w] >= 10 else "<unk>" for w in part.split()]
        assert [corpus.itos()[i] for i in ids] == expected  # no <eos>, exact character cut
    zipped = prepare_corpus(
        _cfg(tmp_path, path=str(tmp_path / "text8.zip"), cache_dir=str(tmp_path / "z"), **kw),
        workers=2,
        progress=False,
    )
    assert _files(zipped) == _files(folder)


def test_demo_preset_prepares_offline(tmp_path: Path) -> None:
    folder = prepare_corpus(_cfg(tmp_path, preset="demo"), progress=False)
    corpus = open_corpus(folder)
    tokens = {s: len(corpus.split(s)) for s in corpus.splits}
    assert tokens == {"train": 745_333, "valid": 38_445, "test": 38_774}
    assert corpus.vocab_size == 8_324 and corpus.manifest["dtype"] == "uint16"
    assert (
        corpus.decode(corpus.split("train").read(0, 11))
        == "in the beginning god created the heaven and the earth\n"
    )


def test_cli(tmp_path: Path, ptb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hornn_dist.prepare import main
    from hornn_dist.runtime import run_cli

    def exit_code(*argv: str) -> int | str | None:
        with pytest.raises(SystemExit) as ended:
            run_cli(main, list(argv))
        return ended.value.code

    config = tmp_path / "run.toml"
    config.write_text(
        f'[data]\npreset = "ptb"\npath = "{ptb}"\ncache_dir = "{tmp_path / "cache"}"\n'
    )
    assert exit_code(str(config), "--quiet", "--set", "data.shard_tokens=5000") == 0
    out = capsys.readouterr().out
    folder = Path(out.splitlines()[0])
    assert (folder / "manifest.json").exists() and "vocab" in out
    assert len(open_corpus(folder).manifest["splits"]["train"]["shards"]) > 1
    assert exit_code(str(config), "--quiet", "--set", "path='/nowhere'") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: data.path = '/nowhere' does not exist") and err.count("\n") == 1
    assert os.listdir(tmp_path / "cache") == [folder.name]


def test_shards_are_found_where_the_raw_text_is_gone(tmp_path: Path, ptb: Path) -> None:
    simple = tmp_path / "simple-examples"
    (simple / "data").mkdir(parents=True)
    for f in ptb.iterdir():
        (simple / "data" / f.name).write_bytes(f.read_bytes())
    cfg = _cfg(tmp_path, preset="ptb", path=str(simple))
    folder = prepare_corpus(cfg, progress=False)
    (simple / "data").rename(tmp_path / "elsewhere")  # like a GPU box that got only the shards
    assert corpus_folder(cfg) == folder
    assert prepare_corpus(cfg, progress=False) == folder


def test_worker_errors_arrive_as_the_same_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "train.txt"
    bad.write_bytes(b" some words here \n" * 400 + b"\xff\n" + b" more words \n" * 400)
    cfg = _cfg(tmp_path, train=[str(bad)], chunk_bytes=256)
    with pytest.raises(DataError, match=r"train.txt: invalid UTF-8 at byte 7200; HINT"):
        prepare_corpus(cfg, workers=2, progress=False)
    assert list((tmp_path / "cache").iterdir()) == []


# `python -c PREPARE_WITH_LINES_EVERY_0 CONFIG`: the prepare CLI with a line at every update
PREPARE_WITH_LINES_EVERY_0 = """
import sys
from hornn_dist import prepare
from hornn_dist.data import progress
from hornn_dist.runtime import run_cli

progress.LINE_EVERY_S = 0.0
run_cli(prepare.main, sys.argv[1:])
"""


def test_a_redirected_prepare_says_its_progress_in_log_lines(tmp_path: Path, ptb: Path) -> None:
    """Output to a file (no terminal): no bar redraws, but lines with the share done and the
    time left, and a closing line per step; --quiet leaves them out."""
    config = tmp_path / "run.toml"
    config.write_text(
        f'[data]\npreset = "ptb"\npath = "{ptb}"\ncache_dir = "{tmp_path / "cache"}"\n'
    )
    from tests.train_helpers import run_patched

    proc = run_patched(PREPARE_WITH_LINES_EVERY_0, str(config))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\r" not in proc.stderr  # no bar
    share = re.compile(
        r"ptb: vocabulary \(train\): [0-9.,]+ MiB of [0-9.,]+ MiB \(\d+%\), \S+ left$"
    )
    assert any(share.search(line) for line in proc.stderr.splitlines()), proc.stderr[-2000:]
    assert re.search(r"ptb: encode train: done, [0-9.,]+ MiB in ", proc.stderr), proc.stderr
    quiet = run_patched(
        PREPARE_WITH_LINES_EVERY_0, str(config), "--quiet", "--set", "data.shard_tokens=5000"
    )
    assert quiet.returncode == 0 and "MiB of" not in quiet.stderr, quiet.stderr[-2000:]


def test_progress_lines_as_a_table() -> None:
    from hornn_dist.data.progress import ProgressLines

    now = [0.0]
    lines = ProgressLines("x: encode train", 4 * 2**20, every=30.0, clock=lambda: now[0])
    now[0] = 10.0
    lines.update(2**20)
    assert lines.lines == 0  # under 30 s since the start: no line
    now[0] = 30.0
    lines.update(2**20)
    assert lines.lines == 1
    assert lines.line(30.0) == "x: encode train: 2.0 MiB of 4.0 MiB (50%), 30.0s left"
    unknown = ProgressLines("x: download", None, clock=lambda: now[0])
    unknown.update(3 * 2**20)
    assert unknown.line(90.0) == "x: download: 3.0 MiB so far (1m00s)"  # made at 30 s
