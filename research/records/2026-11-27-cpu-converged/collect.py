"""Copy a finished sweep's record data into this folder: each run's config, log and final state.

    python research/records/2026-11-27-cpu-converged/collect.py runs/sweeps/NAME DEST

DEST/runs/RUN/ gets the run's config.toml, metrics.jsonl (its events: what the record readers
read), train.log and its newest checkpoint's trainer_state.json (validation curve, stop
reason, test scores); DEST/ gets sweep.json and
report/ (what `python -m hornn_dist.report runs/sweeps/NAME` wrote beforehand).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from hornn_dist.run.checkpoint import list_checkpoints


def collect(sweep_dir: Path, dest: Path) -> None:
    """Copy sweep_dir's sweep.json, report.md and every run's record files into dest."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(sweep_dir / "sweep.json", dest / "sweep.json")
    if (sweep_dir / "report").is_dir():
        shutil.copytree(sweep_dir / "report", dest / "report", dirs_exist_ok=True)
    for run in sorted(p for p in sweep_dir.iterdir() if (p / "config.toml").exists()):
        out = dest / "runs" / run.name
        out.mkdir(parents=True, exist_ok=True)
        for name in ("config.toml", "metrics.jsonl", "train.log"):
            if (run / name).is_file():  # metrics.jsonl: not in runs from before it existed
                shutil.copy2(run / name, out / name)
        checkpoints = list_checkpoints(run)
        if checkpoints:
            shutil.copy2(checkpoints[-1] / "trainer_state.json", out / "trainer_state.json")


if __name__ == "__main__":
    collect(Path(sys.argv[1]), Path(sys.argv[2]))
