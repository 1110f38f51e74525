"""Recurrent language models: the HORNN layer (eq. 3-7), its fused and Triton recurrences, RNN/LSTM/GRU."""

from hornn_dist.models.config import ModelConfig
from hornn_dist.models.hornn import HornnLayer
from hornn_dist.models.lm import (
    RecurrentLM,
    build_model,
    check_engine,
    engine_label,
    layer_precision_label,
)
from hornn_dist.models.max_norm import column_normalize_

__all__ = [
    "HornnLayer",
    "ModelConfig",
    "RecurrentLM",
    "build_model",
    "check_engine",
    "column_normalize_",
    "engine_label",
    "layer_precision_label",
]
