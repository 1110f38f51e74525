"""Reading text: chunked blocks, compressed files, UTF-8 errors, work pieces and the character cut."""

from __future__ import annotations

import bz2
import gzip
import lzma
import random
import zipfile
from pathlib import Path

import pytest

from hornn_dist.data import text_files
from hornn_dist.data.text_files import Piece
from hornn_dist.util.errors import DataError


def _text(seed: int = 0, lines: int = 200, unicode: bool = False) -> str:
    rng = random.Random(seed)
    words = ["the", "cat", "sat", "on", "a", "mat", "zebra"] + (
        ["café", "naïve", "жук", "日本"] if unicode else []
    )
    sep = [" ", " ", " ", "  ", "\t"]
    return "".join(
        " ".join(rng.choice(words) + rng.choice(sep) for _ in range(rng.randint(0, 12))) + "\n"
        for _ in range(lines)
    )


def _read(piece: Piece, chunk: int = 37, errors: str = "strict") -> str:
    return "".join(text_files.iter_blocks(piece, chunk, errors))


def test_blocks_end_on_whitespace_and_keep_every_word(tmp_path: Path) -> None:
    text = _text(unicode=True)
    path = tmp_path / "a.txt"
    path.write_text(text, encoding="utf-8")
    blocks = list(text_files.iter_blocks(Piece(str(path)), 37))
    assert len(blocks) > 10 and all(b[-1].isspace() for b in blocks)
    assert "".join(blocks) == text


