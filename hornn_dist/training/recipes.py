"""Which shipped config holds a model's own recipe: what a run whose model was switched by
`--set model.arch=...` on another model's recipe is told in its first line.

A recipe (lr, clip, dropout, schedule) is chosen for one model; the same keys under another
model can diverge (the LSTM at a HORNN's lr 5 trains, the HORNN at the LSTM's lr 20 does not).
The configs beside the one given (configs/ holds each corpus's HORNN, RNN and LSTM recipes) are
read for one of the same corpus whose model is the run's.
"""

from __future__ import annotations

from pathlib import Path

from hornn_dist.config import RunConfig, load_config
from hornn_dist.util.errors import ConfigError


def model_of(cfg: RunConfig) -> tuple[str, int]:
    """Return what names a model's recipe: its arch, and a HORNN's order (1 is the RNN's)."""
    return cfg.model.arch, cfg.model.order if cfg.model.arch == "hornn" else 0


def own_recipe(config: Path, cfg: RunConfig, given: RunConfig) -> Path | None:
    """Return the shipped config beside `config` (read as `given`) for `cfg`'s model on the
    same corpus, or None."""
    for other in sorted(config.parent.glob("*.toml")):
        if other.resolve() == config.resolve() or other.stem.endswith("_paper"):
            continue
        try:
            theirs = load_config(other)
        except ConfigError:  # not a run config (a launch or sweep file): no candidate
            continue
        same_corpus = (theirs.data.preset, theirs.data.path) == (given.data.preset, given.data.path)
        if same_corpus and model_of(theirs) == model_of(cfg):
            return other
    return None


def switched_line(config: Path, cfg: RunConfig, given: RunConfig) -> str:
    """Return the warning for a run whose model the overrides switched while its [optim] recipe
    stayed the file's, or "" (a sweep that sets a recipe with the model is not warned): the
    model it now is, the recipe it runs, and that model's own config where shipped."""
    if model_of(cfg) == model_of(given) or cfg.optim != given.optim:
        return ""
    now, was = cfg.model.arch, given.model.arch
    if (now, was) == ("hornn", "hornn"):
        now, was = f"order {cfg.model.order}", f"order {given.model.order}"
    own = own_recipe(config, cfg, given)
    where = f"its own recipe for this corpus: {own}" if own else "no shipped config has its recipe"
    return (
        f"warning: the overrides make this run's model {now}, but {config} is a recipe chosen "
        f"for {was} (lr {given.optim.lr:g}, clip {given.optim.clip:g}, dropout "
        f"{given.model.dropout:g}), which may not train it; {where}"
    )
