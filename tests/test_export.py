"""Export: a checkpoint becomes a Hub model folder that loads back with one call, offline."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from hornn_dist.models.config import ModelConfig
from hornn_dist.models.pretrained import PretrainedLM
from hornn_dist.run.checkpoint import list_checkpoints, read_config
from hornn_dist.run.loading import load_model, open_prepared_corpus
from hornn_dist.runtime import build_accelerator
from hornn_dist.util.errors import CheckpointError
from hornn_dist.util.files import write_checksums
from tests.test_demo import _layout_modules
from tests.train_helpers import check_ok, run_here, run_patched, write_tiny_config

HUB_FILES = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
             "README.md", "checksums.json"}  # fmt: skip
CHECKED = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny gated HORNN-3 run of 6 steps (two layers, so every layer's weights travel)."""
    folder = tmp_path_factory.mktemp("export")
    write_tiny_config(folder, model={"num_layers": 2})
    run = folder / "run"
    check_ok(run_here("hornn_dist.train", str(folder / "config.toml"), "--set",
                        f"train.output_dir={run}", "--set", "train.max_steps=6"))  # fmt: skip
    return run


@pytest.fixture(scope="module")
def exported(trained: Path) -> Path:
    out = trained.parent / "hub_model"
    proc = run_here("hornn_dist.export", str(trained), str(out))
    check_ok(proc)
    assert f"to {out} (test ppl " in proc.stdout
    return out


def _one_line_error(proc: subprocess.CompletedProcess, expected: str) -> None:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr[-2000:]


def test_exported_folder_loads_back_with_one_call_and_the_same_logits(
    trained: Path, exported: Path
) -> None:
    assert {p.name for p in exported.iterdir()} == HUB_FILES
    model = PretrainedLM.from_pretrained(exported)  # the one call, from the folder alone
    assert not model.training and len(model.layers) == 2

    checkpoint = list_checkpoints(trained)[-1]
    cfg = read_config(checkpoint)
    corpus = open_prepared_corpus(cfg.data, build_accelerator("no"), splits=(), prepare=False)
    reference = load_model(checkpoint, cfg, corpus, "cpu")
    assert model.state_dict().keys() == reference.state_dict().keys()
    tokens = torch.tensor(corpus.encode("w1 w2 w3\nw4 w5 w1 w7")).view(-1, 1)  # (T, 1)
    with torch.no_grad():
        assert torch.equal(model(tokens)[0], reference(tokens)[0])

    meta = json.loads((exported / "config.json").read_text())
    assert meta["model"]["pooling"] == "gated" and meta["vocab_size"] == corpus.vocab_size
    assert "plan" not in meta  # how the layers run is decided where the model is loaded
    # the corpus's own tokenizer file, as transformers' PreTrainedTokenizerFast reads it
    assert (exported / "tokenizer.json").read_bytes() == (
        corpus.folder / "tokenizer.json"
    ).read_bytes()


