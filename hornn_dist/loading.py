"""Open what the commands share from disk: a prepared corpus and a trained model."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from hornn_dist.checkpoint import WEIGHTS, read_trainer_state, verify
from hornn_dist.config import RunConfig
from hornn_dist.data.config import DataConfig
from hornn_dist.data.pipeline import corpus_folder, prepare_corpus
from hornn_dist.data.shards import MANIFEST, Corpus, open_corpus
from hornn_dist.errors import CheckpointError, DataError
from hornn_dist.models import build_model, plan_for


def open_prepared_corpus(
    cfg: DataConfig, accelerator: Any, splits: Iterable[str] | None = None, prepare: bool = True
) -> Corpus:
    """Return the corpus of `cfg`, preparing its shards first if they are missing (main process first).

    prepare=False only opens a corpus prepared before (evaluate, generate: the config comes
    from a checkpoint, whose paths are not the user's to read from or write to).

    The shards of `splits` (default: all) are checked against the manifest's sha256 before
    anything reads them, by each machine's main process first: it records what it checked,
    so its other processes, and later runs, read again only shards written since
    (`Corpus.verify_shards`; cost in benchmarks/README.md, "Shard check")."""
    if prepare:
        with accelerator.main_process_first():
            folder = prepare_corpus(cfg, workers=1, progress=accelerator.is_main_process)
    else:
        folder = corpus_folder(cfg)
        if not (folder / MANIFEST).is_file():
            raise DataError(
                f"the run's prepared corpus is not at {folder}; prepare it with the run's config "
                "(`python -m hornn_dist.prepare CONFIG`) or set data.cache_dir there"
            )
    with accelerator.local_main_process_first():
        try:
            corpus = open_corpus(folder)
            corpus.verify_shards(splits)
            damage = None
        except DataError as e:  # raised past the barrier: the others find it too, no hang
            damage = e
    if damage is not None:
        raise damage
    return corpus


def load_model(
    folder: Path, cfg: RunConfig, corpus: Corpus, device: torch.device | str
) -> torch.nn.Module:
    """Return the checkpoint's model on `device` in eval mode, after checking its vocabulary.

    Its HORNN layers run as planned for `device` under the run's mixed precision and
    evaluation batch; where the run's engine cannot run there (triton on a CPU), the fused
    engine runs, with a warning."""
    state = read_trainer_state(folder)
    if state.get("vocab_hash") != corpus.vocab_hash:
        raise CheckpointError(
            f"{folder} was trained with vocabulary {state.get('vocab_hash')} but the data has "
            f"{corpus.vocab_hash}; point data.cache_dir at the shards used for training"
        )
    plan = plan_for(
        cfg.model, device, cfg.train.eval_batch_size, cfg.train.mixed_precision, strict=False
    )
    model = build_model(cfg.model, corpus.vocab_size, plan)
    verify(folder)
    weights = folder / WEIGHTS
    try:
        model.load_state_dict(load_file(str(weights)))
    except Exception as err:  # a checkpoint of an older version has no checksums to verify
        raise CheckpointError(
            f"{weights} is not a valid weights file ({type(err).__name__}); use another checkpoint"
        ) from None
    return model.to(device).eval()
