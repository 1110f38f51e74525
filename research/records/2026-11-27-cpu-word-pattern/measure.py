"""Measure what data.word_pattern's engine costs and bounds (issue 39, items 1 and 5).

    PYTHONPATH=$PWD python research/records/2026-11-27-cpu-word-pattern/measure.py OLD_TREE

OLD_TREE: a copy of the commit before (git archive 2f3cd80^), for the demo's prepare time then.
Prints one JSON object (results.json here).
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokenizers import Regex, pre_tokenizers

from hornn_dist.data import vocab
from hornn_dist.data.config import DEMO_WORDS

REPO = Path(__file__).resolve().parents[3]


def seconds(fn) -> float:
    """Return the CPU seconds of fn() (steadier than wall time on a shared machine)."""
    started = time.process_time()
    fn()
    return time.process_time() - started


def best_of(n: int, fn) -> float:
    return min(seconds(fn) for _ in range(n))


def onig(pattern: str, text: str) -> tuple[float, str]:
    split = pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True)
    started = time.perf_counter()
    try:
        split.pre_tokenize_str(text)
        outcome = "finished"
    except BaseException as err:  # PanicException: the retry limit
        outcome = f"gave up: {str(err)[:60]}"
    return time.perf_counter() - started, outcome


def prepare_seconds(tree: Path, workers: int) -> float:
    with tempfile.TemporaryDirectory() as cache:
        cmd = [sys.executable, "-m", "hornn_dist.prepare", "configs/demo.toml", "--quiet"]
        cmd += ["--workers", str(workers), "--set", f"data.cache_dir='{cache}'"]
        env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
        started = time.perf_counter()
        subprocess.run(cmd, cwd=tree, env=env, check=True, capture_output=True)
        return time.perf_counter() - started


def stop_latency() -> dict[str, float]:
    """Seconds from SIGTERM to exit of `prepare` on a pattern that backtracks for ~10 s."""
    with tempfile.TemporaryDirectory() as tmp:
        train = Path(tmp) / "train.txt"
        train.write_text(("a" * 24 + " ") * 600 + "\n")
        config = Path(tmp) / "c.toml"
        config.write_text(
            f'[data]\ntrain = ["{train}"]\ncache_dir = "{tmp}/cache"\n'
            "word_pattern = '(?:a|aa)+b|[a-z]+'\n"
        )
        cmd = [sys.executable, "-m", "hornn_dist.prepare", str(config), "--quiet", "--workers", "1"]
        proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True)
        while not list(Path(tmp).glob("cache/*.tmp-*")):  # preparing
            time.sleep(0.1)
        time.sleep(2)  # well into the count
        sent = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        took = time.perf_counter() - sent
        left = subprocess.run(["pgrep", "-f", str(config)], capture_output=True, text=True)
        return {
            "seconds": round(took, 3),
            "exit": proc.returncode,
            "stderr": err,
            "processes_left": left.stdout.split(),
            "tmp_folders_left": [p.name for p in Path(tmp).glob("cache/*.tmp-*")],
        }


def main() -> None:
    old = Path(sys.argv[1])
    out: dict = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip(),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}",
    }
    issue = "(?:a+)+b|[a-z]+"
    out["issue_pattern_python_re_s"] = {
        n: round(best_of(1, lambda n=n: re.findall(issue, "a" * n)), 3) for n in (20, 22, 24)
    }
    out["issue_pattern_40a_oniguruma"] = onig(issue, "a" * 40)
    out["issue_pattern_40a_oniguruma_on_text8_size_line"] = onig(issue, "a" * 40 + " word" * 1000)
    out["alternation_40a_oniguruma"] = onig("(?:a|aa)+b|[a-z]+", "a" * 40)
    out["nested_40a_oniguruma"] = onig("(?:a|a)*b|[a-z]+", "a" * 40)
    text = gzip.open(REPO / "hornn_dist/corpora/demo.train.txt.gz", "rt").read()
    chunks = [text[i : i + (1 << 20)] for i in range(0, len(text), 1 << 20)]
    mb = len(text.encode()) / 1e6

    def python_re() -> None:
        compiled = re.compile(vocab.word_regex(DEMO_WORDS))
        for c in chunks:
            compiled.findall(c.lower().replace("\n", " <eos> "))

    def tokenizer() -> None:
        for c in chunks:
            vocab.split_words(c, True, True, DEMO_WORDS)

    out["demo_train_mb"] = round(mb, 2)
    out["split_demo_train_cpu_s"] = {"python_re": round(best_of(5, python_re), 3)}
    shipped = vocab.PATTERN_PIECE_CHARS
    for size in (1 << 20, 1 << 16, 1 << 14, 1 << 12, 1 << 10):
        vocab.PATTERN_PIECE_CHARS = size
        out["split_demo_train_cpu_s"][f"tokenizer_pieces_{size}"] = round(best_of(5, tokenizer), 3)
    vocab.PATTERN_PIECE_CHARS = shipped
    out["prepare_demo_s"] = {
        f"{name}_workers{w}": round(min(prepare_seconds(tree, w) for _ in range(3)), 2)
        for name, tree in (("before", old), ("after", REPO))
        for w in (1, 2)
    }
    out["sigterm_to_exit"] = stop_latency()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
