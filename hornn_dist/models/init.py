"""How a RecurrentLM's recurrent (feedback) weights are drawn: `model.recurrent_init`.

    paper   every weight matrix ~ N(0, init_std), the recurrent ones too (paper §4)
    scaled  each feedback matrix of a HORNN path (W_hn) or of the RNN (weight_hh) ~
            N(0, min(init_std, 1 / sqrt(H · Σ_n w_n²))), every other weight ~ N(0, init_std)

w_n is path n's weight in the pool at initialisation (`Pooling.init_weights`): 1 for sum and max
(and the order-1 RNN), α^n for fofe, σ(0) = ½ for gated, each times `model.feedback_scale`. The pooled feedback
Σ_n w_n W_hn h_{t-n} drawn at std s has a spectral radius of about s·sqrt(H · Σ_n w_n²): at
N(0, 0.1) one path has 0.1·√H (1.1 at H 128, 2 at H 400) and N unweighted paths √N times
that, the chaotic start under tanh that made `sum` and `max` diverge. `scaled` caps that gain
at 1 and never raises it: FOFE-3 and gated-3 at H 128 (gain 0.83 and 0.98) keep the paper's
draw, which trained them best (docs/training.md, "The default recipe"). The LSTM and GRU keep
N(0, init_std) everywhere (their gates set their own gain), under a feedback scale too.
"""

from __future__ import annotations

import math

from hornn_dist.models.config import ModelConfig
from hornn_dist.models.poolings import get_pooling


def path_weights(cfg: ModelConfig) -> list[float]:
    """Return each feedback path's weight in the pool at initialisation (w_1 .. w_N), its
    `model.feedback_scale` included."""
    c = cfg.feedback_scale
    if cfg.arch == "rnn":
        return [c]
    return [c * w for w in get_pooling(cfg.pooling).init_weights(cfg.order, cfg.alpha)]


def recurrent_std(cfg: ModelConfig) -> float:
    """Return the std of the feedback matrices (HORNN paths, RNN weight_hh) under cfg."""
    if cfg.recurrent_init == "paper" or cfg.arch not in ("hornn", "rnn"):
        return cfg.init_std
    unit_gain = 1.0 / math.sqrt(cfg.hidden_size * sum(w * w for w in path_weights(cfg)))
    return min(cfg.init_std, unit_gain)


def describe(cfg: ModelConfig) -> str:
    """Return the start-up log's words for the init: which rule and the stds it resolved to."""
    rec = recurrent_std(cfg)
    if rec == cfg.init_std:
        if cfg.recurrent_init == "paper":
            gain = ""
        elif cfg.arch in ("hornn", "rnn"):
            gain = " (feedback gain <= 1 already)"
        else:
            gain = f" (the rule leaves the {cfg.arch.upper()}'s weights as drawn)"
        return f"init {cfg.recurrent_init}: every weight ~ N(0, {cfg.init_std:g}){gain}"
    return (
        f"init {cfg.recurrent_init}: feedback paths ~ N(0, {rec:.4g}) = 1/sqrt(H * sum w_n^2) "
        f"(gain 1), other weights ~ N(0, {cfg.init_std:g})"
    )
