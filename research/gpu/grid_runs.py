"""What `gpu_grids.sh` trains and finishes, listed by the sweep planner in one process.

    python research/gpu/grid_runs.py list SWEEP.toml... [--set KEY=VALUE ...] [--skip-recorded DIR ...]
    python research/gpu/grid_runs.py stopped SWEEP.toml... [--set KEY=VALUE ...]

`list` writes each sweep's sweep.json into its output_dir (what the sweep runner writes first,
so that `report` sees a sweep) and prints one line per run, `SWEEP<TAB>NAME<TAB>COMMAND`, the
command being the one `python -m hornn_dist.sweep SWEEP --dry-run` prints for that run.
With `--skip-recorded DIR` (a record of an earlier call: `DIR/SWEEP/NAME/` as
`research/tools/collect_runs.sh` keeps runs; repeatable) a run finished there at the recipe and
seed the sweep plans now is left out, and named on stderr as `recorded: SWEEP/NAME in DIR`, so
that a fresh machine trains only what no record has.
`stopped` prints `SWEEP<TAB>NAME<TAB>FOLDER<TAB>STEP` for each run that has a checkpoint but
has not finished (a SIGTERM stopped it): `python -m hornn_dist.evaluate FOLDER/checkpoints/best
--split test` scores its best checkpoint by validation so far, and the run stays unfinished
(the sweep resumes it), so that no table takes it for a converged run.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from hornn_dist.config import add_set_option
from hornn_dist.runtime import run_cli
from hornn_dist.sweeps.results import read_run
from hornn_dist.sweeps.runner import train_command
from hornn_dist.sweeps.sweep_file import RUNS_FILE, PlannedRun, read_sweep
from hornn_dist.util.errors import ConfigError
from hornn_dist.util.files import write_json


def list_runs(
    sweep: Path, overrides: tuple[str, ...], recorded: tuple[Path, ...] = ()
) -> list[str]:
    """Write `sweep`'s sweep.json and return its runs as `SWEEP<TAB>NAME<TAB>COMMAND` lines,
    those a `recorded` folder holds finished at the planned recipe left out (named on stderr)."""
    plan = read_sweep(sweep, overrides)
    plan.output_dir.mkdir(parents=True, exist_ok=True)
    write_json(plan.output_dir / RUNS_FILE, plan.record())
    lines = []
    for run in plan.runs:
        where = next((d for d in recorded if _recorded(d / sweep.stem / run.name, run)), None)
        if where is not None:
            print(f"recorded: {sweep.stem}/{run.name} in {where}", file=sys.stderr, flush=True)
            continue
        lines.append(f"{sweep.stem}\t{run.name}\t{shlex.join(train_command(plan, run))}")
    return lines


def _recorded(folder: Path, run: PlannedRun) -> bool:
    """Return whether `folder` holds `run` finished: its model, optimiser and seed as planned
    (a record's run of the same name at an older recipe is trained again)."""
    record = read_run(folder, planned=run.config)
    if record is None or not record.finished:
        return False
    mine, planned = record.config, run.config
    return (mine.model, mine.optim, mine.train.seed) == (
        planned.model,
        planned.optim,
        planned.train.seed,
    )


def stopped_runs(sweep: Path, overrides: tuple[str, ...]) -> list[str]:
    """Return `SWEEP<TAB>NAME<TAB>FOLDER<TAB>STEP` for each run of `sweep` stopped before it
    finished."""
    plan = read_sweep(sweep, overrides)
    lines = []
    for run in plan.runs:
        record = read_run(plan.output_dir / run.name, planned=run.config)
        if record is not None and not record.finished and record.step > 0:
            folder = plan.output_dir / run.name
            lines.append(f"{sweep.stem}\t{run.name}\t{folder}\t{record.step}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print the lines of `list` or `stopped` for every sweep named; return the exit code."""
    parser = argparse.ArgumentParser(prog="grid_runs.py", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("list", "stopped"))
    parser.add_argument("sweeps", nargs="+", type=Path, help="sweep files, in order")
    add_set_option(parser, "override a config value in every run (repeatable)")
    parser.add_argument(
        "--skip-recorded",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="list: leave out the runs DIR holds finished (repeatable)",
    )
    args = parser.parse_args(argv)
    for folder in args.skip_recorded:
        if not folder.is_dir():
            raise ConfigError(f"--skip-recorded {folder}: no such folder; name a record's folder")
    for sweep in args.sweeps:
        if args.what == "list":
            lines = list_runs(sweep, tuple(args.overrides), tuple(args.skip_recorded))
        else:
            lines = stopped_runs(sweep, tuple(args.overrides))
        for line in lines:
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    run_cli(main)