def test_model_card_gives_the_test_ppl_of_the_checkpoint_and_the_config(
    trained: Path, exported: Path
) -> None:
    scored = run_here("hornn_dist.evaluate", str(trained), "--split", "test")
    check_ok(scored)
    ppl = scored.stdout.split("ppl ")[-1].strip()
    card = (exported / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: hornn_dist" in card
    assert f"| test perplexity | **{ppl}** (" in card
    assert "HORNN-3 with gated pooling, 2 layers of 12 tanh units" in card
    cfg = read_config(list_checkpoints(trained)[-1])
    assert cfg.to_toml().split("[model]")[1].split("[optim]")[0] in card
    # the folder too, from the corpus's cache (its config.json keeps the cache's name alone)
    again = run_here(
        "hornn_dist.evaluate", str(exported), "--split", "test", "--cache-dir", cfg.data.cache_dir
    )
    check_ok(again)
    assert again.stdout.splitlines()[-1] == scored.stdout.splitlines()[-1]


def test_an_export_keeps_no_local_path_and_names_its_data(trained: Path, exported: Path) -> None:
    cfg = read_config(list_checkpoints(trained)[-1])
    local = str(trained.parent)  # the tmp folder holding the run, its corpus and its cache
    assert local in cfg.to_toml()  # the run's own config has them
    for name in ("config.json", "README.md"):
        assert local not in (exported / name).read_text(), name
    meta = json.loads((exported / "config.json").read_text())
    corpus = open_prepared_corpus(cfg.data, build_accelerator("no"), splits=(), prepare=False)
    assert meta["data"]["prepared"] == corpus.folder.name
    assert meta["data"]["corpus_hash"] == corpus.content_hash
    assert meta["data"]["tokens"]["test"] == len(corpus.split("test"))
    assert meta["training"]["data"]["cache_dir"] == Path(cfg.data.cache_dir).name
    card = (exported / "README.md").read_text()
    assert "Local paths were reduced to their last part (`data.cache_dir`" in card


def test_generate_from_the_exported_folder_alone(trained: Path, exported: Path) -> None:
    args = ("--prompt", "w1 w2", "--tokens", "12", "--seed", "3")
    from_checkpoint = run_here("hornn_dist.generate", str(trained), *args)
    check_ok(from_checkpoint)
    # a copy whose run config names a corpus this machine does not have
    alone = trained.parent / "elsewhere" / "hub_model"
    shutil.copytree(exported, alone)
    meta = json.loads((alone / "config.json").read_text())
    meta["training"]["data"]["cache_dir"] = str(trained.parent / "no_such_cache")
    (alone / "config.json").write_text(json.dumps(meta))
    write_checksums(alone, CHECKED)  # an edit made on purpose, listed again
    sample = run_here("hornn_dist.generate", str(alone), *args)
    check_ok(sample)
    assert sample.stdout == from_checkpoint.stdout and sample.stdout.split()[:2] == ["w1", "w2"]
    # scores need the corpus: evaluate says where it looked
    _one_line_error(
        run_here("hornn_dist.evaluate", str(alone)), "the run's prepared corpus is not at"
    )


def test_export_refuses_a_folder_in_use_and_evaluate_a_broken_export(
    trained: Path, exported: Path
) -> None:
    _one_line_error(
        run_here("hornn_dist.export", str(trained), str(exported)),
        f"{exported} exists and is not an empty folder",
    )
    broken = trained.parent / "broken_model"
    shutil.copytree(exported, broken)
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    _one_line_error(
        run_here("hornn_dist.generate", str(broken)),
        f"model folder {broken} is damaged: model.safetensors has 15 bytes",
    )
    write_checksums(broken, CHECKED)  # listed as it is: loading it must still fail in one line
    _one_line_error(
        run_here("hornn_dist.generate", str(broken)), f"cannot load the model in {broken}"
    )
    (broken / "config.json").write_text("{}")
    write_checksums(broken, CHECKED)
    _one_line_error(
        run_here("hornn_dist.generate", str(broken)), "has no model, vocab_size, vocab_hash"
    )


def flip_one_bit(path: Path) -> None:
    """Flip one bit in the middle of a file (its size stays)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json", "config.json"])
def test_a_bit_flip_in_an_export_is_refused_in_one_line(
    trained: Path, exported: Path, name: str
) -> None:
    damaged = trained.parent / f"flipped_{name}"
    shutil.copytree(exported, damaged)
    flip_one_bit(damaged / name)
    said = f"model folder {damaged} is damaged: {name} does not match its sha256"
    _one_line_error(run_here("hornn_dist.generate", str(damaged), "--tokens", "3"), said)
    if name == "model.safetensors":
        _one_line_error(run_here("hornn_dist.evaluate", str(damaged)), said)
        with pytest.raises(CheckpointError, match=said):
            PretrainedLM.from_pretrained(damaged)


def test_an_export_without_its_checksums_is_refused(trained: Path, exported: Path) -> None:
    bare = trained.parent / "bare_model"
    shutil.copytree(exported, bare)
    (bare / "checksums.json").unlink()
    said = f"model folder {bare} is damaged: checksums.json, the list of its files, is missing"
    _one_line_error(run_here("hornn_dist.generate", str(bare)), said)
    with pytest.raises(CheckpointError, match=said):
        PretrainedLM.from_pretrained(bare)


@pytest.mark.parametrize("damage", ["ids swapped", "one byte changed"])
def test_export_refuses_a_damaged_corpus_tokenizer(trained: Path, damage: str) -> None:
    corpus = open_prepared_corpus(
        read_config(list_checkpoints(trained)[-1]).data,
        build_accelerator("no"),
        splits=(),
        prepare=False,
    )
    path = corpus.folder / "tokenizer.json"
    saved = path.read_bytes()
    try:
        if damage == "ids swapped":
            tokenizer = json.loads(saved)
            vocab = tokenizer["model"]["vocab"]
            vocab["w1"], vocab["w2"] = vocab["w2"], vocab["w1"]
            path.write_text(json.dumps(tokenizer))
            said = "other words or ids"
        else:  # a trailing space: the id table intact, the file not (the manifest's sha256)
            path.write_bytes(saved + b" ")
            said = "does not match the sha256 recorded for it"
        out = trained.parent / f"export_{damage.replace(' ', '_')}"
        proc = run_here("hornn_dist.export", str(trained), str(out))
        _one_line_error(proc, f"{path} does not match")
        assert said in proc.stderr and not out.exists()
    finally:
        path.write_bytes(saved)


@pytest.mark.parametrize("dangling", [False, True])
def test_export_onto_a_link_is_refused(trained: Path, tmp_path: Path, dangling: bool) -> None:
    target = tmp_path / "empty_folder"
    if not dangling:
        target.mkdir()
    link = tmp_path / "model_link"
    link.symlink_to(target)
    _one_line_error(
        run_here("hornn_dist.export", str(trained), str(link)),
        f"{link} is a symbolic link (to {target}); export into a new folder",
    )
    assert link.is_symlink() and (dangling or not any(target.iterdir()))
    assert not target.exists() if dangling else target.is_dir()


@pytest.mark.parametrize("arch", ["hornn", "lstm"])
def test_save_pretrained_round_trip(tmp_path: Path, arch: str) -> None:
    model = PretrainedLM(ModelConfig(arch=arch, hidden_size=8, order=2, pooling="max"), 20)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "checksums.json").read_text()).keys() == {
        "config.json",
        "model.safetensors",
    }
    back = PretrainedLM.from_pretrained(tmp_path)
    assert back.cfg == model.cfg and back.vocab_size == 20
    for key, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key


def test_the_layout_page_lists_the_export_command() -> None:
    modules, _ = _layout_modules()
    assert "hornn_dist/export.py" in modules


# `python -c SIGTERM_WHILE_WRITING CHECKPOINT OUT_DIR`: exports, sending itself SIGTERM while
# the model folder is being built beside OUT_DIR (at its tokenizer_config.json)
SIGTERM_WHILE_WRITING = """
import os, signal, sys
from hornn_dist import export
from hornn_dist.runtime import run_cli

real_write_json = export.write_json
def write_then_sigterm(path, value):
    real_write_json(path, value)
    os.kill(os.getpid(), signal.SIGTERM)
export.write_json = write_then_sigterm
run_cli(export.main, sys.argv[1:])
"""


def test_sigterm_during_an_export_is_one_line_and_leaves_nothing(trained: Path) -> None:
    out = trained.parent / "stopped_export"
    proc = run_patched(SIGTERM_WHILE_WRITING, str(trained), str(out))
    assert proc.returncode == 2, proc.stderr[-2000:]
    checkpoint = list_checkpoints(trained)[-1]
    assert proc.stderr.splitlines()[-1] == (
        f"error: stopped by SIGTERM while exporting {checkpoint}: nothing was written to {out}"
    )
    assert not out.exists() and not list(out.parent.glob(f".{out.name}.*"))
