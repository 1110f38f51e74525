"""Bad config input is one line naming the key and the fix, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from hornn_dist import train
from hornn_dist.config import load_config
from hornn_dist.runtime import run_cli
from hornn_dist.util.errors import ConfigError


def _cli_lines(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, list[str]]:
    """Run the train CLI in-process; return its exit code and stderr lines."""
    with pytest.raises(SystemExit) as ended:
        run_cli(train.main, argv)
    return int(ended.value.code), capsys.readouterr().err.strip().splitlines()


def test_a_nul_byte_in_a_path_key_is_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.toml"
    config.write_text('[train]\noutput_dir = "runs/a\\u0000b"\n')
    code, lines = _cli_lines(capsys, [str(config)])
    assert code == 2
    assert lines == [
        "error: train.output_dir holds a NUL byte (\\x00) at character 6, which no path may "
        "hold; remove it"
    ]
    with pytest.raises(ConfigError, match=r"^data.cache_dir holds a NUL byte"):
        load_config(None, ["data.cache_dir=a\x00"])
    with pytest.raises(ConfigError, match=r"^data.train holds a NUL byte"):
        load_config(None, ['data.train=["ok.txt", "b\\u0000.txt"]'])


def test_a_config_path_that_is_a_folder_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = _cli_lines(capsys, [str(tmp_path)])
    assert code == 2
    assert lines == [
        f"error: config file {tmp_path} is a folder, not a file; pass a TOML file such as "
        "configs/demo.toml"
    ]
    (tmp_path / "config.toml").write_text("")  # a run folder: its own config is inside
    code, lines = _cli_lines(capsys, [str(tmp_path)])
    assert lines[0].endswith(f"(a run's own config is {tmp_path / 'config.toml'})")
    missing = tmp_path / "nothing.toml"
    assert _cli_lines(capsys, [str(missing)])[1][0].startswith(
        f"error: config file {missing} not found"
    )


def test_a_config_path_that_is_a_device_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """/dev/null exists: it is named as what it is, where it was "not found"."""
    code, lines = _cli_lines(capsys, ["/dev/null"])
    assert code == 2
    assert lines == [
        "error: config file /dev/null is a character device, not a file; pass a TOML file "
        "such as configs/demo.toml"
    ]


def test_halve_below_under_fixed_then_halve_is_refused() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, ["optim.schedule=fixed_then_halve", "optim.halve_below=0.003"])
    assert str(raised.value) == (
        'optim.halve_below = 0.003 applies to optim.schedule = "plateau" or "newbob" only; '
        '"fixed_then_halve" halves the lr every epoch after optim.halve_after: set '
        'optim.halve_below = 0 or optim.schedule = "plateau"'
    )
    assert load_config(None, ["optim.schedule=fixed_then_halve"]).optim.halve_below == 0
