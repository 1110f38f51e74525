"""Checkpoint files without an Accelerator: config.toml, lookup, pruning, compatibility."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from hornn_dist.config import RunConfig, load_config, to_toml
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.resume import check_compatible
from hornn_dist.run.run_layout import CONFIG_FILE
from hornn_dist.run.run_state import TrainerState
from hornn_dist.util.errors import CheckpointError

VOCAB_HASH = "abc123"


def make_checkpoint(
    run: Path,
    step: int,
    *,
    done: bool = True,
    best: str = "",
    cfg: RunConfig | None = None,
    world_size: int = 1,
    vocab_hash: str = VOCAB_HASH,
    corpus_hash: str = "",
) -> Path:
    """Return a hand-built checkpoint folder of `run` after `step` steps (DONE written last)."""
    folder = ckpt.checkpoint_root(run) / ckpt.step_dir_name(step)
    folder.mkdir(parents=True)
    TrainerState(
        step=step,
        best_valid=5.0,
        best_checkpoint=best,
        vocab_hash=vocab_hash,
        corpus_hash=corpus_hash,
        world_size=world_size,
    ).write(folder)
    (folder / CONFIG_FILE).write_text(to_toml((cfg or RunConfig()).to_dict()))
    save_file({"w": torch.full((3,), float(step))}, str(folder / ckpt.WEIGHTS))
    ckpt.write_checksums(folder)
    if done:
        (folder / ckpt.DONE).write_text(f"step {step}\n")
    return folder


def compatible(
    folder: Path, cfg: RunConfig, vocab_hash: str, corpus_hash: str | None = None
) -> list[str]:
    """Return what resume's compatibility check returns for `folder` under `cfg`."""
    state, saved = TrainerState.read(folder), ckpt.read_config(folder)
    return check_compatible(folder, state, saved, cfg, vocab_hash, corpus_hash)


def names(folders: list[Path]) -> list[str]:
    """Return the folder names."""
    return [f.name for f in folders]


# ---------------------------------------------------------------- config.toml


def test_to_toml_reloads_into_an_equal_config(tmp_path: Path) -> None:
    cfg = load_config(
        None,
        [
            'data.train=["a.txt", "b c.txt"]',
            "data.lowercase=true",
            "model.pooling=gated",
            "model.alpha=0.7",
            "optim.weight_decay=1e-7",
            "optim.lr=1",
            "train.max_steps=123",
            "train.output_dir=runs/x",
            "log.tensorboard=false",
        ],
    )
    path = tmp_path / "config.toml"
    path.write_text(to_toml(cfg.to_dict()))
    again = load_config(path)
    assert again == cfg
    assert again.optim.weight_decay == 1e-7 and again.data.train == ["a.txt", "b c.txt"]


def test_to_toml_escapes_strings_into_valid_ascii_toml(tmp_path: Path) -> None:
    awkward = 'q"uote \\back\tslash \x7f del caf\u00e9 \U0001f680 rocket'
    cfg = RunConfig()
    cfg.train.output_dir = awkward
    cfg.data.train = ["line\nbreak", "ü"]
    text = to_toml(cfg.to_dict())
    assert text.isascii()
    path = tmp_path / "config.toml"
    path.write_text(text)
    again = load_config(path)
    assert again.train.output_dir == awkward
    assert again.data.train == ["line\nbreak", "ü"]


def test_to_toml_rejects_unsupported_values() -> None:
    with pytest.raises(TypeError):
        to_toml({"train": {"x": None}})


# ---------------------------------------------------------------- listing


def test_list_checkpoints_of_a_run_without_checkpoints_is_empty(tmp_path: Path) -> None:
    assert ckpt.list_checkpoints(tmp_path) == []


