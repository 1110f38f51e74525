"""Load a trained language model from a checkpoint for evaluation or generation."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from hornn_dist.checkpoint import read_trainer_state
from hornn_dist.config import RunConfig
from hornn_dist.data.shards import Corpus
from hornn_dist.errors import CheckpointError
from hornn_dist.models import build_model


def load_model(
    folder: Path, cfg: RunConfig, corpus: Corpus, device: torch.device | str
) -> torch.nn.Module:
    """Return the checkpoint's model on `device` in eval mode, after checking its vocabulary."""
    state = read_trainer_state(folder)
    if state.get("vocab_hash") != corpus.vocab_hash:
        raise CheckpointError(
            f"{folder} was trained with vocabulary {state.get('vocab_hash')} but the data has "
            f"{corpus.vocab_hash}; point data.cache_dir at the shards used for training"
        )
    model = build_model(cfg.model, corpus.vocab_size)
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise CheckpointError(f"{weights} is missing; the checkpoint is damaged, use an older one")
    model.load_state_dict(load_file(str(weights)))
    return model.to(device).eval()
