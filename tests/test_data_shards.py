"""Shard files: writer/reader round trip across shard boundaries, header and manifest checks."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from hornn_dist.data import shards, vocab
from hornn_dist.data.shards import ShardWriter, TokenReader, open_corpus
from hornn_dist.util.errors import DataError

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
        "splits": {
            "train": {
                "tokens": int(sum(r["tokens"] for r in records)),
                "unk_tokens": int(np.count_nonzero(tokens == 0)),
                "shards": records,
            }
        },
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


@pytest.mark.parametrize("name", ["../../outside.bin", "/etc/passwd", "..", ""])
def test_a_manifest_naming_a_shard_outside_its_folder_is_damaged(
    corpus_dir: tuple[Path, np.ndarray], name: str
) -> None:
    """The hint deletes the corpus folder, never a folder a shard's name leads to."""
    folder, _ = corpus_dir
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"][0]["file"] = name
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError) as err:
        open_corpus(folder)
    assert f"shard 0 of split 'train' names {name!r}, not a file of the folder" in str(err.value)
    assert str(err.value).endswith(
        f"HINT: delete {folder} and run `python -m hornn_dist.prepare CONFIG` again"
    )


@pytest.mark.parametrize("kind", ["ids swapped", "a word replaced", "a word more"])
def test_a_tokenizer_that_differs_says_how(corpus_dir: tuple[Path, np.ndarray], kind: str) -> None:
    folder, _ = corpus_dir
    words = {"ids swapped": ["<unk>", "<eos>", "b", "a", "c"], "a word replaced": [*ITOS[:-1], "z"],
             "a word more": [*ITOS, "d"]}[kind]  # fmt: skip
    vocab.save_tokenizer(words, folder / shards.TOKENIZER, lowercase=False, add_eos=True)
    with pytest.raises(DataError) as err:
        open_corpus(folder).tokenizer()
    expected = "(6 words, expected 5)" if kind == "a word more" else "as many words (5) but other"
    assert expected in str(err.value) and "size 5 vs 5" not in str(err.value)


def test_tokenizer_and_shards_from_different_vocabularies(
    corpus_dir: tuple[Path, np.ndarray],
) -> None:
    folder, _ = corpus_dir
    vocab.save_tokenizer([*ITOS, "d"], folder / shards.TOKENIZER, lowercase=False, add_eos=True)
    with pytest.raises(DataError, match=r"tokenizer.json does not match the shards"):
        open_corpus(folder)  # checked when the corpus is opened
    corpus = open_corpus(folder, check=False)
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


# --- damage found when a corpus is opened for use ------------------------------------------


def _damage(path: Path, token: int, values: list[int]) -> None:
    """Overwrite the ids of a shard from token `token` on, keeping its size and header."""
    ids = np.fromfile(path, dtype=np.uint16, offset=shards.HEADER_BYTES)
    ids[token : token + len(values)] = values
    path.write_bytes(path.read_bytes()[: shards.HEADER_BYTES] + ids.tobytes())


def test_changed_valid_ids_are_found_when_shards_are_verified(corpus_dir) -> None:
    folder, tokens = corpus_dir
    corpus = open_corpus(folder)  # headers and sizes still agree
    assert corpus.verify_shards() == 1000 * 2 + 16 * shards.HEADER_BYTES  # bytes read
    path = folder / "train_000002.bin"
    old = tokens[128 + 10 : 128 + 30]
    _damage(path, 10, [(int(v) + 1) % len(ITOS) for v in old])  # 20 other, valid ids
    with pytest.raises(DataError) as err:
        open_corpus(folder).verify_shards()
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: sha256 checksum mismatch")
    assert f"HINT: delete {folder} and run `python -m hornn_dist.prepare CONFIG` again" in msg


def test_an_id_past_the_vocabulary_names_the_shard_and_token(corpus_dir) -> None:
    folder, _ = corpus_dir
    path = folder / "train_000005.bin"
    _damage(path, 37, [0xFFFF])
    with pytest.raises(DataError) as err:
        open_corpus(folder).verify_shards(["train"])
    assert str(err.value).startswith(
        f"{path}: token 37 (byte {64 + 37 * 2}) has id 65535, outside the vocabulary of 5 words"
    )
    assert "HINT: delete" in str(err.value)


