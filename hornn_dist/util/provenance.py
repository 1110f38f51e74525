"""Which code and machine produced a result: the commit (clean or dirty) of the checkout this
package runs from, and the machine's CPU, cores and GPU. A training run writes both into its
start event (metrics.jsonl) and a benchmark into its JSON, so a record names its commit without
anyone copying it by hand."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import torch

from hornn_dist.runtime import cpu_name

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the checkout's root in an editable install
COMMIT_ENV = "HORNN_COMMIT"  # names the commit where the copy has no .git (a GPU machine's)
UNKNOWN = {"commit": "unknown", "dirty": None}


def _git(root: Path, *args: str) -> str | None:
    """Return git's output in `root`, or None where git or the checkout is missing."""
    try:
        proc = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def code_commit(root: Path = PACKAGE_ROOT) -> dict:
    """Return {"commit": sha, "dirty": bool} of the checkout at `root`; HORNN_COMMIT overrides
    it (dirty then unknown: None); {"commit": "unknown", "dirty": None} where `root` is not the
    top of a git checkout (an installed wheel inside someone else's repository included)."""
    given = os.environ.get(COMMIT_ENV)
    if given:
        return {"commit": given, "dirty": None}
    lines = (_git(root, "rev-parse", "--show-toplevel", "HEAD") or "").splitlines()
    if len(lines) != 2 or Path(lines[0]).resolve() != root.resolve():
        return dict(UNKNOWN)
    head = lines[1]
    status = _git(root, "status", "--porcelain")
    return {"commit": head, "dirty": None if status is None else bool(status.strip())}


def describe_commit(commit: dict) -> str:
    """Return a commit as a record line writes it: "commit 45b9488 (dirty)", "commit unknown"."""
    sha = commit["commit"]
    short = sha[:7] if len(sha) == 40 else sha
    dirty = {True: " (dirty)", False: " (clean)", None: ""}[commit["dirty"]]
    return f"commit {short}{dirty}"


def machine() -> dict:
    """Return the machine: CPU name, core count and GPU name (None without CUDA)."""
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "gpu": gpu}
