"""A tracker beyond TensorBoard that fails to start or to log is one warning line and the run goes
on without it; mlflow's default store is inside the run folder; a tracking server that does not
answer costs a bounded wait and never blocks a stop. Only 127.0.0.1 is ever contacted."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hornn_dist.runtime import setup_logging
from hornn_dist.training import trackers
from tests.train_helpers import env, write_tiny_config

mlflow = pytest.importorskip(
    "mlflow", reason="mlflow is not installed (pip install 'hornn-dist[mlflow]')"
)


@pytest.fixture
def mlflow_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No mlflow settings in the environment (restored afterwards), no telemetry, cwd tmp_path."""
    for name in (
        "MLFLOW_TRACKING_URI",
        "MLFLOW_ALLOW_FILE_STORE",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
    ):
        monkeypatch.setenv(name, "")  # recorded, so that the undo removes what the code sets
        monkeypatch.delenv(name)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)
    # a tracker given up on asks the CLI to end without exit handlers: not pytest's process
    monkeypatch.setattr("hornn_dist.runtime._skip_exit_handlers", False)
    return monkeypatch


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A local port that takes connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "WARNING" in line or line.startswith("warning")]


def test_mlflow_without_settings_stores_its_run_inside_the_run_folder(
    mlflow_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs" / "demo"
    out.mkdir(parents=True)
    [tracker] = trackers.build_trackers(["mlflow"], out)
    tracker.start()
    tracker.store_init_configuration({"model.order": 3})
    tracker.log({"train/ppl": 40.5}, step=2)
    tracker.finish()
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(out / "mlruns").as_uri())
    [stored] = client.search_runs([client.get_experiment_by_name("hornn_dist").experiment_id])
    assert stored.info.run_name == "demo" and stored.data.params["model.order"] == "3"
    assert [
        (m.step, m.value) for m in client.get_metric_history(stored.info.run_id, "train/ppl")
    ] == [(2, 40.5)]
    assert _warnings(capsys.readouterr().err) == []


def test_a_tracker_that_fails_to_log_is_one_warning_and_the_run_goes_on(
    mlflow_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging(True)
    [tracker] = trackers.build_trackers(["mlflow"], tmp_path)
    tracker.start()
    tracker.log({"train/ppl": 2.0}, step=1)
    # the tracker's thread runs calls in order: once this one has run, step 1 is written
    assert tracker._call("wait", lambda: None).wait(trackers.WAIT_S)
    shutil.rmtree(tmp_path / "mlruns")  # the store is gone: mlflow cannot find the run
    tracker.log({"train/ppl": 1.0}, step=2)
    tracker.log({"train/ppl": 0.5}, step=3)
    tracker.finish()
    [line] = _warnings(capsys.readouterr().err)
    assert "log.trackers: mlflow failed to log (" in line, line
    assert line.endswith("; the run goes on without it")


def _mlflow_at(monkeypatch: pytest.MonkeyPatch, port: int, out: Path):
    """Return the guarded mlflow tracker of a run in `out` whose server is 127.0.0.1:`port`."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    setup_logging(True)  # as the commands do: warnings to this test's stderr
    [tracker] = trackers.build_trackers(["mlflow"], out)
    return tracker


def _run_through(tracker) -> None:
    """Start, log and finish as a run does; none of it may raise."""
    tracker.start()
    tracker.log({"train/ppl": 1.0}, step=1)  # dropped once the tracker failed: no error
    tracker.finish()


def test_a_tracker_that_fails_to_start_is_one_warning_and_the_run_goes_on(
    mlflow_env: pytest.MonkeyPatch,
    tmp_path: Path,
    closed_port: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _run_through(_mlflow_at(mlflow_env, closed_port, tmp_path))
    [line] = _warnings(capsys.readouterr().err)
    assert "log.trackers: mlflow failed to start (MlflowException: " in line
    assert line.endswith("; the run goes on without it")


def test_a_server_that_does_not_answer_costs_a_bounded_wait(
    mlflow_env: pytest.MonkeyPatch,
    tmp_path: Path,
    silent_server: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    mlflow_env.setattr(trackers, "WAIT_S", 1.0)
    tracker = _mlflow_at(mlflow_env, silent_server, tmp_path)
    _run_through(tracker)  # the bound is WAIT_S, which the warning names
    [line] = _warnings(capsys.readouterr().err)
    assert line.endswith(
        "log.trackers: mlflow did not answer within 1 s (at start); the run goes on without it"
    )


@pytest.mark.integration
def test_a_run_with_a_silent_tracking_server_stops_on_sigterm_without_waiting_it_out(
    tmp_path: Path, silent_server: int
) -> None:
    """The whole run: SIGTERM while the tracker's start is waited for ends the wait at once;
    the run trains no step, exits 0, and its only word about mlflow is one warning line."""
    config = write_tiny_config(tmp_path)
    extra = {
        "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{silent_server}",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    cmd = [sys.executable, "-m", "hornn_dist.train", str(config), "--set",
           'log.trackers=["tensorboard", "mlflow"]']  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env() | extra, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "(fresh run)" in line:  # the trackers start right after this line
            break
    time.sleep(2)  # well into the tracker's wait of trackers.WAIT_S
    proc.send_signal(signal.SIGTERM)
    for line in proc.stderr:
        lines.append(line)
        if "mlflow" in line:
            break
    err = "".join(lines) + proc.stderr.read()
    code = proc.wait(timeout=120)
    assert code == 0, err
    assert "SIGTERM received before step 1: no step trained, nothing new to save" in err
    assert "training ended at step 0: stopped by SIGTERM; run again to resume" in err
    [warning] = [line for line in err.splitlines() if "mlflow" in line]
    assert warning.endswith(
        "log.trackers: mlflow had not answered when a stop signal came (at start); the run "
        "goes on without it"
    )
    assert not (tmp_path / "runs").exists() or not list(tmp_path.rglob("step_*"))
