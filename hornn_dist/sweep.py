"""Run a grid of training runs: `python -m hornn_dist.sweep SWEEP.toml [--set k=v ...]`.

Each run is an ordinary `hornn_dist.train` run in `output_dir/NAME` (see
`hornn_dist/sweeps/sweep_file.py` for the sweep file). Running the same command again skips the
finished runs and resumes the unfinished ones. On a machine with several GPUs one run trains
per GPU at a time; on a CPU machine `--jobs N` trains N at a time on a share of the cores each.
`--only PATTERN` trains only the runs whose name matches and leaves the others as they are.
Then `python -m hornn_dist.report OUTPUT_DIR` writes the tables and plots.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex

from hornn_dist.config import KEYS_HELP, add_set_option
from hornn_dist.runtime import run_cli, setup_logging
from hornn_dist.sweeps.runner import (
    cpu_slots,
    dry_run_summary,
    gpu_slots,
    run_sweep,
    size_note,
    sweep_lock,
    train_command,
)
from hornn_dist.sweeps.sweep_file import read_sweep, select_runs
from hornn_dist.util.errors import ConfigError
from hornn_dist.util.writable import check_writable_folder

logger = logging.getLogger("hornn_dist.sweep")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line."""
    parser = argparse.ArgumentParser(
        epilog=KEYS_HELP,
        prog="hornn_dist.sweep",
        description="Train every run of a sweep file (skips finished runs, resumes the others).",
    )
    parser.add_argument("sweep", help="sweep file, e.g. configs/sweeps/demo_orders.toml")
    add_set_option(
        parser, "override a config value in every run (repeatable), e.g. --set train.epochs=2"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="runs trained at once: one per GPU (default: every visible GPU), or without GPUs "
        "sharing the CPU cores (default 1)",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="PATTERN",
        help="train only the runs whose name matches (shell-style, repeatable, in the sweep "
        "file's order), e.g. --only 'lstm*'; the others are left as they are",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list the runs and their commands, train nothing"
    )
    return parser.parse_args(argv)


def check_jobs(jobs: int, gpus: int, cores: int) -> None:
    """Raise ConfigError unless `--jobs` is 1 or more and fits the machine: one run per
    visible GPU, or without GPUs one per CPU core."""
    if jobs < 1:
        raise ConfigError(f"--jobs must be 1 or more, got {jobs}")
    if gpus and jobs > gpus:
        raise ConfigError(f"--jobs {jobs} is more than the {gpus} visible GPU(s); one run per GPU")
    if not gpus and jobs > cores:
        raise ConfigError(
            f"--jobs {jobs} is more than the {cores} CPU cores; at most {cores} (a run needs a "
            "core of its own)"
        )


def main(argv: list[str] | None = None) -> int:
    """Run the sweep from the command line; return the exit code (1 when a run failed)."""
    args = parse_args(argv)
    setup_logging(True)
    plan = read_sweep(args.sweep, tuple(args.overrides))
    gpus = visible_gpus()
    jobs = args.jobs if args.jobs is not None else max(gpus, 1)
    check_jobs(jobs, gpus, os.cpu_count() or 1)
    only = select_runs(plan, args.only) if args.only else None
    if args.dry_run:
        chosen = [
            (i, run) for i, run in enumerate(plan.runs, 1) if only is None or run.name in only
        ]
        for index, run in chosen:  # sizes on stderr: stdout pastes into a shell
            logger.info("[%d/%d] %s: %s", index, len(plan.runs), run.name, size_note(run))
        for _, run in chosen:
            print(f"{run.name}: {shlex.join(train_command(plan, run))}")
        print(dry_run_summary(plan, jobs, only))
        return 0
    check_writable_folder(plan.output_dir, f"output_dir of {plan.path}")  # before any run
    slots = gpu_slots(jobs) if gpus else cpu_slots(jobs, os.cpu_count() or 1)
    with sweep_lock(plan):  # a second sweep on this output_dir: one line, nothing written
        logger.info(
            "sweep %s: %d runs in %s, %s",
            plan.path,
            len(plan.runs),
            plan.output_dir,
            f"{jobs} at a time ({'one per GPU' if gpus else 'sharing the CPU cores'})"
            if jobs > 1
            else "one at a time",
        )
        outcome = run_sweep(plan, slots, only=only)
    if outcome.interrupted:
        logger.info("sweep stopped: run the same command again to go on where it stopped")
        return 0
    logger.info(
        "sweep done: %d trained, %d already finished, %d failed%s; tables and plots: "
        "python -m hornn_dist.report %s",
        outcome.finished,
        outcome.skipped,
        outcome.failed,
        f", {outcome.left_out} not selected by --only" if outcome.left_out else "",
        plan.output_dir,
    )
    return 1 if outcome.failed else 0


def visible_gpus() -> int:
    """Return the number of CUDA devices this process sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cli() -> None:
    """Console-script entry point (`hornn-sweep`): the same as `python -m hornn_dist.sweep`."""
    run_cli(main)


if __name__ == "__main__":
    cli()
