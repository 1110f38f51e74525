"""Recurrent language models: the HORNN layer (eq. 3-7), its fused and Triton recurrences, RNN/LSTM/GRU."""

from hornn_dist.models.config import ModelConfig
from hornn_dist.models.hornn import HornnLayer
from hornn_dist.models.lm import RecurrentLM, build_model
from hornn_dist.models.max_norm import column_normalize_
from hornn_dist.models.plan import LayerPlan, plan_for

__all__ = [
    "HornnLayer",
    "LayerPlan",
    "ModelConfig",
    "RecurrentLM",
    "build_model",
    "column_normalize_",
    "plan_for",
]
