"""python probe.py H LIMIT_MB SCRATCH: a tiny-corpus run (3 steps, then the test split) of
hidden size H in a fresh v1 memory cgroup; print its exit code and the cgroup's peak."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tests.train_helpers import env, write_tiny_config  # noqa: E402

H, limit_mb = int(sys.argv[1]), int(sys.argv[2])
folder = Path(sys.argv[3]) / f"run{H}_{limit_mb}"
shutil.rmtree(folder, ignore_errors=True)
cfg = write_tiny_config(
    folder,
    model={"pooling": "fofe", "order": 3, "hidden_size": H, "embedding_size": 16},
    train={"max_steps": 3, "checkpoint_every": 0, "epochs": 1},
)
subprocess.run(
    [sys.executable, "-m", "hornn_dist.prepare", str(cfg), "--quiet"],
    env=env(),
    check=True,
    capture_output=True,
)
cg = Path(f"/sys/fs/cgroup/memory/hornn_probe_{os.getpid()}")
cg.mkdir()
try:
    (cg / "memory.limit_in_bytes").write_text(str(limit_mb << 20))
    try:
        (cg / "memory.memsw.limit_in_bytes").write_text(str(limit_mb << 20))
    except OSError:
        pass
    t = time.time()
    p = subprocess.run(
        [
            "sh",
            "-c",
            f'echo $$ > {cg}/cgroup.procs && exec "$@"',
            "sh",
            sys.executable,
            "-m",
            "hornn_dist.train",
            str(cfg),
        ],
        env=env(),
        capture_output=True,
        text=True,
    )
    peak = int((cg / "memory.max_usage_in_bytes").read_text())
    err = [line for line in p.stderr.splitlines() if line.startswith("error")]
    print(
        f"H={H} limit={limit_mb}MB rc={p.returncode} peak={peak / 2**20:.0f}MB t={time.time() - t:.0f}s {err[:1]}"
    )
finally:
    for _ in range(50):
        try:
            cg.rmdir()
            break
        except OSError:
            time.sleep(0.1)
