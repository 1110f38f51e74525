"""A run's parameter counts, and the hidden size that gives a model another's total.

Both counts come from the product's own model: `build_model` on PyTorch's meta device (shapes
only, nothing allocated), `num_parameters` for the total and `num_recurrent_parameters` for the
recurrent part (the layers between the embedding and the output layer: input weights,
feedback paths, gates, biases). The recurrent count does not depend on the vocabulary; the
total does (embedding V x E, output layer V x H + V), so it needs the prepared corpus.

`match_params` in a sweep (sweeps/sweep_file.py) sizes a run's `model.hidden_size` with
`matched_hidden_size`: the H whose total is nearest the named run's, within `MATCH_TOLERANCE`
(with `match_multiple`, among multiples of it).
The embedding follows H only where the run's config ties the two (`embedding_follows_hidden`,
the one place of that rule): `model.embedding_size` 0 ("= hidden_size"), the same number as
`model.hidden_size` (every shipped config writes the paper's E = H that way), or
`model.tie_weights` (which needs E = H). Otherwise E stays as the config has it and only H grows.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from hornn_dist.data.config import DataConfig
from hornn_dist.models import ModelConfig
from hornn_dist.models.config import MAX_WIDTH
from hornn_dist.models.meta import build_on_meta
from hornn_dist.util.errors import ConfigError

logger = logging.getLogger("hornn_dist.sweep")

MATCH_TOLERANCE = 0.02  # a matched run's total is within 2% of its target's


def embedding_follows_hidden(cfg: ModelConfig) -> bool:
    """Return whether a resized model's embedding width moves with its hidden size: when the
    config ties E to H (0, the same number, or tie_weights), else E stays."""
    return cfg.tie_weights or cfg.embedding_size in (0, cfg.hidden_size)


def with_hidden_size(cfg: ModelConfig, hidden: int) -> ModelConfig:
    """Return `cfg` with hidden size `hidden` (and E with it where `embedding_follows_hidden`)."""
    embedding = cfg.embedding_size
    if embedding_follows_hidden(cfg) and embedding != 0:
        embedding = hidden
    return dataclasses.replace(cfg, hidden_size=hidden, embedding_size=embedding)


def hidden_size_overrides(cfg: ModelConfig, hidden: int) -> tuple[str, ...]:
    """Return the `--set` items that give a run of model `cfg` the hidden size `hidden`."""
    sized = with_hidden_size(cfg, hidden)
    items = [f"model.hidden_size={hidden}"]
    if sized.embedding_size != cfg.embedding_size:
        items.append(f"model.embedding_size={sized.embedding_size}")
    return tuple(items)


_COUNTS: dict[tuple[str, int], tuple[int, int]] = {}  # (repr of the config, V) -> counts


def _counts(cfg: ModelConfig, vocab_size: int) -> tuple[int, int]:
    """Return (total, recurrent) parameters of model `cfg` built on the meta device."""
    key = (repr(cfg), vocab_size)
    if key not in _COUNTS:
        try:
            model = build_on_meta(cfg, vocab_size)
        except (RuntimeError, TypeError, OverflowError) as err:  # past what torch can index
            raise ConfigError(
                f"the model is too large to build (model.hidden_size = {cfg.hidden_size}: "
                f"{type(err).__name__})"
            ) from None
        _COUNTS[key] = (model.num_parameters(), model.num_recurrent_parameters())
    return _COUNTS[key]


def total_parameters(cfg: ModelConfig, vocab_size: int) -> int:
    """Return the trainable parameters of model `cfg` on a vocabulary of `vocab_size` words."""
    return _counts(cfg, vocab_size)[0]


def recurrent_parameters(cfg: ModelConfig) -> int:
    """Return the trainable parameters of model `cfg`'s recurrent layers (any vocabulary)."""
    # a one-word vocabulary has room for no cutoff; the output layer is not counted here
    return _counts(dataclasses.replace(cfg, adaptive_cutoffs=[]), 1)[1]


def matched_hidden_size(cfg: ModelConfig, vocab_size: int, target: int, multiple: int = 1) -> int:
    """Return the hidden size (E with it where tied), a multiple of `multiple`, that brings
    model `cfg`'s total nearest `target` parameters; raise ConfigError when no such size comes
    within MATCH_TOLERANCE."""

    def total(hidden: int) -> int:
        return total_parameters(with_hidden_size(cfg, hidden), vocab_size)

    lo, hi = 1, MAX_WIDTH  # the total grows with H: the largest H at or under the target
    if total(lo) > target:
        hi = lo
    else:
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if total(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
    below = max(lo // multiple * multiple, multiple)  # the multiples either side of lo
    candidates = {h for h in (below, below + multiple) if h <= MAX_WIDTH} or {below}
    best = min(sorted(candidates), key=lambda h: abs(total(h) - target))
    off = abs(total(best) - target) / target
    if off > MATCH_TOLERANCE:
        among = f" among multiples of {multiple}" if multiple > 1 else ""
        raise ConfigError(
            f"no model.hidden_size{among} gives this {cfg.arch} model {target:,} parameters "
            f"within {MATCH_TOLERANCE:.0%} (nearest: H {best}, {total(best):,})"
        )
    return best


def vocabulary_size(cfg: DataConfig, prepare: bool) -> int | None:
    """Return the vocabulary size of the corpus of `cfg` from its prepared manifest; with
    `prepare`, prepare it first if it is not (what the sweep's first run would do anyway),
    else return None for a corpus not prepared yet."""
    from hornn_dist.data.pipeline import corpus_folder, default_workers, prepare_corpus
    from hornn_dist.data.shards import MANIFEST, read_manifest
    from hornn_dist.util.errors import naming_path

    folder = corpus_folder(cfg)
    if not (folder / MANIFEST).is_file():
        if not prepare:
            return None
        logger.info("preparing the corpus to count the vocabulary match_params sizes by")
        with naming_path(cfg.cache_dir, "data.cache_dir"):
            folder = prepare_corpus(cfg, workers=default_workers(), progress=False)
    return int(read_manifest(Path(folder))["vocab_size"])


def fmt_params(total: int | None, recurrent: int) -> str:
    """Return "4,687,853 parameters, 98,560 recurrent" (without the total: say why)."""
    if total is None:
        return (
            f"{recurrent:,} recurrent parameters (the total once the corpus is prepared: it "
            "needs the vocabulary)"
        )
    return f"{total:,} parameters, {recurrent:,} recurrent"
