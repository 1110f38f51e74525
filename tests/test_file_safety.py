"""Nothing outside a run is written through a link, and no unverified weights or text are used:
real runs on a tiny corpus (links at .lock, config.toml and report.md; checkpoints without a
list of their files; a damaged tokenizer.json; a resume on a rebuilt, changed corpus)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from hornn_dist.config import load_config
from hornn_dist.data.pipeline import corpus_folder
from hornn_dist.data.shards import TOKENIZER, open_corpus
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.run_layout import CONFIG_FILE
from hornn_dist.run.run_state import TrainerState
from hornn_dist.util.errors import DataError
from tests.train_helpers import check_ok, prepared_tiny, run_here, train_into, write_tiny_config

PRECIOUS = "a user's file, not the run's\n"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_tiny(
        tmp_path_factory.mktemp("file_safety"), train={"keep_checkpoints": 5, "epochs": 100}
    )


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """Return the one `error:` line of a CLI that failed with exit code 2 and no traceback."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    return line


def user_file(folder: Path) -> Path:
    """Return a file of the user's, outside any run, holding PRECIOUS."""
    path = folder / "precious.txt"
    path.write_text(PRECIOUS)
    return path


@pytest.fixture(scope="module")
def stopped(workdir: Path) -> Path:
    """A run stopped after 10 steps: checkpoints at steps 5 and 10."""
    out = workdir / "stopped10"
    check_ok(train_into(workdir, out, "--set", "train.max_steps=10"))
    return out


# ---------------------------------------------------------------- links in the run folder


