"""hornn_dist: a distributed trainer for Higher Order RNN language models (Soltani & Jiang, 2016).

Importing it before torch (every `python -m hornn_dist.*` does) turns on torch's own CPU
allocator option `THP_MEM_ALLOC_ENABLE`: tensors of 2 MB and more go on transparent huge
pages, so a step's fresh gradients, casts and logits fault in a page per 2 MB, not per 4 KB
(benchmarks/README.md, "Output layer"; the same floats). torch reads it once, at its first
allocation: `THP_MEM_ALLOC_ENABLE=0` in the environment keeps 4 KB pages.
"""

import os

__version__ = "0.1.0"

THP_ENV = "THP_MEM_ALLOC_ENABLE"
os.environ.setdefault(THP_ENV, "1")
