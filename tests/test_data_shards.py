"""Shard files: writer/reader round trip across shard boundaries, header and manifest checks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hornn_dist.data import shards, vocab
from hornn_dist.data.shards import ShardWriter, TokenReader, open_corpus
from hornn_dist.errors import DataError

ITOS = ["<unk>", "<eos>", "a", "b", "c"]


def _write_corpus(folder: Path, tokens: np.ndarray, shard_tokens: int) -> None:
    """A minimal prepared folder with one split, written the way prepare writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    vhash = vocab.vocab_hash(ITOS)
    writer = ShardWriter(folder, "train", shard_tokens, np.dtype(np.uint16), len(ITOS), vhash)
    for part in np.array_split(tokens, 7):
        writer.append(part)
    records = writer.close()
    vocab.save_tokenizer(ITOS, folder / shards.TOKENIZER, lowercase=False, add_eos=True)
    manifest = {
        "format": "hornn_dist-shards",
        "format_version": shards.FORMAT_VERSION,
        "dtype": "uint16",
        "vocab_size": len(ITOS),
        "vocab_hash": vhash,
        "splits": {"train": {"tokens": int(sum(r["tokens"] for r in records)), "shards": records}},
    }
    shards.write_json(folder / shards.MANIFEST, manifest)


@pytest.fixture()
def corpus_dir(tmp_path: Path) -> tuple[Path, np.ndarray]:
    tokens = np.random.default_rng(0).integers(0, len(ITOS), size=1000).astype(np.uint16)
    _write_corpus(tmp_path / "c", tokens, shard_tokens=64)
    return tmp_path / "c", tokens


def test_round_trip_across_shard_boundaries(corpus_dir: tuple[Path, np.ndarray]) -> None:
    folder, tokens = corpus_dir
    corpus = open_corpus(folder, verify=True)
    reader = corpus.split("train")
    assert len(reader) == 1000 and len(corpus.manifest["splits"]["train"]["shards"]) == 16
    rng = np.random.default_rng(1)
    for a, b in [
        (0, 1000),
        (0, 0),
        (63, 65),
        (64, 128),
        (999, 1000),
        *rng.integers(0, 1001, size=(50, 2)).tolist(),
    ]:
        a, b = min(a, b), max(a, b)
        got = reader.read(a, b)
        assert got.dtype == np.uint16 and np.array_equal(got, tokens[a:b])
    with pytest.raises(IndexError):
        reader.read(10, 1001)


def test_header_layout(corpus_dir: tuple[Path, np.ndarray]) -> None:
    folder, tokens = corpus_dir
    raw = (folder / "train_000000.bin").read_bytes()
    assert raw[:8] == b"HORNNTOK" and len(raw) == 64 + 64 * 2
    assert shards.read_header(folder / "train_000015.bin")[:4] == (1, 2, 1000 - 15 * 64, len(ITOS))
    assert np.array_equal(np.frombuffer(raw[64:], dtype="<u2"), tokens[:64])


def test_encode_decode(corpus_dir: tuple[Path, np.ndarray]) -> None:
    corpus = open_corpus(corpus_dir[0])
    ids = corpus.encode("a b zz\nc\n")
    assert ids == [2, 3, 0, 1, 4, 1]
    assert corpus.decode(ids) == "a b <unk>\nc\n"
    assert corpus.decode(np.array([2, 2], dtype=np.uint16)) == "a a"


def test_truncated_shard_and_bad_magic(corpus_dir: tuple[Path, np.ndarray]) -> None:
    folder, _ = corpus_dir
    path = folder / "train_000003.bin"
    data = path.read_bytes()
    path.write_bytes(data[:-2])
    with pytest.raises(DataError, match=r"train_000003.bin: .*truncated.*HINT: delete"):
        open_corpus(folder)
    path.write_bytes(b"NOTASHRD" + data[8:])
    with pytest.raises(DataError, match="bad magic"):
        open_corpus(folder)


def test_checksum_mismatch_only_with_verify(corpus_dir: tuple[Path, np.ndarray]) -> None:
    folder, _ = corpus_dir
    path = folder / "train_000002.bin"
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    open_corpus(folder)  # sizes and headers still agree
    with pytest.raises(DataError, match=r"sha256 checksum mismatch.*HINT"):
        open_corpus(folder, verify=True)


def test_old_manifest_and_missing_manifest(corpus_dir: tuple[Path, np.ndarray]) -> None:
    folder, _ = corpus_dir
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["format_version"] = 0
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"format 0 is older than .* HINT: delete"):
        open_corpus(folder)
    (folder / "manifest.json").unlink()
    with pytest.raises(DataError, match=r"no manifest.json.*HINT: run"):
        open_corpus(folder)


def test_tokenizer_and_shards_from_different_vocabularies(
    corpus_dir: tuple[Path, np.ndarray],
) -> None:
    folder, _ = corpus_dir
    vocab.save_tokenizer([*ITOS, "d"], folder / shards.TOKENIZER, lowercase=False, add_eos=True)
    corpus = open_corpus(folder)
    with pytest.raises(DataError, match=r"tokenizer.json does not match the shards"):
        corpus.tokenizer()
    with pytest.raises(DataError, match=r"tokenizer.json does not match the shards"):
        corpus.decode([2])
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["vocab_hash"] = "0" * 64
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="another vocabulary"):
        open_corpus(folder)


def test_reader_of_uint32_shards(tmp_path: Path) -> None:
    tokens = np.arange(100_000, 100_050, dtype=np.uint32)
    writer = ShardWriter(tmp_path, "valid", 16, np.dtype(np.uint32), 200_000, "f" * 64)
    writer.append(tokens)
    records = writer.close()
    reader = TokenReader(tmp_path, "valid", records, np.dtype(np.uint32))
    assert (
        np.array_equal(reader.read(5, 45), tokens[5:45]) and reader.read(5, 45).dtype == np.uint32
    )


def test_both_vocabulary_readers_reject_a_gap_in_the_ids(corpus_dir) -> None:
    folder, _ = corpus_dir
    path = folder / shards.TOKENIZER
    table = json.loads(path.read_text())
    table["model"]["vocab"]["c"] = 7  # ids 0..3 and 7: no word has id 4
    path.write_text(json.dumps(table))
    for read in (lambda c: c.itos(), lambda c: c.tokenizer()):
        with pytest.raises(DataError, match=r"tokenizer.json: word 'c' has id 7, outside 0..4"):
            read(open_corpus(folder))
