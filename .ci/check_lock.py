"""Exit 1 unless every package constraints.txt pins that is installed here has the pinned version
(a local build of it, such as torch 2.13.0+cpu for torch==2.13.0, counts: `==` takes it too)."""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def main() -> int:
    """Compare the installed distributions with the lock; print each difference on one line."""
    lock = Path(__file__).resolve().parents[1] / "constraints.txt"
    pins = dict(m.groups() for line in lock.read_text().splitlines() if (m := PIN.match(line)))
    wrong, checked = [], 0
    for name, pinned in pins.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # a pin for another platform's or extra's dependency
        checked += 1
        if installed.split("+")[0] != pinned:
            wrong.append(f"{name} {installed} installed, constraints.txt pins {pinned}")
    for line in wrong:
        print(f"CI: {line}", file=sys.stderr)
    print(f"CI: {checked} of {len(pins)} pinned packages installed, {len(wrong)} off the lock")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
