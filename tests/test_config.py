"""Run config: TOML round trip, `--set` overrides, and one-line ConfigErrors that name the key."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from hornn_dist.config import (
    SECTIONS,
    RunConfig,
    config_from_dict,
    load_config,
    parse_override,
)
from hornn_dist.util.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Every section, every value changed from its default, so a dropped key would show.
FULL_TOML = """
[data]
preset = "ptb"
source = "hub"
name = "mini"
path = "corpora/mini"
train = ["a.txt", "b.txt"]
valid = ["v.txt"]
test = ["t.txt"]
hub_id = "org/ds"
hub_config = "cfg"
hub_revision = "main"
text_column = "sentence"
train_split = "tr"
valid_split = "va"
test_split = "te"
min_count = 3
max_vocab = 10000
lowercase = true
add_eos = false
errors = "replace"
shard_tokens = 5000
cache_dir = "cache"

[model]
arch = "gru"
pooling = "gated"
order = 4
alpha = 0.7
hidden_size = 64
embedding_size = 32
num_layers = 2
activation = "relu"
init_std = 0.05
engine = "loop"

[optim]
lr = 0.25
momentum = 0.8
weight_decay = 0.0
clip = 2.0
clip_mode = "value"
max_col_norm = 2.0
schedule = "fixed_then_halve"
halve_after = 3
min_lr = 0.001
stop_improvement = 0.01

[train]
batch_size = 8
bptt = 12
epochs = 4
max_steps = 100
eval_batch_size = 4
eval_every = 50
mixed_precision = "bf16"
seed = 7
output_dir = "runs/full"
checkpoint_every = 25
keep_checkpoints = 5

[log]
every = 10
tensorboard = false
progress = false
"""


def write(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    """Return the path of a file holding `text`."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def config_error(path: Path | None = None, overrides: tuple[str, ...] = ()) -> str:
    """Return the ConfigError message of loading `path` with overrides; check it is one line."""
    with pytest.raises(ConfigError) as info:
        load_config(path, list(overrides))
    message = str(info.value)
    assert "\n" not in message and "\r" not in message, message
    return message


# ---------------------------------------------------------------- loading and round trip


def test_defaults_without_a_file_are_valid() -> None:
    assert load_config(None) == RunConfig()


def test_every_section_and_key_is_read(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL_TOML))
    assert cfg.data.train == ["a.txt", "b.txt"]
    assert cfg.data.lowercase is True and cfg.data.add_eos is False
    assert (cfg.model.pooling, cfg.model.order, cfg.model.alpha) == ("gated", 4, 0.7)
    assert (cfg.optim.schedule, cfg.optim.halve_after, cfg.optim.min_lr) == (
        "fixed_then_halve",
        3,
        0.001,
    )
    assert (cfg.train.mixed_precision, cfg.train.output_dir) == ("bf16", "runs/full")
    assert cfg.log == type(cfg.log)(every=10, tensorboard=False, progress=False)
    # Each key in the file differs from its default and arrives unchanged, so each was read.
    written = tomllib.loads(FULL_TOML)
    assert tuple(written) == SECTIONS
    defaults, loaded = RunConfig().to_dict(), cfg.to_dict()
    for section, values in written.items():
        for key, value in values.items():
            assert value != defaults[section][key], f"{section}.{key} equals its default"
            assert loaded[section][key] == value, f"{section}.{key} was not read"


def test_to_dict_round_trips_through_config_from_dict(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL_TOML))
    assert tuple(cfg.to_dict()) == SECTIONS
    assert config_from_dict(cfg.to_dict()) == cfg


def test_int_is_accepted_where_a_float_is_expected(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, '[optim]\nlr = 1\nclip = 0\nclip_mode = "norm"\n'))
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)
    assert cfg.optim.clip == 0.0 and isinstance(cfg.optim.clip, float)


def test_flat_names_every_key_and_joins_lists(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL_TOML))
    flat = cfg.flat()
    n_keys = sum(len(dataclasses.fields(getattr(cfg, s))) for s in SECTIONS)
    assert len(flat) == n_keys
    assert flat["data.train"] == "a.txt,b.txt"
    assert flat["data.test"] == "t.txt"
    assert flat["model.order"] == 4
    assert flat["log.tensorboard"] is False
    assert all(isinstance(v, bool | int | float | str) for v in flat.values())
    assert RunConfig().flat()["data.train"] == ""


# ---------------------------------------------------------------- overrides


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("train.max_steps=100", ("train", "max_steps", 100)),
        ("optim.lr=0.125", ("optim", "lr", 0.125)),
        ("optim.min_lr=1e-5", ("optim", "min_lr", 1e-5)),
        ("log.progress=false", ("log", "progress", False)),
        ('model.pooling="max"', ("model", "pooling", "max")),
        ("model.pooling=max", ("model", "pooling", "max")),  # bare string
        ("train.output_dir=runs/x", ("train", "output_dir", "runs/x")),
        ('data.train=["a.txt", "b.txt"]', ("data", "train", ["a.txt", "b.txt"])),
        (" train.bptt = 35 ", ("train", "bptt", 35)),
        ("train.output_dir=a=b", ("train", "output_dir", "a=b")),
    ],
)
def test_parse_override(item: str, expected: tuple) -> None:
    assert parse_override(item) == expected