def test_list_checkpoints_keeps_complete_ones_ordered_by_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for step in (300, 20, 100_000_000, 99_999_999, 1000):
        make_checkpoint(tmp_path, step)
    make_checkpoint(tmp_path, 500, done=False)  # killed before DONE
    tmp = ckpt.checkpoint_root(tmp_path) / f".tmp_{ckpt.step_dir_name(600)}"
    tmp.mkdir()
    (tmp / ckpt.DONE).write_text("step 600\n")  # renamed never happened
    (ckpt.checkpoint_root(tmp_path) / "notes").mkdir()
    with caplog.at_level(logging.WARNING, logger="hornn_dist.run.checkpoint"):
        found = ckpt.list_checkpoints(tmp_path)
    assert names(found) == [
        "step_00000020",
        "step_00000300",
        "step_00001000",
        "step_99999999",
        "step_100000000",
    ]
    assert "step_00000500" in caplog.text and ".tmp_" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hornn_dist.run.checkpoint"):
        ckpt.list_checkpoints(tmp_path, warn=False)
    assert caplog.text == ""


# ---------------------------------------------------------------- resolving


def test_resolve_a_checkpoint_folder(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 10)
    folder = make_checkpoint(tmp_path, 20)
    assert ckpt.resolve_checkpoint(folder) == folder
    assert ckpt.resolve_checkpoint(str(folder)) == folder


def test_resolve_a_run_dir_and_latest_give_the_newest_complete(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 10)
    newest = make_checkpoint(tmp_path, 20)
    make_checkpoint(tmp_path, 30, done=False)
    assert ckpt.resolve_checkpoint(tmp_path) == newest
    assert ckpt.resolve_checkpoint(tmp_path / "checkpoints" / "latest") == newest
    assert ckpt.resolve_checkpoint(tmp_path / "latest") == newest
    assert ckpt.resolve_checkpoint(tmp_path / "checkpoints") == newest


def test_resolve_best_reads_the_newest_trainer_state(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 10, best="step_00000010")
    make_checkpoint(tmp_path, 20, best="step_00000010")
    make_checkpoint(tmp_path, 30, best="step_00000020")
    # An older state naming another best does not count: only the newest checkpoint's does.
    assert ckpt.resolve_checkpoint(tmp_path / "checkpoints" / "best").name == "step_00000020"
    assert ckpt.resolve_checkpoint(tmp_path / "best").name == "step_00000020"


def test_resolve_best_without_a_recorded_best_warns_and_gives_the_newest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_checkpoint(tmp_path, 10)
    make_checkpoint(tmp_path, 20)  # no validation recorded yet
    with caplog.at_level(logging.WARNING, logger="hornn_dist.run.checkpoint"):
        assert ckpt.resolve_checkpoint(tmp_path / "checkpoints" / "best").name == "step_00000020"
    assert "no best checkpoint recorded yet" in caplog.text


def test_resolve_best_that_is_gone_stops_and_names_it(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 10)
    make_checkpoint(tmp_path, 20, best="step_00000005")  # deleted by hand: never pruned
    with pytest.raises(CheckpointError, match="step_00000005 is damaged: it is missing; pass"):
        ckpt.resolve_checkpoint(tmp_path / "checkpoints" / "best")


def test_a_real_folder_named_best_is_taken_as_is(tmp_path: Path) -> None:
    folder = tmp_path / "best"
    make_checkpoint(tmp_path / "elsewhere", 1).rename(folder)  # a complete checkpoint
    assert ckpt.resolve_checkpoint(folder) == folder


@pytest.mark.parametrize(
    ("build", "target", "expected"),
    [
        (False, "nope", "does not exist"),
        (False, "nope/checkpoints/latest", "no complete checkpoint"),
        (False, "nope/checkpoints/best", "no complete checkpoint"),
        (True, "run/checkpoints/step_00000030", "does not exist"),
        (True, "run/checkpoints/step_00000040", "no DONE"),
        (True, "plain", "neither a complete checkpoint"),
        (True, "empty_run", "no complete checkpoint"),
    ],
)
def test_resolve_errors_are_clear(tmp_path: Path, build: bool, target: str, expected: str) -> None:
    if build:
        make_checkpoint(tmp_path / "run", 10)
        make_checkpoint(tmp_path / "run", 40, done=False)
        (tmp_path / "plain").mkdir()
        (tmp_path / "empty_run" / "checkpoints").mkdir(parents=True)
    with pytest.raises(CheckpointError) as info:
        ckpt.resolve_checkpoint(tmp_path / target)
    message = str(info.value)
    assert expected in message and "\n" not in message


