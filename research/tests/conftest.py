"""research/tests run in the full tier only (`python -m pytest -m ""`, what CI runs): every
test collected here is marked `integration`, which the default tier (pyproject's `addopts`)
leaves out. They check the search's records, sweeps and GPU queues, not the product."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.integration)
