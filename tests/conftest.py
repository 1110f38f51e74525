"""Session set-up: without a GPU, the Triton engine's kernels run under Triton's interpreter.

TRITON_INTERPRET must be set before triton.jit decorates the kernels, that is before
`hornn_dist.models.triton_scan` is first imported; child processes inherit it.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
