"""The [data] config: validation, presets and TOML loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from hornn_dist.data.config import CORPORA_DIR, DataConfig, apply_preset
from hornn_dist.errors import ConfigError
from hornn_dist.prepare import load_data_section


def test_validate_messages_are_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^data.min_count must be >= 1, got 0$"):
        DataConfig(min_count=0).validate()
    with pytest.raises(ConfigError, match="data.valid_chars"):
        DataConfig(heldout_chars=10, valid_chars=11).validate()
    with pytest.raises(ConfigError, match="data.name"):
        DataConfig(name="a/b").validate()
    with pytest.raises(ConfigError, match="data.preset"):
        DataConfig(preset="imdb").validate()


def test_preset_fills_defaults_and_user_keys_win(tmp_path: Path) -> None:
    (tmp_path / "text8.zip").write_bytes(b"")
    cfg = apply_preset(DataConfig(preset="text8", path=str(tmp_path)))
    assert (cfg.source, cfg.train, cfg.min_count, cfg.add_eos) == (
        "files",
        [str(tmp_path / "text8.zip")],
        10,
        False,
    )
    assert (cfg.heldout_chars, cfg.valid_chars) == (1_000_000, 500_000)
    assert apply_preset(DataConfig(preset="text8", min_count=5)).min_count == 5
    hub = apply_preset(DataConfig(preset="text8"))
    assert (hub.source, hub.hub_id) == ("hub", "afmck/text8")


def test_ptb_preset_local_and_hub(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "ptb.train.txt").write_text("a\n")
    local = apply_preset(DataConfig(preset="ptb", path=str(tmp_path)))
    assert local.valid == [str(tmp_path / "data" / "ptb.valid.txt")]
    hub = apply_preset(DataConfig(preset="ptb"))
    assert (hub.hub_id, hub.hub_revision, hub.text_column) == (
        "ptb-text-only/ptb_text_only",
        "refs/convert/parquet",
        "sentence",
    )
    demo = apply_preset(DataConfig(preset="demo"))
    assert Path(demo.train[0]).parent == CORPORA_DIR and Path(demo.train[0]).exists()


def test_load_data_section_reads_data_section_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('[data]\npreset = "demo"\nmin_count = 3\n\n[model]\nhidden_size = 10\n')
    cfg = load_data_section(
        str(path), ["data.max_vocab=100", "lowercase=true", "train.bptt=5", "name=demo_x"]
    )
    assert (cfg.preset, cfg.min_count, cfg.max_vocab, cfg.lowercase, cfg.name) == (
        "demo",
        3,
        100,
        True,
        "demo_x",
    )
    with pytest.raises(ConfigError, match="unknown key data.min_cont"):
        load_data_section(str(path), ["data.min_cont=3"])
    with pytest.raises(ConfigError, match="data.min_count must be of type int"):
        load_data_section(str(path), ['data.min_count="3"'])
    with pytest.raises(ConfigError, match="not found"):
        load_data_section(str(tmp_path / "missing.toml"), [])
