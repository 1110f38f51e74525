"""Benchmark the shard check that opening a corpus for use runs: sha256 of every shard, threaded.

    python benchmarks/shard_check.py                       # 1 GB of uint16 tokens, 5 shards
    python benchmarks/shard_check.py --gb 0.01 --shard-tokens 1000000 --repeats 1

Writes a prepared folder of --gb GB of random uint16 token ids (in shards of --shard-tokens
tokens, as `ShardWriter` writes them, manifest included) under a temporary folder in --dir,
then times, --repeats times each (median reported), cold (the shards' pages dropped from the
page cache with posix_fadvise first: "cold-ish", a VM's host may still cache them) and warm:

    read                 the bytes only, one thread: what any check costs at least
    read, threads        the bytes only, in the check's threads
    sha256 / crc32 / blake2b, threads   each shard hashed in the check's threads
    sha256, 1 thread     as `prepare --verify` did before
    verify_shards        the check itself (`Corpus.verify_shards(record=False)`)
    verify_shards, recorded   the check when this machine has checked the unchanged shards
                         before: a stat per shard, nothing read

and prints wall and CPU milliseconds (all threads), GB/s and the wall seconds extrapolated
linearly to --extrapolate GB (shards of the same size: the recorded row, a stat per shard,
scales with their count). Then the rows as JSON (`--json`, default benchmarks/results/shard_check.json).
The folder is deleted at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from hornn_dist.data import shards
from hornn_dist.data.shards import Corpus, ShardWriter, open_corpus

from common import run_meta, write_json

VOCAB = 50_000
BLOCK = 1 << 22  # bytes per read, as sha256_file


def write_folder(folder: Path, gb: float, shard_tokens: int, seed: int = 0) -> Corpus:
    """Write a prepared folder (shards + manifest, no tokenizer) of gb GB of uint16 ids."""
    folder.mkdir(parents=True)
    itos = [f"w{i}" for i in range(VOCAB)]
    from hornn_dist.data.vocab import vocab_hash

    vhash = vocab_hash(itos)
    writer = ShardWriter(folder, "train", shard_tokens, np.dtype(np.uint16), VOCAB, vhash)
    rng = np.random.default_rng(seed)
    left = int(gb * 1e9) // 2
    while left:
        n = min(left, 10_000_000)
        writer.append(rng.integers(0, VOCAB, size=n, dtype=np.uint16))
        left -= n
    records = writer.close()
    tokens = sum(r["tokens"] for r in records)
    manifest = {
        "format": "hornn_dist-shards",
        "format_version": shards.FORMAT_VERSION,
        "dtype": "uint16",
        "vocab_size": VOCAB,
        "vocab_hash": vhash,
        "splits": {"train": {"tokens": tokens, "unk_tokens": 0, "shards": records}},
    }
    shards.write_json(folder / shards.MANIFEST, manifest)
    for path in folder.glob("*.bin"):  # written back, so that dropping the pages works
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    return open_corpus(folder, check=False)  # no tokenizer.json to check: shards alone


def drop_cache(paths: list[Path]) -> None:
    """Ask the kernel to drop the files' pages from the page cache (no root needed)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def streamed(update: Callable[[memoryview], object]) -> Callable[[Path], None]:
    """Return a function that feeds a file's bytes to update, BLOCK bytes at a time."""

    def run(path: Path) -> None:
        buf = bytearray(BLOCK)
        view = memoryview(buf)
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                update(view[:n])

    return run


def hashed(make: Callable[[], object]) -> Callable[[Path], None]:
    """Return a function that hashes a file with a new hashlib object of `make`."""

    def run(path: Path) -> None:
        digest = make()
        streamed(digest.update)(path)  # type: ignore[attr-defined]

    return run


def crc32(path: Path) -> None:
    """Compute a file's zlib.crc32."""
    value = [0]
    streamed(lambda block: value.__setitem__(0, zlib.crc32(block, value[0])))(path)


def over(paths: list[Path], fn: Callable[[Path], object], threads: int) -> Callable[[], None]:
    """Return a function that runs fn on every path in `threads` threads."""

    def run() -> None:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(fn, paths))

    return run


