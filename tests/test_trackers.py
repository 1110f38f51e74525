"""log.trackers: Accelerate's trackers beyond TensorBoard, optional, each named by its extra.
One real tracker (mlflow, local file store, offline) is read back where it is installed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hornn_dist.config import TRACKER_MODULES, load_config
from hornn_dist.util.errors import ConfigError
from tests.train_helpers import REPO, check_ok, env, scalars, write_tiny_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _train(config: Path, *sets: str, extra_env: dict[str, str] | None = None):
    args = [arg for item in sets for arg in ("--set", item)]
    return subprocess.run(
        [sys.executable, "-m", "hornn_dist.train", str(config), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env() | (extra_env or {}),
        timeout=300,
    )


def test_every_accelerate_tracker_is_a_choice_with_its_extra() -> None:
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    assert set(TRACKER_MODULES) == set(LOGGER_TYPE_TO_CLASS)
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(TRACKER_MODULES) - {"tensorboard"} <= set(extras)  # tensorboard: a dependency
    assert load_config(None).log.tracker_names() == ["tensorboard"]
    off = load_config(None, ["log.tensorboard=false", 'log.trackers=["tensorboard", "mlflow"]'])
    assert off.log.tracker_names() == ["mlflow"]
    with pytest.raises(ConfigError, match="log.trackers must be one of .*got 'tensorbord'"):
        load_config(None, ['log.trackers=["tensorbord"]'])


def test_a_tracker_not_installed_is_one_line_naming_its_extra(tmp_path: Path) -> None:
    missing = [n for n, module in TRACKER_MODULES.items() if not importlib.util.find_spec(module)]
    if not missing:
        pytest.skip("every tracker package is installed here")
    name = missing[0]
    proc = _train(write_tiny_config(tmp_path), f'log.trackers=["tensorboard", "{name}"]')
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: log.trackers names {name}, which is not installed: pip install "
        f"'hornn-dist[{name}]' (or take {name} out of log.trackers)"
    ]


@pytest.mark.integration
def test_mlflow_offline_stores_the_same_scalars_and_the_hyper_parameters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mlflow = pytest.importorskip(
        "mlflow", reason="mlflow is not installed (pip install 'hornn-dist[mlflow]')"
    )
    store = tmp_path / "mlruns"
    where = str(Path(mlflow.__file__).resolve().parents[1])  # mlflow's own folder, for the child
    # a local file store: no server, no database (mlflow 3 asks for this opt-in to use one)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    child_env = {
        "MLFLOW_ALLOW_FILE_STORE": "true",
        "MLFLOW_TRACKING_URI": store.as_uri(),
        "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), where])),
    }
    config = write_tiny_config(tmp_path)
    run = tmp_path / "run"
    proc = _train(
        config,
        'log.trackers=["tensorboard", "mlflow"]',
        "train.max_steps=6",
        f"train.output_dir={run}",
        extra_env=child_env,
    )
    check_ok(proc)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store.as_uri())
    experiment = client.get_experiment_by_name("hornn_dist")
    assert experiment is not None
    (stored,) = client.search_runs([experiment.experiment_id])
    assert stored.info.run_name == "run"  # the output_dir's name
    assert stored.data.params["model.order"] == "3" and stored.data.params["train.bptt"] == "8"
    board = scalars(run)  # TensorBoard gets the same scalars
    for tag in ("train/ppl", "train/tokens_per_sec", "grad_norm/layer0/path1", "valid/ppl"):
        history = client.get_metric_history(stored.info.run_id, tag)
        assert [(m.step, pytest.approx(m.value)) for m in history] == board[tag], tag
    assert "test/ppl" in stored.data.metrics