def test_a_linked_lock_is_refused_and_its_target_kept(workdir: Path, tmp_path: Path) -> None:
    precious = user_file(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").symlink_to(precious)
    line = one_error_line(train_into(workdir, out, "--set", "train.max_steps=2"))
    assert f"{out / '.lock'} is a symbolic link" in line and "remove the link" in line
    assert precious.read_text() == PRECIOUS
    assert not (out / "checkpoints").exists()


def test_a_linked_config_toml_is_replaced_and_its_target_kept(
    workdir: Path, tmp_path: Path
) -> None:
    precious = user_file(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    (out / CONFIG_FILE).symlink_to(precious)
    check_ok(train_into(workdir, out, "--set", "train.max_steps=2"))
    assert precious.read_text() == PRECIOUS
    written = out / CONFIG_FILE
    assert not written.is_symlink() and load_config(written).train.max_steps == 2


def test_a_linked_report_md_is_replaced_and_its_target_kept(stopped: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(stopped, runs / "tiny")  # max_steps reached: a finished run
    precious = user_file(tmp_path)
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.md").symlink_to(precious)
    proc = run_here("hornn_dist.report", str(runs), "--out", str(out), "--no-plots")
    check_ok(proc)
    assert precious.read_text() == PRECIOUS
    report = out / "report.md"
    assert not report.is_symlink() and "tiny" in report.read_text()


# ---------------------------------------------------------------- checkpoints without a file list


def damage_list(folder: Path, how: str) -> None:
    """Flip bytes of the weights, then delete checksums.json or empty it."""
    weights = folder / ckpt.WEIGHTS
    data = bytearray(weights.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 32):
        data[i] ^= 0x5A
    weights.write_bytes(bytes(data))
    if how == "deleted":
        (folder / ckpt.CHECKSUMS).unlink()
    else:
        (folder / ckpt.CHECKSUMS).write_text("{}")


@pytest.mark.parametrize("how", ["deleted", "empty"])
def test_a_checkpoint_without_its_file_list_is_damaged(
    stopped: Path, workdir: Path, how: str
) -> None:
    run = workdir / f"list_{how}"
    shutil.copytree(stopped, run)
    newest = ckpt.checkpoint_root(run) / ckpt.step_dir_name(10)
    damage_list(newest, how)
    # named: one line
    line = one_error_line(train_into(workdir, run, "--resume", str(newest)))
    assert str(newest) in line and ckpt.CHECKSUMS in line
    # evaluate never reads its weights: it takes the newest checkpoint that is complete
    scored = run_here("hornn_dist.evaluate", str(run), "--split", "valid")
    check_ok(scored)
    assert "checkpoint " + str(newest.with_name(ckpt.step_dir_name(5))) in scored.stdout
    # found: skipped with a warning, the run goes on from the checkpoint before
    proc = train_into(workdir, run, "--set", "train.max_steps=12")
    check_ok(proc)
    assert f"ignoring incomplete checkpoint {newest}" in proc.stderr
    assert f"resuming from {newest.with_name(ckpt.step_dir_name(5))} (step 5" in proc.stderr


# ---------------------------------------------------------------- tokenizer.json against the manifest


def swap_two_ids(data: bytes) -> bytes:
    """Return a tokenizer.json whose words w1 and w2 trade ids (same words, same size)."""
    tokenizer = json.loads(data)
    vocab = tokenizer["model"]["vocab"]
    vocab["w1"], vocab["w2"] = vocab["w2"], vocab["w1"]
    return json.dumps(tokenizer).encode()


def lowercase_on(data: bytes) -> bytes:
    """Return a tokenizer.json that also lowercases (same id table: only the file's sha256 tells)."""
    tokenizer = json.loads(data)
    tokenizer["normalizer"]["normalizers"].insert(0, {"type": "Lowercase"})
    return json.dumps(tokenizer).encode()


DAMAGES = {
    "truncated": (lambda data: data[: len(data) // 2], "cannot read the vocabulary"),
    "garbage": (lambda data: b"\x00\xff garbage" * 10, "cannot read the vocabulary"),
    "ids swapped": (swap_two_ids, "as many words ({size}) but other words or ids"),
    "normalizer changed": (lowercase_on, "does not match the sha256 recorded for it"),
}


@pytest.fixture()
def corpus_dir(workdir: Path) -> Path:
    """The workdir's prepared folder; its tokenizer.json is put back after the test."""
    folder = corpus_folder(load_config(workdir / "config.toml").data)
    saved = (folder / TOKENIZER).read_bytes()
    yield folder
    (folder / TOKENIZER).write_bytes(saved)


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_tokenizer_is_refused_when_the_corpus_opens(
    corpus_dir: Path, damage: str
) -> None:
    edit, expected = DAMAGES[damage]
    expected = expected.format(size=open_corpus(corpus_dir).vocab_size)
    path = corpus_dir / TOKENIZER
    path.write_bytes(edit(path.read_bytes()))
    with pytest.raises(DataError) as info:
        open_corpus(corpus_dir)
    message = str(info.value)
    assert str(path) in message and expected in message and f"delete {corpus_dir}" in message
    assert "\n" not in message


def test_train_on_an_id_swapped_tokenizer_is_one_line(workdir: Path, corpus_dir: Path) -> None:
    path = corpus_dir / TOKENIZER
    path.write_bytes(swap_two_ids(path.read_bytes()))
    line = one_error_line(train_into(workdir, workdir / "swapped", "--set", "train.max_steps=2"))
    assert f"{path} does not match the shards' vocabulary" in line
    assert f"HINT: delete {corpus_dir}" in line
    assert not (workdir / "swapped" / "checkpoints").exists()


# ---------------------------------------------------------------- resume on a changed corpus


def test_a_resume_on_a_rebuilt_changed_corpus_is_refused_unless_allowed(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path)
    out = tmp_path / "run"
    check_ok(train_into(tmp_path, out, "--set", "train.max_steps=4"))
    saved = TrainerState.read(ckpt.list_checkpoints(out)[-1])
    folder = corpus_folder(load_config(config).data)
    before = open_corpus(folder)
    assert saved.corpus_hash == before.content_hash
    # the same words in another order: same vocabulary, another corpus
    train_txt = tmp_path / "train.txt"
    lines = train_txt.read_text().splitlines()
    random.Random(0).shuffle(lines)
    train_txt.write_text("\n".join(lines) + "\n")
    shutil.rmtree(folder)
    proc = train_into(tmp_path, out, "--set", "train.max_steps=8")
    line = one_error_line(proc)
    after = open_corpus(folder)  # prepared again by that run, before it refused
    assert after.vocab_hash == before.vocab_hash and after.content_hash != before.content_hash
    assert f"checkpoint {before.content_hash[:16]} != data {after.content_hash[:16]}" in line
    assert "train.allow_corpus_change = true" in line
    allowed = train_into(
        tmp_path, out, "--set", "train.max_steps=8", "--set", "train.allow_corpus_change=true"
    )
    check_ok(allowed)
    assert "the training text changed since" in allowed.stderr
    assert "train.allow_corpus_change = true allows" in allowed.stderr
    newest = TrainerState.read(ckpt.list_checkpoints(out)[-1])
    assert newest.step == 8 and newest.corpus_hash == after.content_hash
    # the same corpus rebuilt from the same text is the same corpus
    shutil.rmtree(folder)
    check_ok(run_here("hornn_dist.prepare", str(config)))
    assert open_corpus(folder).content_hash == after.content_hash
