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
from hornn_dist.util.errors import DataError

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
        "from hornn_dist.util.errors import DataError\n"
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
    assert out.endswith(
        "HINT: use a local copy: put wiki.train.tokens, wiki.valid.tokens, wiki.test.tokens of "
        'WikiText-103 (the original wikitext-103-v1.zip) in the folder data/wikitext-103 and set data.path = "data/wikitext-103"\n'
    )
    assert out.count("\n") == 1


def test_an_unreachable_hub_fails_after_one_bounded_request_with_one_line(tmp_path: Path) -> None:
    # offline mode unset, as for a user who never heard of it: one HEAD to the hub's endpoint,
    # bounded by its timeout (HUB_CHECK_SECONDS), and no retries of `datasets` after it
    from huggingface_hub import constants

    from hornn_dist.data.hub import HUB_CHECK_SECONDS, _hub_unreachable

    if _hub_unreachable(constants.ENDPOINT) is None:
        pytest.skip(f"{constants.ENDPOINT} answers from this machine")
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    }
    env.update(HF_HOME=str(tmp_path / "hf"), PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, "-m", "hornn_dist.prepare", "configs/wikitext103.toml", "--quiet",
         "--set", f"data.cache_dir={tmp_path / 'c'}"],
        capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[1], timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]  # no retry warnings, printed twice or at all
    assert lines[0].startswith(
        "error: cannot reach the Hugging Face hub for hub dataset 'Salesforce/wikitext' "
        f"(config 'wikitext-103-v1') (no answer from {constants.ENDPOINT} within "
        f"{HUB_CHECK_SECONDS:g} s: "
    )
    assert 'and set data.path = "data/wikitext-103"' in lines[0]
    assert HUB_CHECK_SECONDS <= 5  # the one wait; datasets' own retries took ~25 s


def _hub_cfg(tmp_path: Path, hub_id: str) -> DataConfig:
    return DataConfig(source="hub", hub_id=hub_id, cache_dir=str(tmp_path / "c"))


def test_an_unreachable_hub_stops_before_datasets_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets
    from huggingface_hub import constants

    from hornn_dist.data import hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "_hub_unreachable", lambda endpoint: "no answer: test")
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("datasets asked"))
    with pytest.raises(DataError) as caught:
        prepare_corpus(_hub_cfg(tmp_path, "someone/corpus"), progress=False)
    assert str(caught.value) == (
        "cannot reach the Hugging Face hub for hub dataset 'someone/corpus' (no answer: test); "
        'HINT: use local files: data.source = "files" with data.train, data.valid, data.test'
    )


def test_a_hub_id_that_does_not_exist_is_one_line_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    from hornn_dist.data import hub

    def not_found(path: str, *args: object, **kwargs: object) -> None:
        raise DatasetNotFoundError(
            f"Dataset '{path}' doesn't exist on the Hub or cannot be accessed.\nmore detail"
        )

    monkeypatch.setattr(hub, "_hub_unreachable", lambda endpoint: None)  # no network here
    monkeypatch.setattr(datasets, "load_dataset", not_found)
    with pytest.raises(DataError) as caught:
        prepare_corpus(_hub_cfg(tmp_path, "nobody/no-such-corpus"), progress=False)
    assert str(caught.value) == (
        "hub dataset 'nobody/no-such-corpus' was not found or is not accessible (Dataset "
        "'nobody/no-such-corpus' doesn't exist on the Hub or cannot be accessed.); "
        "HINT: check data.hub_id and your Hugging Face login"
    )
