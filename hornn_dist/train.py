"""Train a HORNN language model: `accelerate launch -m hornn_dist.train CONFIG [--set k=v ...]`.

Running the same command again resumes from the newest complete checkpoint in
`train.output_dir`. SIGTERM/SIGINT finish the current step, write a checkpoint and exit 0.
`python -m hornn_dist.train CONFIG` runs the same job as a single process. The loop itself
is `hornn_dist.training.trainer.Trainer`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from hornn_dist.config import KEYS_HELP, RunConfig, add_set_option, load_config, toml_value
from hornn_dist.data.pipeline import plan_corpus
from hornn_dist.run.checkpoint import check_output_dir_outside_checkpoints
from hornn_dist.run.run_layout import LOCK_FILE
from hornn_dist.runtime import StopFlag, run_cli
from hornn_dist.training.recipes import switched_line
from hornn_dist.training.trainer import Trainer
from hornn_dist.util.errors import naming_path
from hornn_dist.util.writable import check_run_folder


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line."""
    parser = argparse.ArgumentParser(
        epilog=KEYS_HELP,
        prog="hornn_dist.train",
        description="Train a HORNN language model (resumes from output_dir when checkpoints exist).",
    )
    parser.add_argument("config", help="run config TOML, e.g. configs/demo.toml")
    add_set_option(parser, "override a config value (repeatable), e.g. --set train.max_steps=100")
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (--set applied, the preset's values as comments) as "
        "TOML and exit",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--resume", metavar="PATH", help="resume from this checkpoint or run directory"
    )
    group.add_argument(
        "--no-resume", action="store_true", help="start from scratch even if checkpoints exist"
    )
    return parser.parse_args(argv)


def resolved_toml(cfg: RunConfig) -> str:
    """Return the config as the TOML that reads back into the same RunConfig, with the values
    its data.preset fills in written as comments under [data] (so the corpus folder, named
    from the keys as given, stays the same when the text is used as a config file)."""
    text = cfg.to_toml()
    if not cfg.data.preset:
        return text
    given = cfg.data.toml_table()
    resolved = dataclasses.asdict(plan_corpus(cfg.data).resolved)
    filled = [
        f"# {key} = {toml_value(value)}" for key, value in resolved.items() if key not in given
    ]
    note = f'# filled in by preset "{cfg.data.preset}":'
    head, sep, rest = text.partition("\n\n")  # the [data] table comes first
    return "\n".join([head, note, *filled]) + sep + rest


def main(argv: list[str] | None = None) -> int:
    """Run the training job from the command line; return the exit code."""
    args = parse_args(argv)
    cfg = load_config(args.config, args.overrides)
    if args.print_config:
        print(resolved_toml(cfg), end="")
        return 0
    if args.overrides and os.environ.get("RANK", "0") == "0":  # before any other line
        line = switched_line(Path(args.config), cfg, load_config(args.config))
        if line:
            print(line, file=sys.stderr, flush=True)
    out = Path(cfg.train.output_dir)
    created = not os.path.lexists(out)
    lock_created = not os.path.lexists(out / LOCK_FILE)
    check_output_dir_outside_checkpoints(out)  # another run's saved state
    check_run_folder(out)  # before any work: not at the first save
    stop = StopFlag()
    stop.install()
    try:
        with naming_path(out, "train.output_dir"):  # a full disk, mid-run
            Trainer(cfg, stop).run(resume_from=args.resume, fresh=args.no_resume)
    except BaseException:
        if os.environ.get("RANK", "0") == "0":  # a refusal before training leaves nothing
            remove_unused(out, created, lock_created)
        raise
    finally:
        stop.ignore()  # until the process ends: a signal now leaves its exit code as it is
    return 0


def remove_unused(out: Path, created: bool, lock_created: bool) -> None:
    """Remove what a run that failed before writing anything created in `out`: the lock file
    it made, when no other file is there, then the folder when it made that too (rmdir only:
    nothing is lost)."""
    lock = out / LOCK_FILE
    if lock_created and lock.is_file() and not lock.is_symlink():
        written = [name for _, _, names in os.walk(out) for name in names]
        if written == [LOCK_FILE]:
            lock.unlink()  # released already: the process that made it is ending
    if created:
        remove_empty_tree(out)


def remove_empty_tree(folder: Path) -> None:
    """Remove `folder` when it and its sub-folders hold no file (rmdir only: nothing is lost)."""
    for below, _, files in sorted(os.walk(folder), key=lambda walked: -len(walked[0])):
        if files:
            return
        try:
            os.rmdir(below)
        except OSError:
            return


def cli() -> None:
    """Console-script entry point (`hornn-train`): the same as `python -m hornn_dist.train`."""
    run_cli(main)


if __name__ == "__main__":
    cli()
