"""`python -m hornn_dist.launch`'s one `launch:` line, made from what torchrun's agent raises (the
real launches are in test_daily_use.py)."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import pytest
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from hornn_dist import launch


def _failure(tmp_path: Path, exitcode: int) -> ProcessFailure:
    """Return a rank's failure as the agent records it, with no error file written."""
    return ProcessFailure(local_rank=0, pid=1, exitcode=exitcode, error_file=str(tmp_path / "no"))


def test_the_failure_line_names_each_rank_in_order_with_its_exit(tmp_path: Path) -> None:
    failures = {10: _failure(tmp_path, 1), 2: _failure(tmp_path, -signal.SIGKILL)}
    failures[0] = _failure(tmp_path, 2)
    assert launch.failure_line(failures) == (
        "launch: failed (rank 0 exit 2, rank 2 ended by SIGKILL, rank 10 exit 1)"
    )


def test_the_signal_line_names_the_signal() -> None:
    assert launch.signal_line(signal.SIGINT) == (
        "launch: the launcher got SIGINT and passed it on to the ranks"
    )
    assert launch.signal_line(200) == (
        "launch: the launcher got signal 200 and passed it on to the ranks"
    )


def test_the_agents_log_records_stay_off_the_console(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ours = logging.getLogger("hornn_dist.sweep")
    # no handler but caplog's on the way up: an earlier test's may write to a closed stream
    for logger in (logging.getLogger(launch.ELASTIC_LOGGER), ours, logging.getLogger("hornn_dist")):
        monkeypatch.setattr(logger, "handlers", [])
        monkeypatch.setattr(logger, "propagate", True)
    monkeypatch.setattr(logging.getLogger(), "handlers", [caplog.handler])
    agent = logging.getLogger(f"{launch.ELASTIC_LOGGER}.agent.server.api")
    monkeypatch.setattr(agent, "level", logging.INFO)  # torch sets each logger's own level
    launch.quiet_agent_logs()
    with caplog.at_level(logging.INFO):
        agent.error("failed (exitcode: 2) local_rank: 0")
        ours.warning("ours still show")
    assert [r.getMessage() for r in caplog.records] == ["ours still show"]
    assert capsys.readouterr().err == ""  # nor through Python's last-resort handler
