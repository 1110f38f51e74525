"""The README demo's speed at 1 and 2 torch threads: the demo command, timed.

    python benchmarks/demo_threads.py --label idle --out runs/demo-threads

Runs `python -m hornn_dist.train configs/demo.toml` into a scratch output_dir for
`--steps` steps once per thread count (`train.cpu_threads`, with OMP_NUM_THREADS the same),
after preparing the corpus once, and prints a table: the trainer's own tokens/s
(trainer_state.json: training time, validation and saves left out), the median tokens/s of
its log steps (the train events of its metrics.jsonl), the command's wall seconds and the load
average before and after. Writes `<label>.json` (common.run_meta's fields with the load
average), `<label>.txt` (the table) and each run's `train.log`, for people, as
`<label>-threads<N>.log` into `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from hornn_dist.run.checkpoint import list_checkpoints
from hornn_dist.run.run_layout import EVENTS_FILE, RUN_LOG
from hornn_dist.run.run_state import TrainerState
from hornn_dist.training.events import read_events

from common import REPO, run_meta, write_json

CONFIG = "configs/demo.toml"


def demo_command(out: Path, steps: int, threads: int) -> list[str]:
    """Return the README demo command into `out`, cut to `steps` steps at `threads` threads."""
    return [
        sys.executable, "-m", "hornn_dist.train", CONFIG,
        "--set", f"train.output_dir={out}",
        "--set", f"train.max_steps={steps}",
        "--set", f"train.cpu_threads={threads}",
        "--set", "log.progress=false",
    ]  # fmt: skip


def time_demo(steps: int, threads: int, logs: Path, label: str) -> dict:
    """Run the demo once at `threads` threads; return its row (tokens/s, seconds, load)."""
    scratch = Path(tempfile.mkdtemp(prefix="demo-threads-"))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore")
    load_before = os.getloadavg()
    started = time.perf_counter()
    proc = subprocess.run(
        demo_command(scratch / "run", steps, threads),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    row = {
        "threads": threads,
        "steps": steps,
        "exit_code": proc.returncode,
        "wall_seconds": round(seconds, 1),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }
    log, events = scratch / "run" / RUN_LOG, scratch / "run" / EVENTS_FILE
    if log.is_file():
        shutil.copyfile(log, logs / f"{label}-threads{threads}.log")
    if events.is_file():  # the key keeps its name: the records before read the log's lines
        speeds = [e["tokens_per_sec"] for e in read_events(events) if e["event"] == "train"]
        row["log_tokens_per_sec_median"] = round(statistics.median(speeds)) if speeds else None
    checkpoints = list_checkpoints(scratch / "run", warn=False)
    if checkpoints:
        state = TrainerState.read(checkpoints[-1])
        row["tokens_per_sec"] = round(state.tokens_per_sec)
        row["hardware"] = state.hardware
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
    shutil.rmtree(scratch, ignore_errors=True)
    return row


def table(rows: list[dict]) -> str:
    """Return the rows as a markdown table."""
    lines = [
        "| threads | tokens/s (trainer) | tokens/s (log median) | wall s | load before | load after |",
        "| ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['threads']} | {r.get('tokens_per_sec', r.get('error', '?'))} | "
            f"{r.get('log_tokens_per_sec_median')} | {r['wall_seconds']} | "
            f"{' '.join(map(str, r['load_before']))} | {' '.join(map(str, r['load_after']))} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Time the demo at each thread count; print and write the table and the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", required=True, help="idle or loaded: names the files written")
    p.add_argument("--out", type=Path, required=True, help="the record folder")
    p.add_argument("--steps", type=int, default=300, help="training steps per run")
    p.add_argument("--threads", default="1,2", help="comma list of thread counts")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    prep = [sys.executable, "-m", "hornn_dist.prepare", CONFIG, "--quiet"]
    subprocess.run(prep, cwd=REPO, check=True, capture_output=True)  # not in any timing
    meta = run_meta(
        "demo_threads.py",
        argv,
        torch.device("cpu"),
        args,
        label=args.label,
        load_average=[round(x, 2) for x in os.getloadavg()],
    )
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        rows.append(time_demo(args.steps, threads, args.out, args.label))
        write_json(args.out / f"{args.label}.json", meta, rows)
    text = f"{meta['date']} {meta['device_name']} commit {meta['commit']}\n{meta['command']}\n\n"
    text += table(rows)
    (args.out / f"{args.label}.txt").write_text(text + "\n")
    print(text)
    print(json.dumps({"meta": meta, "results": rows}, indent=2))
    return 0 if all(r["exit_code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