def test_unreadable_trainer_state_is_a_checkpoint_error(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 10)
    (folder / ckpt.STATE_FILE).write_text("{not json")
    ckpt.write_checksums(folder)  # written that way, not damaged later
    with pytest.raises(CheckpointError, match="trainer_state.json"):
        ckpt.resolve_checkpoint(tmp_path / "best")


# ---------------------------------------------------------------- pruning


def test_prune_keeps_newest_and_best_and_clears_temp_folders(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40, 50):
        make_checkpoint(tmp_path, step)
    incomplete = make_checkpoint(tmp_path, 60, done=False)
    root = ckpt.checkpoint_root(tmp_path)
    (root / ".tmp_step_00000070").mkdir()
    (root / ".tmp_step_00000070" / "model.safetensors").write_bytes(b"partial")
    removed = ckpt.prune_checkpoints(tmp_path, keep=2, best="step_00000020")
    assert names(removed) == ["step_00000010", "step_00000030"]
    assert names(ckpt.list_checkpoints(tmp_path)) == [
        "step_00000020",
        "step_00000040",
        "step_00000050",
    ]
    assert not (root / ".tmp_step_00000070").exists()
    assert incomplete.exists()  # only complete checkpoints are pruned


def test_prune_with_the_best_among_the_newest(tmp_path: Path) -> None:
    for step in (10, 20, 30):
        make_checkpoint(tmp_path, step)
    removed = ckpt.prune_checkpoints(tmp_path, keep=1, best="step_00000030")
    assert names(removed) == ["step_00000010", "step_00000020"]
    assert names(ckpt.list_checkpoints(tmp_path)) == ["step_00000030"]


@pytest.mark.parametrize("best", [None, ""])
def test_prune_without_a_best(tmp_path: Path, best: str | None) -> None:
    for step in (10, 20, 30):
        make_checkpoint(tmp_path, step)
    ckpt.prune_checkpoints(tmp_path, keep=2, best=best)
    assert names(ckpt.list_checkpoints(tmp_path)) == ["step_00000020", "step_00000030"]


def test_prune_keep_more_than_present_or_zero(tmp_path: Path) -> None:
    for step in (10, 20):
        make_checkpoint(tmp_path, step)
    assert ckpt.prune_checkpoints(tmp_path, keep=5, best=None) == []
    assert names(ckpt.prune_checkpoints(tmp_path, keep=0, best="step_00000020")) == [
        "step_00000010"
    ]
    assert names(ckpt.list_checkpoints(tmp_path)) == ["step_00000020"]


def test_prune_of_a_run_without_checkpoints(tmp_path: Path) -> None:
    assert ckpt.prune_checkpoints(tmp_path, keep=1, best=None) == []


@pytest.mark.parametrize(
    "edit,problem",
    [
        (
            lambda f: (f / ckpt.CHECKSUMS).unlink(),
            "checksums.json, the list of its files, is missing",
        ),
        (
            lambda f: (f / ckpt.CHECKSUMS).write_text("{}"),
            "checksums.json does not list model.safetensors",
        ),
        (
            lambda f: (f / "optimizer.bin").write_bytes(b"x"),
            "optimizer.bin is not listed in checksums.json",
        ),
    ],
    ids=["missing", "empty", "unlisted file"],
)
def test_a_checkpoint_must_list_every_file_it_holds(tmp_path: Path, edit, problem: str) -> None:
    folder = make_checkpoint(tmp_path, 10)
    assert ckpt.is_complete(folder)
    edit(folder)
    assert ckpt.problem_with(folder, deep=False) == problem
    assert ckpt.list_checkpoints(tmp_path) == []
    with pytest.raises(CheckpointError, match=f"incomplete: {problem}"):
        ckpt.resolve_checkpoint(folder)


