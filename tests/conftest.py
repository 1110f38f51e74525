"""Session set-up: without a GPU, the Triton engine's kernels run under Triton's interpreter.

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
