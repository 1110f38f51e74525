"""prepare draws its progress bars as the trainer does (log.progress): never into a redirected file."""

from __future__ import annotations

import pytest

from tests.train_helpers import check_ok, run_module, write_tiny_config


def _prepare_stderr(tmp_path, progress: bool | str) -> str:
    """Return what `prepare` wrote, its stderr a pipe as under `2> file` (a real process: the
    bars are drawn by its preparing child)."""
    config = write_tiny_config(tmp_path, log={"progress": progress})
    proc = run_module("hornn_dist.prepare", str(config))
    check_ok(proc)
    return proc.stderr + proc.stdout


@pytest.mark.integration  # two real processes, ~5 s each
@pytest.mark.parametrize(("progress", "bars"), [("auto", False), (True, True)])
def test_bars_only_where_log_progress_says(tmp_path, progress, bars):
    """ "auto" (the default) with stderr redirected: no bar, no carriage return; true: bars."""
    out = _prepare_stderr(tmp_path, progress)
    assert ("tiny: vocabulary (train)" in out) is bars
    if not bars:
        assert "\r" not in out