def test_missing_final_newline_is_added(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("one two\nthree")
    assert _read(Piece(str(path))) == "one two\nthree\n"


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz", ".zip"])
def test_compressed_files_read_transparently(tmp_path: Path, suffix: str) -> None:
    text = _text(unicode=True)
    data = text.encode()
    path = tmp_path / f"a.txt{suffix}"
    if suffix == ".zip":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("a.txt", data)
    else:
        path.write_bytes(
            {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}[suffix](data)
        )
    assert _read(Piece(str(path))) == text
    a, b = data.index(b" ", 100) + 1, data.index(b" ", 300) + 1
    assert _read(Piece(str(path), a, b)) == data[a:b].decode()


def test_invalid_utf8_names_file_and_byte_offset(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good words here\n" * 10 + b"bad \xff byte\n")
    with pytest.raises(
        DataError, match=r"bad.txt: invalid UTF-8 at byte 164; HINT: .*errors = \"replace\""
    ) as e:
        _read(Piece(str(path)), chunk=16)
    assert "\n" not in str(e.value)
    assert "\ufffd" in _read(Piece(str(path)), errors="replace")


def test_invalid_utf8_offset_when_a_sequence_spans_chunks(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(b"abc \xe6\x97" + b"x yz\n")  # a 3-byte sequence cut short
    with pytest.raises(DataError, match="at byte 4;"):
        _read(Piece(str(path)), chunk=5)


def test_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbfhello world\n")
    assert _read(Piece(str(path))) == "hello world\n"
    assert text_files.count_chars(str(path), 1 << 20) == len("hello world\n")


def test_subdivide_cuts_after_whitespace_and_loses_nothing(tmp_path: Path) -> None:
    text = _text(seed=3, lines=500, unicode=True)
    path = tmp_path / "a.txt"
    path.write_text(text, encoding="utf-8")
    pieces = text_files.subdivide(Piece(str(path)), 500)
    assert len(pieces) > 10 and pieces[-1].end is None
    data = text.encode()
    assert all(data[p.start - 1 : p.start].isspace() for p in pieces[1:])
    assert "".join(_read(p) for p in pieces) == text


def test_expand_globs_sorted_and_missing_file(tmp_path: Path) -> None:
    for name in ("b.txt", "a.txt"):
        (tmp_path / name).write_text("x\n")
    assert text_files.expand([str(tmp_path / "*.txt")], "train") == [
        str(tmp_path / "a.txt"),
        str(tmp_path / "b.txt"),
    ]
    with pytest.raises(DataError, match=r"^data.valid: no file matches .*HINT"):
        text_files.expand([str(tmp_path / "nope*.txt")], "valid")


def test_a_path_that_exists_but_is_no_file_says_what_it_is(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(DataError) as raised:
        text_files.expand([str(fifo)], "train")
    assert str(raised.value).startswith(
        f"data.train: '{fifo}' is a named pipe (FIFO), not a regular file; HINT: write the text"
    )
    with pytest.raises(DataError) as raised:
        text_files.expand([str(tmp_path)], "valid")
    assert str(raised.value) == (
        f"data.valid: '{tmp_path}' is a folder, not a file; HINT: name the files in it, e.g. "
        f"'{tmp_path}/*.txt'"
    )


@pytest.mark.parametrize("unicode", [False, True])
def test_char_cut_is_exact_with_chunks_smaller_than_the_file(tmp_path: Path, unicode: bool) -> None:
    rng = random.Random(1)
    alphabet = "abcdefgh  " + ("éжß日" if unicode else "")
    text = "".join(rng.choice(alphabet) for _ in range(20_000))  # one line, no newline
    path = tmp_path / "text8"
    path.write_text(text, encoding="utf-8")
    pieces = text_files.char_cut([str(path)], heldout_chars=1000, valid_chars=400, chunk_bytes=333)
    got = {split: "".join(_read(p, chunk=333) for p in parts) for split, parts in pieces.items()}
    assert got["train"] == text[:19_000]
    assert got["valid"] == text[19_000:19_400]
    assert got["test"] == text[19_400:] + "\n"  # end of file: read as a last line


def test_char_cut_across_files_and_too_short(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("x" * 50)
    b.write_text("y" * 30)
    pieces = text_files.char_cut([str(a), str(b)], heldout_chars=40, valid_chars=10, chunk_bytes=16)
    assert pieces["train"] == [Piece(str(a), 0, 40)]
    assert pieces["valid"] == [Piece(str(a), 40, None)]
    assert pieces["test"] == [Piece(str(b), 0, None)]
    with pytest.raises(DataError, match="not more than data.heldout_chars"):
        text_files.char_cut([str(a)], heldout_chars=50, valid_chars=10, chunk_bytes=16)


def test_last_line_of_blanks_gets_no_newline_in_any_piece_layout(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text(
        "w " * 300 + "end" + " " * 200
    )  # last line has words, no newline, long blank tail
    for unit in (50, 100, 10_000):
        pieces = text_files.subdivide(Piece(str(path)), unit)
        assert "".join(_read(p, chunk=16) for p in pieces).endswith("end" + " " * 200 + "\n")
    path.write_text("a b\n" + " " * 300)
    assert (
        "".join(_read(p) for p in text_files.subdivide(Piece(str(path)), 50)) == "a b\n" + " " * 300
    )


def test_truncated_compressed_file_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "a.txt.gz"
    path.write_bytes(gzip.compress(_text().encode())[:-30])
    with pytest.raises(DataError, match=r"a.txt.gz: read failed .*HINT: the file is truncated"):
        _read(Piece(str(path)))


def test_a_word_over_the_limit_is_one_line_naming_the_file_and_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "one_word.txt.gz"
    limit = text_files.MAX_WORD_CHARS
    path.write_bytes(gzip.compress(b"ok\n" + b"a" * (2 * limit) + b" done\n"))
    with pytest.raises(DataError) as raised:
        _read(Piece(str(path)), chunk=1 << 16)
    message = str(raised.value)
    assert message.startswith(f"{path}: no space or newline in the ")
    assert f"over the {limit:,} one word may hold" in message and "\n" not in message


def test_a_word_at_the_limit_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "long_word.txt"
    word = "b" * text_files.MAX_WORD_CHARS
    path.write_text(f"x {word} y\n")
    assert _read(Piece(str(path)), chunk=1 << 16).split() == ["x", word, "y"]
