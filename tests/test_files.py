"""hornn_dist.util.files: atomic writes replace a link and keep its target, in-place opens refuse one,
and checksums.json tables catch missing, short and damaged files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hornn_dist.util import files
from hornn_dist.util.errors import ConfigError


def linked(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """Return (a link named `name`, the user's file it points to, holding "precious")."""
    target = tmp_path / "user_file.txt"
    target.write_text("precious\n")
    link = tmp_path / name
    link.symlink_to(target)
    return link, target


@pytest.mark.parametrize(
    "write",
    [
        lambda p: files.write_text(p, "new text\n"),
        lambda p: files.write_bytes(p, b"new text\n"),
        lambda p: files.write_json(p, {"a": 1}),
    ],
    ids=["text", "bytes", "json"],
)
def test_an_atomic_write_replaces_a_link_and_keeps_its_target(tmp_path: Path, write) -> None:
    link, target = linked(tmp_path, "out.txt")
    write(link)
    assert target.read_text() == "precious\n"
    assert not link.is_symlink() and link.is_file() and link.read_text() != "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt", "user_file.txt"]


def test_a_failed_atomic_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    files.write_json(path, {"step": 1})
    with pytest.raises(RuntimeError), files.atomic_writer(path) as f:
        f.write(b"half a fi")
        raise RuntimeError("killed mid-write")
    assert json.loads(path.read_text()) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_open_for_writing_refuses_a_link_in_one_line(tmp_path: Path) -> None:
    link, target = linked(tmp_path, "train.log")
    for append in (False, True):
        with pytest.raises(ConfigError, match=r"train.log is a symbolic link .*remove the link"):
            open_for_writing_and_write(link, append)
    assert target.read_text() == "precious\n"
    plain = tmp_path / "plain.log"
    open_for_writing_and_write(plain, append=True)
    open_for_writing_and_write(plain, append=True)
    assert plain.read_text() == "line\nline\n"


def open_for_writing_and_write(path: Path, append: bool) -> None:
    with files.open_for_writing(path, append=append, binary=False) as f:
        f.write("line\n")


def test_new_folder_beside_never_reuses_a_name(tmp_path: Path) -> None:
    out = tmp_path / "model"
    made = {files.new_folder_beside(out) for _ in range(5)}
    assert len(made) == 5 and all(p.is_dir() and p.parent == tmp_path for p in made)
    assert not out.exists()


def test_checksums_catch_missing_short_damaged_and_unlisted(tmp_path: Path) -> None:
    for name, data in (("a.bin", b"a" * 100), ("b.json", b"{}")):
        (tmp_path / name).write_bytes(data)
    assert (
        files.checksums_problem(tmp_path, deep=True)
        == "checksums.json, the list of its files, is missing"
    )
    files.write_checksums(tmp_path, ["a.bin", "b.json"])
    assert files.checksums_problem(tmp_path, deep=True, required=["a.bin"]) is None
    assert "does not list c.bin" in files.checksums_problem(tmp_path, False, required=["c.bin"])
    (tmp_path / "a.bin").write_bytes(b"a" * 99 + b"b")  # same size, one byte other
    assert files.checksums_problem(tmp_path, deep=False) is None  # sizes only
    assert files.checksums_problem(tmp_path, deep=True) == (
        "a.bin does not match its sha256 in checksums.json (the file was damaged)"
    )
    assert files.checksums_problem(tmp_path, deep=True, only=["b.json"]) is None
    (tmp_path / "a.bin").write_bytes(b"a" * 10)
    assert "a.bin has 10 bytes, checksums.json says 100" in files.checksums_problem(tmp_path, False)
    (tmp_path / "a.bin").unlink()
    assert files.checksums_problem(tmp_path, deep=False) == "a.bin is missing"
    (tmp_path / "checksums.json").write_text("[1, 2")
    assert "checksums.json is unreadable" in files.checksums_problem(tmp_path, deep=False)


def test_a_checksum_entry_naming_a_path_outside_the_folder_is_refused(tmp_path: Path) -> None:
    inside = tmp_path / "model"
    inside.mkdir()
    (tmp_path / "elsewhere.bin").write_bytes(b"x")
    table = {
        "../elsewhere.bin": {"bytes": 1, "sha256": files.sha256_file(tmp_path / "elsewhere.bin")}
    }
    (inside / "checksums.json").write_text(json.dumps(table))
    assert files.checksums_problem(inside, deep=True) == "../elsewhere.bin is missing"
