"""The names of the files and folders a training run writes into its `train.output_dir`.

    output_dir/
      checkpoints/   one step_<N>/ folder per save (layout: checkpoint.py)
      config.toml    the run's resolved config (each checkpoint holds its own copy too)
      train.log      the main process's log, appended by every run (training/run_log.py)
      metrics.jsonl  the same run as data: one JSON object per event (training/events.py)
      tensorboard/   TensorBoard's event files (Accelerate's tracker of that name), a folder
                     per run start, named by its start time (training/dashboard.py)
      mlruns/        mlflow's file store, when log.trackers names mlflow without
                     MLFLOW_TRACKING_URI (training/trackers.py); wandb/ is wandb's own
      .lock          held by the run's main process while it runs (run/lock.py)

Every module that reads or writes one of these takes its name from here. A run set aside by
--no-resume moves its checkpoints, config, log and TensorBoard files into
`<output_dir>.replaced-<time>/` (`checkpoint.set_aside_previous_run`).
"""

from __future__ import annotations

CHECKPOINTS = "checkpoints"
CONFIG_FILE = "config.toml"
RUN_LOG = "train.log"
EVENTS_FILE = "metrics.jsonl"
TENSORBOARD = "tensorboard"  # also the project name the trainer gives Accelerate's tracker
MLFLOW_STORE = "mlruns"
LOCK_FILE = ".lock"
