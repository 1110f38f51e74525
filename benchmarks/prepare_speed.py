"""Benchmark data preparation: tokens/s and peak memory of prepare_corpus on generated text8-like corpora.

    python benchmarks/prepare_speed.py --sizes 100M,1G --workers 1,2

Each size is one line of words (Zipf-distributed over a fixed 250k-word vocabulary, like text8:
no newlines) written once under --dir and reused. Each run prepares it from scratch in a fresh
child process with text8's settings (last 1M characters held out, min_count 10, no <eos>) and
reports wall time, tokens/s, and peak RSS: of the main process, of the largest worker, and of
the whole process tree (sampled every 50 ms). Prints a table, each worker count's speedup over
one worker with its peak memory, then the results as JSON (--json: with the run's metadata).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from common import run_meta, write_json

CHILD = r"""
import json, resource, sys, time
from hornn_dist.data.config import DataConfig
from hornn_dist.data.pipeline import prepare_corpus
from hornn_dist.data.shards import open_corpus
path, cache, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = DataConfig(train=[path], name="bench", heldout_chars=1_000_000, valid_chars=500_000,
                 add_eos=False, min_count=10, cache_dir=cache)
start = time.perf_counter()
folder = prepare_corpus(cfg, workers=workers, progress=False)
seconds = time.perf_counter() - start
corpus = open_corpus(folder)
print(json.dumps({
    "seconds": seconds,
    "tokens": sum(len(corpus.split(s)) for s in corpus.splits),
    "vocab": corpus.vocab_size,
    "main_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
}))
"""


def parse_size(text: str) -> int:
    """Return the number of bytes of a size such as 100M or 1G (powers of 1000)."""
    units = {"K": 10**3, "M": 10**6, "G": 10**9}
    text = text.strip().upper()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def generate(path: Path, size: int, seed: int = 0, vocab: int = 250_000) -> None:
    """Write a single-line text of about size bytes of Zipf-distributed words to path (if missing)."""
    if path.exists() and path.stat().st_size >= size:
        return
    rng = np.random.default_rng(seed)
    words = np.array(
        [
            np.base_repr(i, 26).translate(str.maketrans("0123456789", "qrstuvwxyz")).lower()
            for i in range(vocab)
        ]
    )
    cdf = np.cumsum(1.0 / np.arange(1, vocab + 1))
    cdf /= cdf[-1]
    tmp = path.with_name(path.name + ".tmp")
    written = 0
    with open(tmp, "w", encoding="ascii") as f:
        while written < size:
            idx = np.searchsorted(cdf, rng.random(1_000_000))
            block = " ".join(words[idx].tolist()) + " "
            block = block[: size - written]
            f.write(block)
            written += len(block)
    os.replace(tmp, path)


def tree_rss_mb(pid: int) -> float:
    """Return the summed resident memory (MB) of a process and its descendants (Linux /proc)."""
    total = 0
    pids = [pid]
    while pids:
        p = pids.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
            with open(f"/proc/{p}/task/{p}/children") as f:
                pids.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return total / 1024


def run(path: Path, workers: int) -> dict[str, float]:
    """Prepare path in a child process; return its measurements."""
    cache = tempfile.mkdtemp(prefix="prep_bench_", dir=path.parent)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), cache, str(workers)],
            stdout=subprocess.PIPE,
            text=True,
        )
        peak = 0.0
        while proc.poll() is None:
            peak = max(peak, tree_rss_mb(proc.pid))
            time.sleep(0.05)
        out = proc.stdout.read() if proc.stdout else ""
        if proc.returncode != 0:
            raise SystemExit(f"prepare failed with status {proc.returncode}")
        result = json.loads(out.strip().splitlines()[-1])
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        result["tree_rss_mb"] = peak
        # CPU seconds of the child and its workers: wall time on an otherwise idle machine is
        # about cpu_s / workers, whatever else was running here
        result["cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        result["load_avg"] = os.getloadavg()[0]
        return result
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    """Generate the corpora, run the benchmark grid, print a table and JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="100M", help="comma-separated corpus sizes, e.g. 100M,1G"
    )
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument(
        "--dir",
        default=os.path.join(tempfile.gettempdir(), "hornn_prepare_bench"),
        help="where the generated corpora live",
    )
    parser.add_argument("--json", default="", help="also write the results to this file")
    args = parser.parse_args(argv)
    meta = run_meta("prepare_speed.py", argv, torch.device("cpu"), args)
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    for size_text in args.sizes.split(","):
        size = parse_size(size_text)
        path = folder / f"words_{size_text.strip()}.txt"
        t = time.perf_counter()
        generate(path, size)
        print(
            f"corpus {path} ({path.stat().st_size / 1e6:.0f} MB) ready in {time.perf_counter() - t:.0f} s",
            file=sys.stderr,
        )
        for workers in (int(w) for w in args.workers.split(",")):
            r = run(path, workers)
            r.update(
                size=size_text.strip(),
                bytes=path.stat().st_size,
                workers=workers,
                tokens_per_s=r["tokens"] / r["seconds"],
            )
            results.append(r)
            print(f"  {size_text} workers={workers}: {r['seconds']:.1f} s", file=sys.stderr)
    print(
        f"{'size':>6} {'workers':>7} {'seconds':>8} {'tokens':>13} {'tokens/s':>11} {'MB/s':>6} {'main RSS':>9} {'worker RSS':>10} {'tree RSS':>9} {'CPU s':>6} {'load':>5}"
    )
    for r in results:
        print(
            f"{r['size']:>6} {r['workers']:>7} {r['seconds']:>8.1f} {r['tokens']:>13,} {r['tokens_per_s']:>11,.0f} "
            f"{r['bytes'] / 1e6 / r['seconds']:>6.1f} {r['main_rss_mb']:>7.0f}MB {r['worker_rss_mb']:>8.0f}MB {r['tree_rss_mb']:>7.0f}MB"
            f" {r['cpu_s']:>6.1f} {r['load_avg']:>5.1f}"
        )
    for r in results:
        base = next((b for b in results if b["size"] == r["size"] and b["workers"] == 1), None)
        if base is not None and r["workers"] > 1:
            r["speedup"] = base["seconds"] / r["seconds"]
            print(
                f"{r['size']}: {r['workers']} workers {r['speedup']:.2f}x faster than 1; peak RSS "
                f"main {base['main_rss_mb']:.0f} -> {r['main_rss_mb']:.0f} MB, largest worker "
                f"{r['worker_rss_mb']:.0f} MB, tree {base['tree_rss_mb']:.0f} -> {r['tree_rss_mb']:.0f} MB"
            )
    print(json.dumps(results, indent=1))
    if args.json:
        write_json(Path(args.json), meta, results)


if __name__ == "__main__":
    main()
