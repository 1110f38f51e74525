"""hornn_dist turns on torch's THP_MEM_ALLOC_ENABLE when imported before torch: large CPU
tensors land on transparent huge pages, unless the environment says 0 (hornn_dist/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
# a 64 MB tensor written through, then the kB of anonymous huge pages this process holds
PROBE = """
import hornn_dist, torch
def huge_kb():
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
before = huge_kb()
t = torch.empty(64 << 20, dtype=torch.uint8).fill_(1)
print(huge_kb() - before)
"""


def huge_pages_gained(env_value: str | None) -> int:
    """Return the kB of huge pages a fresh interpreter gained by one 64 MB tensor."""
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if env_value is not None:
        env["THP_MEM_ALLOC_ENABLE"] = env_value
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(
    not THP_MODE.exists() or "[madvise]" not in THP_MODE.read_text(),
    reason="huge pages on request only where the kernel's mode is madvise",
)
def test_large_tensors_go_on_huge_pages_unless_the_environment_says_0():
    assert huge_pages_gained(None) >= 32 << 10  # at least half the tensor on 2 MB pages
    assert huge_pages_gained("0") < 4 << 10  # the user's 0 wins: 4 KB pages