# ---------------------------------------------------------------- compatibility


def test_compatible_checkpoint_passes(tmp_path: Path) -> None:
    cfg = load_config(None, ["train.epochs=3"])
    folder = make_checkpoint(tmp_path, 10, cfg=cfg, world_size=2)
    # Keys that do not affect the saved state may change on resume.
    now = load_config(None, ["train.epochs=9", "optim.lr=0.1", "train.output_dir=elsewhere"])
    compatible(folder, now, VOCAB_HASH)


def test_another_corpus_is_refused_unless_allowed_and_then_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = make_checkpoint(tmp_path, 10, corpus_hash="a" * 64)
    cfg = load_config(None, [])
    assert compatible(folder, cfg, VOCAB_HASH, "a" * 64) == []
    with pytest.raises(CheckpointError) as info:
        compatible(folder, cfg, VOCAB_HASH, "b" * 64)
    assert f"prepared corpus: checkpoint {'a' * 16} != data {'b' * 16}" in str(info.value)
    assert "set train.allow_corpus_change = true" in str(info.value)
    allowed = load_config(None, ["train.allow_corpus_change=true"])
    with caplog.at_level(logging.WARNING, logger="hornn_dist.train"):
        assert compatible(folder, allowed, VOCAB_HASH, "b" * 64) == []
    assert "train.allow_corpus_change = true allows" in caplog.text


def test_engine_and_precision_may_change_on_resume(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 10)
    same = load_config(None, [])
    assert compatible(folder, same, VOCAB_HASH) == []
    now = load_config(None, ["model.engine=loop", "model.recurrence_precision=autocast"])
    assert compatible(folder, now, VOCAB_HASH) == [
        "model.engine: 'auto' -> 'loop'",
        "model.recurrence_precision: 'fp16' -> 'autocast'",
    ]
    both = load_config(None, ["model.engine=loop", "model.order=2"])
    with pytest.raises(CheckpointError) as info:  # a real difference is still refused, alone
        compatible(folder, both, VOCAB_HASH)
    assert "model.order: checkpoint 3 != config 2" in str(info.value)
    assert "model.engine" not in str(info.value) and str(info.value).count(" != ") == 1


def test_incompatible_checkpoint_lists_every_difference_in_one_line(tmp_path: Path) -> None:
    saved = load_config(None, ["model.order=3", "model.hidden_size=64", "train.bptt=30"])
    folder = make_checkpoint(tmp_path, 10, cfg=saved, world_size=2)
    now = load_config(
        None,
        [
            "model.order=4",
            "model.hidden_size=128",
            "train.batch_size=40",
            "train.bptt=20",
        ],
    )
    with pytest.raises(CheckpointError) as info:
        compatible(folder, now, "ffff00")
    message = str(info.value)
    assert "\n" not in message
    for part in (
        str(folder),
        "model.order: checkpoint 3 != config 4",
        "model.hidden_size: checkpoint 64 != config 128",
        f"vocabulary hash: checkpoint {VOCAB_HASH} != data ffff00",
        "train.batch_size: checkpoint 20 != config 40",
        "train.bptt: checkpoint 30 != config 20",
        "--no-resume",
    ):
        assert part in message, f"{part!r} not in {message!r}"


@pytest.mark.parametrize(
    ("override", "vocab", "expected"),
    [
        ("model.pooling=max", VOCAB_HASH, "model.pooling"),
        ("train.epochs=2", "other", "vocabulary hash"),
        ("train.bptt=7", VOCAB_HASH, "train.bptt"),
    ],
)
def test_each_difference_alone_is_reported(
    tmp_path: Path, override: str, vocab: str, expected: str
) -> None:
    folder = make_checkpoint(tmp_path, 10)
    with pytest.raises(CheckpointError) as info:
        compatible(folder, load_config(None, [override]), vocab)
    assert expected in str(info.value)
    assert str(info.value).count(" != ") == 1