def test_overrides_apply_on_top_of_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, FULL_TOML)
    cfg = load_config(
        path,
        [
            "train.output_dir=runs/x",
            'data.train=["c.txt"]',
            "train.bptt=35",
            "optim.lr=1",
            "log.every=3",
            "log.every=4",  # the last one wins
        ],
    )
    assert cfg.train.output_dir == "runs/x"
    assert cfg.data.train == ["c.txt"]
    assert cfg.train.bptt == 35
    assert cfg.optim.lr == 1.0
    assert cfg.log.every == 4
    assert cfg.model.order == 4  # untouched keys keep the file's values


def test_override_adds_a_section_missing_from_the_file(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "[model]\norder = 2\n"), ["train.epochs=1"])
    assert (cfg.model.order, cfg.train.epochs) == (2, 1)


def test_bare_string_for_a_list_key_becomes_a_one_item_list() -> None:
    assert load_config(None, ["data.valid=v.txt"]).data.valid == ["v.txt"]


def test_string_key_keeps_text_that_looks_like_another_type() -> None:
    cfg = load_config(None, ["train.output_dir=2024", "data.hub_revision=true"])
    assert cfg.train.output_dir == "2024"
    assert cfg.data.hub_revision == "true"


# ---------------------------------------------------------------- bad configs


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # --set overrides (a list) ------------------------------------------------------
        # unknown section and key, with a close match suggested
        (["tarin.bptt=3"], ["[tarin]", "did you mean train?"]),
        (["train.max_step=3"], ["train.max_step", "did you mean train.max_steps?"]),
        (["optim.momentun=0.5"], ["optim.momentun", "did you mean optim.momentum?"]),
        (["train.zzzz=1"], ["train.zzzz", "allowed:", "max_steps"]),
        # wrong types
        (['train.bptt="30"'], ["train.bptt", "int", "'30'"]),
        (["train.bptt=30.0"], ["train.bptt", "int", "30.0"]),
        (["train.bptt=true"], ["train.bptt", "int", "True"]),
        (["train.epochs=ten"], ["train.epochs", "int", "'ten'"]),
        (['optim.lr="0.5"'], ["optim.lr", "float", "'0.5'"]),
        (["log.tensorboard=yes"], ["log.tensorboard", "bool", "'yes'"]),
        (["data.train=[1, 2]"], ["data.train", "list of strings"]),
        (["optim.lr=nan"], ["optim.lr", "finite"]),
        (["optim.momentum=inf"], ["optim.momentum", "finite"]),
        ([f"optim.clip={10**400}"], ["optim.clip", "finite"]),
        # out of range
        (["train.bptt=0"], ["train.bptt", ">= 1", "got 0"]),
        (["train.batch_size=-2"], ["train.batch_size", ">= 1", "got -2"]),
        (["train.max_steps=-1"], ["train.max_steps", ">= 0"]),
        (["train.seed=-1"], ["train.seed", "got -1"]),
        (["optim.lr=0"], ["optim.lr", "> 0"]),
        (["optim.momentum=1.0"], ["optim.momentum", "[0.0, 1.0)", "got 1.0"]),
        (["optim.halve_below=1"], ["optim.halve_below", "[0.0, 1.0)", "got 1.0"]),
        (["optim.halve_below=-0.1"], ["optim.halve_below", "[0.0, 1.0)", "got -0.1"]),
        (["optim.clip=-1"], ["optim.clip", ">= 0"]),
        (["log.every=0"], ["log.every", ">= 1"]),
        (["model.order=0"], ["model.order", ">= 1", "got 0"]),
        (["model.alpha=1.5"], ["model.alpha", "(0, 1)", "1.5"]),
        (["model.alpha=0"], ["model.alpha", "(0, 1)"]),
        (["data.min_count=0"], ["data.min_count", ">= 1", "got 0"]),
        (["train.output_dir="], ["train.output_dir", "empty"]),
        # above a sane upper bound (these crashed or hung the run later)
        (["optim.lr=1e300"], ["optim.lr", "<= 1000", "got 1e+300"]),
        (["optim.weight_decay=1e300"], ["optim.weight_decay", "<= 1", "1e+300"]),
        (["optim.clip=1e300"], ["optim.clip", "1e+06"]),
        (["optim.max_col_norm=1e300"], ["optim.max_col_norm", "1e+06"]),
        (["optim.min_lr=1e300"], ["optim.min_lr", "1000"]),
        (["model.order=100000"], ["model.order", "<= 4096", "got 100000"]),
        (["model.hidden_size=99999999999999999999"], ["model.hidden_size", "<= 1048576"]),
        (["model.embedding_size=2000000"], ["model.embedding_size", "<= 1048576"]),
        (["model.num_layers=100000"], ["model.num_layers", "<= 1024"]),
        (["model.init_std=1e300"], ["model.init_std", "(0, 100]"]),
        ([f"train.collective_timeout={2**63 - 10}"], ["train.collective_timeout", "604800"]),
        (["train.batch_size=10000000"], ["train.batch_size", "<= 1048576"]),
        (["train.eval_batch_size=10000000"], ["train.eval_batch_size", "<= 1048576"]),
        (["train.bptt=10000000"], ["train.bptt", "<= 1048576"]),
        ([f"data.chunk_bytes={2**63 - 1}"], ["data.chunk_bytes", "between 16 and 1073741824"]),
        # choices list the allowed values
        (["optim.clip_mode=foo"], ["optim.clip_mode", "value, norm", "'foo'"]),
        (["optim.schedule=cosine"], ["optim.schedule", "plateau, fixed_then_halve"]),
        (["train.mixed_precision=fp8"], ["train.mixed_precision", "no, bf16, fp16", "'fp8'"]),
        (["model.pooling=mean"], ["model.pooling", "sum, max, fofe, gated", "'mean'"]),
        (["model.arch=transformer"], ["model.arch", "hornn, rnn, lstm, gru"]),
        (["data.preset=ptb2"], ["data.preset", "ptb, text8", "'ptb2'"]),
        # malformed --set
        (["train.bptt"], ["--set 'train.bptt'", "section.key=value"]),
        (["bptt=3"], ["--set 'bptt=3'", "section.key=value"]),
        (["train.=3"], ["--set 'train.=3'", "section.key=value"]),
        (["=3"], ["section.key=value"]),
        # a config file's text (a string) ----------------------------------------------
        ("[modle]\norder = 2\n", ["[modle]", "did you mean model?"]),
        ("[zzz]\n", ["[zzz]", "allowed:", "train"]),
        ("[train]\nbpt = 30\n", ["train.bpt", "did you mean train.bptt?"]),
        ("train = 3\n", ["[train]", "table"]),
        ('[optim]\nclip_mode = "foo"\n', ["optim.clip_mode", "value, norm"]),
        ("[train]\nbptt = 0\n", ["train.bptt", ">= 1"]),
        ('[data]\ntrain = "x.txt"\nmin_count = 0\n', ["data.min_count", ">= 1"]),
        ("[train\nbptt = 3\n", ["not valid TOML", "line 1"]),
        ('[train]\noutput_dir = "unterminated\n', ["not valid TOML"]),
        ("[train]\nbptt = 3\nbptt = 4\n", ["not valid TOML"]),
    ],
)
def test_a_bad_override_or_file_raises_one_line_naming_the_key(
    tmp_path: Path, given: list[str] | str, expected: list[str]
) -> None:
    if isinstance(given, str):
        message = config_error(write(tmp_path, given))
    else:
        message = config_error(None, tuple(given))
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    message = config_error(tmp_path / "nope.toml")
    assert "nope.toml" in message and "not found" in message


