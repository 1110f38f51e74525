"""The hub source, through `datasets` streaming on local parquet files; offline and script errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hornn_dist.data.config import DataConfig
from hornn_dist.data.pipeline import prepare_corpus
from hornn_dist.data.shards import open_corpus
from hornn_dist.errors import DataError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROWS = {
    "train": [" the cat sat on the mat ", "a dog sat\n", "", " the end = "],
    "validation": ["the cat", "unknown words here"],
    "test": ["on the mat"],
}


def _parquet(tmp_path: Path, rows: dict[str, list[str]], column: str = "text") -> dict[str, str]:
    paths = {}
    for split, texts in rows.items():
        path = tmp_path / f"{split}.parquet"
        pq.write_table(pa.table({column: texts, "id": list(range(len(texts)))}), path)
        paths[split] = str(path)
    return paths


def test_hub_path_streams_a_local_parquet_dataset(tmp_path: Path) -> None:
    files = _parquet(tmp_path, ROWS, column="sentence")
    cfg = DataConfig(
        source="hub",
        hub_id="parquet",
        train=[files["train"]],
        valid=[files["validation"]],
        test=[files["test"]],
        text_column="sentence",
        cache_dir=str(tmp_path / "cache"),
    )
    corpus = open_corpus(prepare_corpus(cfg, progress=False))
    assert corpus.folder.name.startswith("parquet-")
    for split, texts in (
        ("train", ROWS["train"]),
        ("valid", ROWS["validation"]),
        ("test", ROWS["test"]),
    ):
        expected = "".join(" ".join(t.split()) + "\n" for t in texts)  # one row = one line + <eos>
        expected = "\n".join(
            " ".join(w if w in corpus.itos() else "<unk>" for w in line.split())
            for line in expected.split("\n")
        )
        ids = corpus.split(split).read(0, len(corpus.split(split)))
        assert corpus.decode(ids) == expected
    assert len(corpus.split("train")) == 12 + 4
    assert not list((tmp_path / "cache").glob("*/download"))  # the downloaded text is not kept


def test_joined_hub_rows_form_one_text_for_the_character_cut(tmp_path: Path) -> None:
    text = " ".join(f"w{i % 7}" for i in range(3000))
    rows = {
        "train": [text[:9000]],
        "validation": [text[9000:11000]],
        "test": [text[11000:]],
    }  # like afmck/text8
    files = _parquet(tmp_path, rows)
    cfg = DataConfig(
        source="hub",
        hub_id="parquet",
        train=[files["train"]],
        valid=[files["validation"]],
        test=[files["test"]],
        add_eos=False,
        heldout_chars=2000,
        valid_chars=700,
        cache_dir=str(tmp_path / "cache"),
    )
    corpus = open_corpus(prepare_corpus(cfg, progress=False))
    n = len(text)
    parts = {
        "train": text[: n - 2000],
        "valid": text[n - 2000 : n - 1300],
        "test": text[n - 1300 :],
    }
    for split, part in parts.items():
        ids = corpus.split(split).read(0, len(corpus.split(split)))
        assert corpus.decode(ids) == " ".join(
            w if w in corpus.itos() else "<unk>" for w in part.split()
        )


def test_missing_column_is_a_one_line_error(tmp_path: Path) -> None:
    files = _parquet(tmp_path, ROWS)
    cfg = DataConfig(
        source="hub",
        hub_id="parquet",
        train=[files["train"]],
        text_column="body",
        cache_dir=str(tmp_path / "c"),
    )
    with pytest.raises(
        DataError, match=r"no column 'body' \(columns: text, id\); HINT: set data.text_column"
    ):
        prepare_corpus(cfg, progress=False)
    assert list((tmp_path / "c").iterdir()) == []


def test_script_based_dataset_points_to_the_parquet_conversion(tmp_path: Path) -> None:
    repo = tmp_path / "ptb_text_only"
    repo.mkdir()
    (repo / "ptb_text_only.py").write_text("# a dataset script\n")
    cfg = DataConfig(source="hub", hub_id=str(repo), cache_dir=str(tmp_path / "c"))
    with pytest.raises(
        DataError, match=r'script-based.*HINT: .*hub_revision = "refs/convert/parquet"'
    ) as e:
        prepare_corpus(cfg, progress=False)
    assert "\n" not in str(e.value)


def test_offline_hub_says_to_use_local_files(tmp_path: Path) -> None:
    code = (
        "from hornn_dist.data.config import DataConfig\n"
        "from hornn_dist.data.pipeline import prepare_corpus\n"
        "from hornn_dist.errors import DataError\n"
        "try:\n"
        f"    prepare_corpus(DataConfig(preset='wikitext103', cache_dir={str(tmp_path / 'c')!r}), progress=False)\n"
        "except DataError as e:\n"
        "    print(e)\n"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    ).stdout
    assert out.startswith("cannot reach the Hugging Face hub for hub dataset 'Salesforce/wikitext'")
    assert (
        'HINT: use local files: data.source = "files" with data.train, data.valid, data.test' in out
    )
    assert out.count("\n") == 1
