"""Data access for the CLIs: prepare shards once (main process first) and open them."""

from __future__ import annotations

from typing import Any

from hornn_dist.data.config import DataConfig
from hornn_dist.data.prepare import prepare_corpus
from hornn_dist.data.shards import Corpus, open_corpus


def open_prepared_corpus(cfg: DataConfig, accelerator: Any) -> Corpus:
    """Return the corpus of `cfg`, preparing its shards first if they are missing (main process first)."""
    with accelerator.main_process_first():
        folder = prepare_corpus(cfg, workers=1, progress=accelerator.is_main_process)
    return open_corpus(folder)
