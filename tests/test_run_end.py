"""What a run tells its user: no progress bar in a redirected log. Real runs of the CLI on the
tiny corpus."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hornn_dist.config import load_config
from hornn_dist.errors import ConfigError
from tests.train_helpers import check_ok, run_module, write_tiny_config


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run_end")
    config = write_tiny_config(folder)
    check_ok(run_module("hornn_dist.prepare", str(config)))
    return folder


def train(workdir: Path, name: str, *extra: str, config: Path | None = None):
    """Run the trainer on the tiny config (or `config`) into workdir/name."""
    config = config or workdir / "config.toml"
    out = f"train.output_dir={workdir / name}"
    return run_module("hornn_dist.train", str(config), "--set", out, *extra)


def _config_without_progress(workdir: Path) -> Path:
    text = (workdir / "config.toml").read_text().replace("progress = false\n", "")
    assert "progress" not in text
    path = workdir / "default_progress.toml"
    path.write_text(text)
    return path


def test_a_redirected_log_has_no_progress_bar(workdir: Path) -> None:
    bar = re.compile(r"\| \d+/\d+ \[")  # tqdm's "| 3/3 [00:00<00:00, 9.1step/s]"
    config = _config_without_progress(workdir)
    quiet = train(workdir, "bar_auto", "--set", "train.max_steps=3", config=config)
    check_ok(quiet)
    assert not bar.search(quiet.stderr), quiet.stderr
    forced = train(
        workdir, "bar_on", "--set", "train.max_steps=3", "--set", "log.progress=true", config=config
    )
    check_ok(forced)
    assert bar.search(forced.stderr)


def test_log_progress_is_auto_true_or_false() -> None:
    assert load_config(None).log.progress == "auto"
    assert load_config(None, ["log.progress=false"]).log.progress is False
    with pytest.raises(ConfigError, match='log.progress must be true, false or "auto"'):
        load_config(None, ["log.progress=sometimes"])
    with pytest.raises(ConfigError, match="log.progress must be of type bool or str"):
        load_config(None, ["log.progress=3"])