def test_verified_shards_are_not_read_again_until_they_change(corpus_dir) -> None:
    """The per-machine record: an untouched shard is not hashed twice; a write is seen."""
    folder, tokens = corpus_dir
    time.sleep(0.05)  # past the clock tick of the shards' writes (else their entries are racy)
    assert open_corpus(folder).verify_shards() == 1000 * 2 + 16 * 64
    record = folder / shards.verified_record_name()
    assert record.is_file()
    assert open_corpus(folder).verify_shards() == 0  # nothing changed: nothing read
    path = folder / "train_000007.bin"
    _damage(path, 3, [int(tokens[7 * 64 + 3] + 1) % len(ITOS)])
    for _ in range(2):  # a failed shard is never recorded
        with pytest.raises(DataError, match="train_000007.bin: sha256 checksum mismatch"):
            open_corpus(folder).verify_shards()
    _damage(path, 3, [int(tokens[7 * 64 + 3])])  # repaired
    assert open_corpus(folder).verify_shards() == 64 * 2 + 64  # only that shard is read again


def test_a_shard_written_in_the_clock_tick_of_the_record_is_read_again(corpus_dir) -> None:
    """As git's racy index entries: a coarse clock can give a later write the same mtime."""
    folder, _ = corpus_dir
    time.sleep(0.05)
    open_corpus(folder).verify_shards()
    assert open_corpus(folder).verify_shards() == 0
    first = min(f.stat().st_mtime_ns for f in folder.glob("*.bin"))
    os.utime(folder / shards.verified_record_name(), ns=(first, first))  # all in its tick or after
    assert open_corpus(folder).verify_shards() == 1000 * 2 + 16 * 64


def test_a_read_only_folder_is_verified_every_time(corpus_dir, monkeypatch) -> None:
    folder, _ = corpus_dir

    def cannot_write(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(shards, "_write_record", cannot_write)
    corpus = open_corpus(folder)
    assert corpus.verify_shards() == corpus.verify_shards() > 0
    assert not (folder / shards.verified_record_name()).exists()


@pytest.mark.parametrize(
    "edit,problem",
    [
        (lambda m: m.pop("vocab_size"), "key 'vocab_size' is missing or not an int"),
        (lambda m: m.pop("splits"), "key 'splits' is missing or not a dict"),
        (lambda m: m.update(dtype="float32"), "dtype 'float32' is not uint16 or uint32"),
        (
            lambda m: m["splits"]["train"]["shards"][3].pop("sha256"),
            "shard 3 of split 'train' lacks its file, tokens or sha256",
        ),
        (
            lambda m: m["splits"]["train"].pop("shards"),
            "split 'train' lacks its tokens, unk_tokens or list of shards",
        ),
    ],
)
def test_a_manifest_missing_a_key_is_one_line(corpus_dir, edit, problem) -> None:
    folder, _ = corpus_dir
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError) as err:
        open_corpus(folder)
    assert str(err.value) == (
        f"{folder / 'manifest.json'}: {problem}; "
        f"HINT: delete {folder} and run `python -m hornn_dist.prepare CONFIG` again"
    )


@pytest.mark.parametrize("text", ["{not json", '{"model": {}}', ""])
def test_an_unreadable_tokenizer_is_one_line(corpus_dir, text) -> None:
    folder, _ = corpus_dir
    (folder / shards.TOKENIZER).write_text(text)
    for use in (lambda c: c.tokenizer(), lambda c: c.encode("a b"), lambda c: c.decode([2])):
        with pytest.raises(DataError) as err:
            use(open_corpus(folder))
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith(f"{folder / shards.TOKENIZER}: ")
        assert "HINT: delete" in msg and "prepare" in msg


def test_streams_name_the_shard_of_an_id_past_the_vocabulary(corpus_dir) -> None:
    """Where no verification ran (open_corpus alone), a batch still never hands out such an id."""
    from hornn_dist.data.streams import EvalStream, TBPTTStream

    folder, _ = corpus_dir
    path = folder / "train_000009.bin"
    _damage(path, 5, [0xFFFF])  # token 9 * 64 + 5 = 581 of the split
    reader = open_corpus(folder).split("train")
    train = TBPTTStream(reader, global_batch=3, bptt=4)  # streams of 333: 581 is in stream 1
    want = f"{path}: token 5 (byte {64 + 5 * 2}) has id 65535, outside the vocabulary of 5 words"
    train.batch(0)
    with pytest.raises(DataError) as err:
        train.batch((581 - 333) // 4)
    assert str(err.value).startswith(want)
    evaluation = EvalStream(reader, batch_size=3, bptt=4)
    with pytest.raises(DataError) as err:
        list(evaluation)
    assert str(err.value).startswith(want)