def cpu_seconds() -> float:
    """Return the user + system CPU seconds of this process so far (all threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(fn: Callable[[], object], paths: list[Path], cold: bool, repeats: int) -> dict:
    """Return the median wall and CPU seconds of fn over repeats runs, cold or warm."""
    walls, cpus = [], []
    if not cold:
        over(paths, streamed(lambda block: None), 1)()  # pages in memory
    for _ in range(repeats):
        if cold:
            drop_cache(paths)
        cpu, start = cpu_seconds(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(cpu_seconds() - cpu)
    return {"seconds": statistics.median(walls), "cpu_s": statistics.median(cpus), "runs": walls}


def main(argv: list[str] | None = None) -> list[dict]:
    """Write the folder, time every row cold and warm, print the table and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gb", type=float, default=1.0, help="GB (1e9 bytes) of token ids")
    p.add_argument("--shard-tokens", type=int, default=100_000_000, help="as data.shard_tokens")
    p.add_argument("--repeats", type=int, default=3, help="runs per row and cache state")
    p.add_argument("--extrapolate", type=float, default=40.0, help="GB to extrapolate to")
    p.add_argument("--dir", default=tempfile.gettempdir(), help="where the folder is written")
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/shard_check.json"))
    args = p.parse_args(argv)
    if args.gb <= 0 or args.shard_tokens < 1 or args.repeats < 1:
        p.error("--gb must be > 0, --shard-tokens and --repeats >= 1")
    free = shutil.disk_usage(args.dir).free
    if free < 2 * args.gb * 1e9:
        p.error(f"{args.dir} has {free / 1e9:.1f} GB free; --gb {args.gb} needs twice that")
    load_before = os.getloadavg()[0]  # a busy machine inflates the wall times, less the CPU ones
    work = Path(tempfile.mkdtemp(prefix="shard_check_", dir=args.dir))
    try:
        start = time.perf_counter()
        corpus = write_folder(work / "corpus", args.gb, args.shard_tokens)
        written = time.perf_counter() - start
        paths = sorted(corpus.folder.glob("*.bin"))
        size = sum(path.stat().st_size for path in paths)
        threads = min(len(paths), os.cpu_count() or 1, shards.HASH_THREADS)
        print(
            f"{len(paths)} shard(s), {size / 1e9:.3f} GB in {work} (written and hashed by "
            f"ShardWriter in {written:.1f} s); {threads} thread(s), {os.cpu_count()} CPUs",
            file=sys.stderr,
        )
        corpus.verify_shards()  # writes the record the "recorded" row uses
        time.sleep(0.05)  # the record's clock tick is past: its entries are not racy
        corpus.verify_shards()
        cases: dict[str, Callable[[], object]] = {
            "read": over(paths, streamed(lambda block: None), 1),
            f"read, {threads} threads": over(paths, streamed(lambda block: None), threads),
            "sha256, 1 thread": over(paths, hashed(hashlib.sha256), 1),
            f"sha256, {threads} threads": over(paths, hashed(hashlib.sha256), threads),
            f"crc32, {threads} threads": over(paths, crc32, threads),
            f"blake2b, {threads} threads": over(paths, hashed(hashlib.blake2b), threads),
            "verify_shards": lambda: corpus.verify_shards(record=False),
            "verify_shards, recorded": corpus.verify_shards,
        }
        rows = []
        for cache in ("cold", "warm"):
            for name, fn in cases.items():
                row = {"case": name, "cache": cache, "bytes": size, "shards": len(paths)}
                row.update(measure(fn, paths, cache == "cold", args.repeats))
                reads = not name.endswith("recorded")  # that row reads nothing
                row["gb_per_s"] = size / 1e9 / row["seconds"] if reads else None
                row["seconds_extrapolated"] = row["seconds"] * args.extrapolate / (size / 1e9)
                rows.append(row)
        assert corpus.verify_shards() == 0, "the recorded check read a shard"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    at = f"s at {args.extrapolate:g} GB"
    print(f"{'case':28s} {'cache':5s} {'ms':>9s} {'GB/s':>6s} {'CPU ms':>8s} {at:>12s}")
    for r in rows:
        rate = "-" if r["gb_per_s"] is None else f"{r['gb_per_s']:.2f}"
        print(
            f"{r['case']:28s} {r['cache']:5s} {r['seconds'] * 1e3:9.2f} {rate:>6s} "
            f"{r['cpu_s'] * 1e3:8.0f} {r['seconds_extrapolated']:12.3f}"
        )
    meta = run_meta("shard_check.py", argv, torch.device("cpu"), args)
    meta.update(cpus=os.cpu_count(), hash_threads=threads)
    meta.update(load_avg_before=load_before, load_avg_after=os.getloadavg()[0])
    write_json(args.json, meta, rows)
    print(f"wrote {args.json}")
    return rows


if __name__ == "__main__":
    main()
