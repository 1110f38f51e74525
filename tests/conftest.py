"""Session set-up: without a GPU, the Triton engine's kernels run under Triton's interpreter;
torch computes on one CPU thread; under pytest-xdist, the longest files start first.

TRITON_INTERPRET must be set before triton.jit decorates the kernels, that is before
`hornn_dist.models.triton_scan` is first imported; child processes inherit it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.train_helpers import fill_disk, mount_tmpfs, unmount

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# One intra-op thread in the test process, as its children get (train_helpers.env): beside a
# second xdist worker on two cores, a second thread only spins and takes the other's core
torch.set_num_threads(1)


def pytest_configure(config: pytest.Config) -> None:
    """Keep the file order of `pytest_collection_modifyitems` under `--dist loadfile`."""
    if hasattr(config.option, "loadscopereorder"):  # xdist would order files by test count
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order files longest first, so no long file starts last: files with integration tests
    (real launches, sweeps: tens of seconds each), most of them first, then the others, most
    tests first; a file's tests keep their order. Two workers then end within seconds."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)

    def weight(tests: list[pytest.Item]) -> tuple[int, int]:
        return sum(t.get_closest_marker("integration") is not None for t in tests), len(tests)

    ordered = sorted(files.values(), key=weight, reverse=True)  # stable: ties keep their order
    items[:] = [item for tests in ordered for item in tests]


@pytest.fixture(scope="session")
def disks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path] | None]:
    """A read-only and a full file system (real tmpfs mounts), or None where none can be mounted."""
    folder = tmp_path_factory.mktemp("disks")
    readonly, full = folder / "readonly", folder / "full"
    try:
        if mount_tmpfs(readonly, "ro") and mount_tmpfs(full, "size=64k"):
            fill_disk(full)
            yield {"readonly": readonly, "full": full}
        else:
            yield None
    finally:
        unmount(readonly)
        unmount(full)
