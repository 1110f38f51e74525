"""The [data] config: validation, presets and TOML loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from hornn_dist.config import load_config
from hornn_dist.data.config import CORPORA_DIR, DataConfig, apply_preset
from hornn_dist.data.pipeline import corpus_folder, prepare_corpus
from hornn_dist.prepare import load_data_section
from hornn_dist.util.errors import ConfigError, DataError


def test_validate_messages_are_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^data.min_count must be >= 1, got 0$"):
        DataConfig(min_count=0).validate()
    with pytest.raises(ConfigError, match="data.valid_chars"):
        DataConfig(heldout_chars=10, valid_chars=11).validate()
    with pytest.raises(ConfigError, match="data.name"):
        DataConfig(name="a/b").validate()
    with pytest.raises(ConfigError, match="data.preset"):
        DataConfig(preset="imdb").validate()


@pytest.mark.parametrize("max_vocab", [-1, 1, 2, 3])
def test_a_max_vocab_that_leaves_under_two_words_is_refused_by_the_config_check(
    max_vocab: int,
) -> None:
    with pytest.raises(ConfigError) as raised:
        DataConfig(max_vocab=max_vocab).validate()
    assert str(raised.value) == (
        "data.max_vocab must be 0 (unlimited) or >= 4 (<unk>, <eos> and the two words a "
        f"language model needs at least), got {max_vocab}"
    )
    DataConfig(max_vocab=4).validate()
    DataConfig(max_vocab=0).validate()


@pytest.mark.parametrize("preset", ["", "demo"])
def test_a_data_path_no_preset_reads_is_refused(preset: str) -> None:
    # it would be ignored: the run would train on the demo (or data.train) corpus silently
    with pytest.raises(ConfigError, match=r"^data.path is read by the ptb, text8, wikitext103 "):
        apply_preset(DataConfig(preset=preset, path="data/mine"))
    apply_preset(DataConfig(preset=preset))


@pytest.mark.parametrize(
    ("preset", "split"), [("ptb", "train"), ("wikitext103", "test"), ("text8", "train")]
)
def test_a_data_path_beside_the_files_it_names_is_refused(preset: str, split: str) -> None:
    # the preset fills data.train/valid/test from data.path only where they are not set
    cfg = load_config(
        None, [f'data.preset="{preset}"', 'data.path="data/x"', f"data.{split}=a.txt"]
    )
    with pytest.raises(
        ConfigError, match=rf"^data.path = 'data/x' would be ignored: .*data.{split}"
    ):
        apply_preset(cfg.data)
    apply_preset(load_config(None, [f'data.preset="{preset}"', f"data.{split}=a.txt"]).data)


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


def test_a_key_set_to_its_default_still_wins_over_the_preset(tmp_path: Path) -> None:
    # text8's preset turns add_eos off; the user turning it on (its default) must stick
    cfg = load_config(None, ["data.preset=text8", "data.add_eos=true", "data.min_count=1"])
    resolved = apply_preset(cfg.data)
    assert (resolved.add_eos, resolved.min_count) == (True, 1)
    assert apply_preset(load_config(None, ["data.preset=text8"]).data).add_eos is False
    # from a TOML file the same
    path = tmp_path / "run.toml"
    path.write_text('[data]\npreset = "text8"\nadd_eos = true\n')
    assert apply_preset(load_config(path).data).add_eos is True


def test_written_config_resolves_to_the_same_corpus(tmp_path: Path) -> None:
    for overrides in (
        ["data.preset=text8", "data.add_eos=true"],
        ["data.preset=text8"],
        ["data.preset=demo", "data.min_count=1"],
        ["data.source=files", "data.add_eos=false"],
    ):
        cfg = load_config(None, overrides)
        path = tmp_path / "written.toml"
        path.write_text(cfg.to_toml())
        again = load_config(path)
        assert apply_preset(again.data) == apply_preset(cfg.data), overrides
        assert corpus_folder(again.data) == corpus_folder(cfg.data), overrides
        assert again.model == cfg.model and again.train == cfg.train


MISSING_PRESET_CORPUS = {
    "text8": "download http://mattmahoney.net/dc/text8.zip to {path}",
    "ptb": "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz, unpack it and put its "
    "data/ptb.train.txt, ptb.valid.txt, ptb.test.txt in the folder {path}",
    "wikitext103": "wiki.train.tokens, wiki.valid.tokens, wiki.test.tokens of WikiText-103",
}


@pytest.mark.parametrize("preset", sorted(MISSING_PRESET_CORPUS))
def test_a_missing_preset_path_names_data_path_the_source_and_the_hub(
    tmp_path: Path, preset: str
) -> None:
    path = str(tmp_path / "nowhere")
    cfg = DataConfig(preset=preset, path=path, cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DataError) as caught:
        prepare_corpus(cfg, progress=False)
    message = str(caught.value)
    assert message.startswith(f"data.path = {path!r} does not exist (data.preset = {preset!r}")
    assert MISSING_PRESET_CORPUS[preset].format(path=path) in message
    hub_id = apply_preset(DataConfig(preset=preset)).hub_id
    assert message.endswith(f"or leave data.path empty to stream it from the hub ({hub_id})")
    assert "data.train" not in message and "\n" not in message


def test_a_preset_folder_without_the_corpus_files_names_the_missing_file(tmp_path: Path) -> None:
    cfg = DataConfig(preset="ptb", path=str(tmp_path), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DataError, match=r"^data.path = '.*' has no ptb.train.txt \(data.preset"):
        prepare_corpus(cfg, progress=False)
    cfg = DataConfig(preset="text8", path=str(tmp_path), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DataError, match=r"has no text8 .*http://mattmahoney.net/dc/text8.zip"):
        prepare_corpus(cfg, progress=False)


def test_shipped_configs_stream_from_the_hub_unless_the_corpus_needs_local_files() -> None:
    configs = Path(__file__).resolve().parents[1] / "configs"
    for name in ("text8", "wikitext103"):
        data = apply_preset(load_config(configs / f"{name}.toml").data)
        assert (data.path, data.source) == ("", "hub"), name
        assert (
            'path = "data/' in (configs / f"{name}.toml").read_text()
        )  # the local line, commented
    ptb = (configs / "ptb.toml").read_text()
    assert "simple-examples.tgz" in ptb
