"""The pytest plugin that wrote per-test-cpu-9a6a049.tsv: each test's CPU seconds (the worker's
own, and its reaped children's: the CLI processes and launches it started) and its wall time.

Run: PYTHONPATH=$PWD:research/records/2026-11-28-cpu-test-durations \
    CPUPLUG_OUT=/tmp/cpu python -m pytest -q -n 2 --dist loadfile -m "" -p cpu_per_test
(it ran as /tmp/cpuplug/cpuplug.py, the same code less these comments and type hints).
"""

from __future__ import annotations

import os
import resource
import time

import pytest

OUT = os.environ.get("CPUPLUG_OUT", "/tmp/cpuplug/out")


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Append `self CPU, children CPU, wall, node id` of each test to OUT.<worker>."""
    own, kids, started = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.time()
    yield
    own, kids = _cpu(resource.RUSAGE_SELF) - own, _cpu(resource.RUSAGE_CHILDREN) - kids
    with open(f"{OUT}.{os.environ.get('PYTEST_XDIST_WORKER', 'main')}", "a") as f:
        f.write(f"{own:.2f}\t{kids:.2f}\t{time.time() - started:.2f}\t{item.nodeid}\n")
