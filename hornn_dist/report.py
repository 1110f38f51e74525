"""Tables and plots of a finished sweep: `python -m hornn_dist.report RUNS_DIR [--out DIR]`.

Reads every run under RUNS_DIR (the `output_dir` of `python -m hornn_dist.sweep`), keeps each
model's recipe with the best validation perplexity, and writes `report.md` (the paper's tables
with its numbers beside ours) and PNG plots into `--out` (default RUNS_DIR/report). The layout
and the paper's corpus come from the sweep file (its sweep.json); --layout and --paper override.
Layout `fair` groups the runs that differ only by seed and compares the models over their seeds
(sweeps/fair.py), with tokens/s from `--speed-record` (sweeps/speed.py).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import shlex
import sys
from pathlib import Path

from hornn_dist.config import KEYS_HELP
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.runtime import run_cli, setup_logging
from hornn_dist.sweeps.fair import render_fair
from hornn_dist.sweeps.results import RunRecord, read_runs, read_sweep_record, run_damage
from hornn_dist.sweeps.speed import SpeedRecord, read_speed_record
from hornn_dist.sweeps.sweep_file import LAYOUTS, PAPERS
from hornn_dist.sweeps.tables import pick_best, render_tables
from hornn_dist.sweeps.transfer import render_transfer
from hornn_dist.util.errors import ConfigError, naming_path
from hornn_dist.util.files import write_text
from hornn_dist.util.wording import counted
from hornn_dist.util.writable import check_writable_folder

logger = logging.getLogger("hornn_dist.report")

PLOT_TITLES = {
    "orders.png": "Test perplexity by order",
    "alpha.png": "Perplexity of the FOFE HORNN by α",
    "valid_curves.png": "Validation perplexity by epoch",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line."""
    parser = argparse.ArgumentParser(
        epilog=KEYS_HELP,
        prog="hornn_dist.report",
        description="Write the Markdown tables and PNG plots of a sweep's finished runs.",
    )
    parser.add_argument(
        "runs_dir",
        help="a sweep's output_dir, e.g. runs/sweeps/demo_summary, or a finished run's folder",
    )
    parser.add_argument(
        "--out", help="folder for report.md and the plots (default RUNS_DIR/report)"
    )
    parser.add_argument(
        "--layout", choices=LAYOUTS, help="main table (default: the sweep file's, else summary)"
    )
    parser.add_argument(
        "--paper", choices=PAPERS, help="the paper's numbers beside ours (default: the sweep's)"
    )
    parser.add_argument("--no-plots", action="store_true", help="write the tables only")
    parser.add_argument(
        "--speed-record",
        metavar="PATH",
        help="layout fair: each model's tokens/s from this record (a benchmarks/throughput.py "
        "JSON, a record folder holding throughput.json, or a folder of runs each trained "
        "alone); without it the column says none was given",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Write the report of a sweep from the command line; return the exit code."""
    args = parse_args(argv)
    setup_logging(True)
    runs_dir = Path(args.runs_dir)
    sweep = read_sweep_record(runs_dir)
    layout = args.layout or sweep.get("layout", "summary")
    paper = args.paper or sweep.get("paper", "none")
    if not args.no_plots:
        from hornn_dist.sweeps.plots import require_matplotlib

        require_matplotlib()  # before any work, so a missing extra costs nothing
    speed = read_speed_record(args.speed_record) if args.speed_record else None
    records = read_runs(runs_dir)
    check_finished(runs_dir, records, sweep)
    if layout != "transfer" and corpora_note(records):  # a transfer screen spans corpora
        logger.warning("%s", corpora_note(records))
    damaged = damaged_runs(runs_dir, records, sweep)
    out = Path(args.out) if args.out else runs_dir / "report"
    key = "--out" if args.out else "--out (default RUNS_DIR/report)"
    check_writable_folder(out, key)  # before drawing
    with naming_path(out, key):  # a disk that fills meanwhile
        plots: list[Path] = []
        if not args.no_plots:
            from hornn_dist.sweeps.plots import draw_plots

            plots = draw_plots(pick_best(records), out, paper)
        command = " ".join(["python -m hornn_dist.report", *map(shlex.quote, _argv(argv))])
        text = render_report(runs_dir, records, layout, paper, command, plots, speed, damaged)
        write_text(out / "report.md", text)
    print(text, end="", flush=True)
    logger.info(
        "wrote %s and %d plot(s) (%s) for %d runs, layout %s, paper %s",
        out / "report.md",
        len(plots),
        ", ".join(p.name for p in plots) or "none",
        len(records),
        layout,
        paper,
    )
    return 0


def _argv(argv: list[str] | None) -> list[str]:
    return sys.argv[1:] if argv is None else list(argv)


def check_finished(runs_dir: Path, records: list[RunRecord], sweep: dict) -> None:
    """Raise ConfigError (one line) when no run under `runs_dir` has finished; where runs have
    damaged checkpoints, the line names them and what is wrong, not only "train them"."""
    if any(r.finished for r in records):
        return
    count = f"{len(records)} run{'' if len(records) == 1 else 's'} with checkpoints"
    how = (
        f"python -m hornn_dist.sweep {sweep['sweep']}"
        if sweep.get("sweep")
        else ("python -m hornn_dist.sweep SWEEP.toml (or python -m hornn_dist.train CONFIG)")
    )
    damaged = damaged_runs(runs_dir, records, sweep)
    if damaged:
        raise ConfigError(
            f"no finished run under {runs_dir} that reads ({count}, none finished): "
            f"{'; '.join(damaged)}; restore the damaged files from a copy, or train again with "
            f"{how} (it resumes from the newest checkpoint that verifies)"
        )
    raise ConfigError(
        f"no finished run under {runs_dir} ({count}, none finished): train them with {how}"
    )


def damaged_runs(runs_dir: Path, records: list[RunRecord], sweep: dict) -> list[str]:
    """Return, for each run under `runs_dir` with a damaged checkpoint newer than the one it is
    read from (or with every checkpoint damaged), "run NAME: what is wrong"."""
    by_name = {r.folder.name: r for r in records}
    if sweep:
        folders = [runs_dir / str(entry["name"]) for entry in sweep["runs"]]
    elif ckpt.checkpoint_root(runs_dir).is_dir():  # one run's own folder
        folders = [runs_dir]
    else:
        folders = sorted(p for p in runs_dir.iterdir() if p.is_dir())
    out = []
    for folder in folders:
        record = by_name.get(folder.name)
        damage = record.damage if record is not None else run_damage(folder)
        if not damage:
            continue
        if record is not None:
            damage += f" (read from {ckpt.step_dir_name(record.step)}, not finished)"
        out.append(f"run {folder.name}: {damage}")
    return out


def render_report(
    runs_dir: Path,
    records: list[RunRecord],
    layout: str,
    paper: str,
    command: str,
    plots: list[Path],
    speed: SpeedRecord | None = None,
    damaged: list[str] | None = None,
) -> str:
    """Return the whole report.md: title, date, command, tables and links to the plots."""
    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    finished = sum(r.finished for r in records)
    head = (
        f"# HORNN sweep report: {runs_dir.name}\n\n"
        f"Written {date} by `{command}` from {counted(len(records), 'run')} in `{runs_dir}` "
        f"({finished} finished); layout {layout}, paper's numbers: {paper}. {pick_note(layout)} "
        f"{test_note(records)}\n\n"
    )
    if damaged:
        head += f"Damaged checkpoints: {'; '.join(damaged)}.\n\n"
    mixed = corpora_note(records) if layout != "transfer" else ""
    if mixed:
        head += f"**{mixed}**\n\n"
    if layout == "fair":
        text = head + render_fair(records, speed, paper)
    elif layout == "transfer":
        text = head + render_transfer(records)
    else:
        text = head + render_tables(records, layout, paper)
    if plots:
        links = "\n\n".join(f"![{PLOT_TITLES[p.name]}]({p.name})" for p in plots)
        text += f"\n## Plots\n\n{links}\n"
    return text


def corpora_note(records: list[RunRecord]) -> str:
    """Return a warning when the runs trained on more than one corpus ("" when on one): their
    perplexities do not compare, and the tables rank them together."""
    runs: dict[str, list[str]] = {}
    for record in records:  # the manifest's hash where recorded; else the folder's name
        runs.setdefault(record.corpus_hash or record.corpus, []).append(record.name)
    if len(runs) < 2:
        return ""
    names = {record.corpus_hash or record.corpus: record.corpus for record in records}
    groups = "; ".join(
        f"{names[key]}: {', '.join(sorted(found))}" for key, found in sorted(runs.items())
    )
    return (
        f"These runs trained on {len(runs)} different corpora ({groups}): perplexities of "
        "different corpora do not compare, yet the tables below rank them together; report "
        "each corpus's runs from a folder of their own."
    )


def pick_note(layout: str) -> str:
    """Return the sentence saying how each model's recipe is picked (by validation only)."""
    if layout == "fair":
        return (
            "Each model keeps its recipe with the lowest mean best validation perplexity over "
            "its seeds."
        )
    return "Each model's run is its recipe with the lowest best validation perplexity."


def test_note(records: list[RunRecord]) -> str:
    """Return the sentence saying which weights the test perplexities score."""
    return (
        "Test perplexity is each run's best checkpoint by validation (`test` in its "
        "trainer_state.json, as word_language_model reports); the last weights' is beside it "
        "(`test_last`)."
    )


def cli() -> None:
    """Console-script entry point (`hornn-report`): the same as `python -m hornn_dist.report`."""
    run_cli(main)


if __name__ == "__main__":
    cli()
