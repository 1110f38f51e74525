"""Time what check_inputs_unchanged costs: the stat comparison every open does, and the full
sha256 that runs when a source file's size, mtime or ctime moved (PTB's train file, a 1 GB file)."""

import os
import sys
import tempfile
import time
from pathlib import Path

from hornn_dist.util.files import sha256_file


def timed(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


ptb = Path(sys.argv[1]) / "ptb.train.txt"
with tempfile.TemporaryDirectory(dir=sys.argv[2] if len(sys.argv) > 2 else None) as tmp:
    big = Path(tmp) / "one_gb.txt"
    line = b"the quick brown fox jumps over the lazy dog and runs far away\n"
    with open(big, "wb") as f:
        block = line * ((1 << 20) // len(line))
        while f.tell() < 1 << 30:
            f.write(block)
    for name, path in (("ptb.train.txt", ptb), ("1 GB text", big)):
        size = path.stat().st_size
        stat_s = timed(lambda path=path: os.stat(path), 1000)
        os.system("sync")
        hash_s = timed(lambda path=path: sha256_file(path), 3)
        print(
            f"{name}: {size:,} bytes; stat {stat_s * 1e6:.1f} us; sha256 {hash_s:.3f} s "
            f"({size / hash_s / 1e6:.0f} MB/s, file in the page cache)"
        )
