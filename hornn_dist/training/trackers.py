"""Where a run's scalars and hyper-parameters go: Accelerate's trackers, named by log.trackers.

TensorBoard is Accelerate's tracker by name (its folder `output_dir/tensorboard`, its
hyper-parameters written by `dashboard.py`). Every other tracker is built here, so that it
gets a project named `hornn_dist` and a run named after the output_dir (Accelerate would name
both after the TensorBoard folder), and its hyper-parameters through its own
`store_init_configuration`. The packages are optional (pyproject extras of the same names).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from hornn_dist.config import TRACKER_MODULES
from hornn_dist.errors import ConfigError

PROJECT = "hornn_dist"  # the project (wandb), experiment (mlflow), ... of every run
# how each tracker is told the run's name (Accelerate passes the rest to the package's init)
RUN_NAME_KEY = {"wandb": "name", "mlflow": "run_name", "comet_ml": "experiment_name"}


def require_installed(names: list[str]) -> None:
    """Raise ConfigError (one line naming the extra) for the first tracker not installed."""
    for name in names:
        if importlib.util.find_spec(TRACKER_MODULES[name]) is None:
            raise ConfigError(
                f"log.trackers names {name}, which is not installed: pip install "
                f"'hornn-dist[{name}]' (or take {name} out of log.trackers)"
            )


def build_trackers(names: list[str], output_dir: Path) -> list[Any]:
    """Return what `Accelerator(log_with=...)` takes for `names`: "tensorboard" as a name, every
    other tracker as an instance named for this run (checked installed first)."""
    require_installed(names)
    if not names:
        return []
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS  # lazy: imports torch

    out: list[Any] = []
    for name in names:
        if name == "tensorboard":
            out.append(name)
            continue
        cls = LOGGER_TYPE_TO_CLASS[name]
        kwargs: dict[str, Any] = {}
        if name in RUN_NAME_KEY:
            kwargs[RUN_NAME_KEY[name]] = Path(output_dir).resolve().name
        if name == "wandb":
            kwargs["dir"] = str(output_dir)  # its files beside the run's, not in the cwd
        if cls.requires_logging_directory:
            out.append(cls(PROJECT, str(output_dir), **kwargs))
        else:
            out.append(cls(PROJECT, **kwargs))
    return out


def describe_run(trackers: list[Any], hparams: dict[str, Any]) -> None:
    """Store the run's hyper-parameters in every tracker but TensorBoard (dashboard.py's)."""
    for tracker in trackers:
        if tracker.name != "tensorboard":
            tracker.store_init_configuration(hparams)