def test_a_file_with_a_utf8_bom_is_read(tmp_path: Path) -> None:
    path = tmp_path / "bom.toml"  # as Windows editors save UTF-8
    path.write_bytes("\ufeff[train]\nbptt = 7\n".encode())
    assert load_config(path).train.bptt == 7


def test_non_utf8_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[train]\noutput_dir = "caf\xe9"\n')
    assert "latin1.toml" in config_error(path)


def test_override_into_a_non_table_section_is_a_config_error(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "train = 3\n"), ("train.bptt=3",))
    assert "[train]" in message


def test_config_from_dict_checks_like_load_config() -> None:
    with pytest.raises(ConfigError, match=r"did you mean train\.max_steps\?"):
        config_from_dict({"train": {"max_stepz": 1}})
    with pytest.raises(ConfigError, match="model.order"):
        config_from_dict({"model": {"order": 0}})


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        load_config(None, ["train.bptt=0"])


def test_a_leading_tilde_in_a_path_key_is_the_home_folder(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = load_config(
        None,
        [
            "train.output_dir=~/runs/x",
            "data.cache_dir=~/cache",
            'data.train=["~/a.txt", "b.txt"]',
            'data.preset="text8"',  # a preset that reads data.path
            "data.path=~/text8",
        ],
    )
    assert cfg.train.output_dir == str(tmp_path / "runs" / "x")
    assert cfg.data.cache_dir == str(tmp_path / "cache")
    assert cfg.data.train == [str(tmp_path / "a.txt"), "b.txt"]
    assert cfg.data.path == str(tmp_path / "text8")
