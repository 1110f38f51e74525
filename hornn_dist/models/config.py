"""The `[model]` section of a run config, its tables of choices and the rules that check a value.

Each table and rule is written once here: `ModelConfig.validate` applies the rules under the
config's key names ("model.order"), `HornnLayer` under its own argument names ("order").
"""

from __future__ import annotations

from dataclasses import dataclass

from hornn_dist.checks import check_at_most, check_choice, check_count
from hornn_dist.errors import ConfigError

ARCHS = ("hornn", "rnn", "lstm", "gru")
POOLINGS = ("sum", "max", "fofe", "gated")
ACTIVATIONS = ("tanh", "sigmoid", "relu")
RNN_ACTIVATIONS = ("tanh", "relu")  # what torch.nn.RNN offers
ENGINES = ("auto", "fused", "loop", "triton")
RECURRENCE_PRECISIONS = ("fp32", "autocast", "fp16")  # what a HORNN layer runs in under autocast
RECURRENT_INITS = ("paper", "scaled")  # how the feedback weights are drawn (models/init.py)
# keys that pick how the same parameters are computed, not what they are: a resume may change
# them (e.g. a run trained with the triton engine on a GPU, resumed on a CPU)
EXECUTION_MODEL_KEYS = ("engine", "recurrence_precision")
# Upper bounds far past any model that trains, below sizes whose shapes overflow an index or
# whose first allocation is terabytes (the memory check judges what lies between)
MAX_ORDER = 4096
MAX_WIDTH = 1 << 20  # model.hidden_size, model.embedding_size
MAX_LAYERS = 1024
MAX_INIT_STD = 100.0


@dataclass
class ModelConfig:
    """Hyper-parameters of the language model (paper §3, §4)."""

    arch: str = "hornn"  # hornn | rnn | lstm | gru
    pooling: str = "fofe"  # sum (eq. 3) | max (eq. 4) | fofe (eq. 5) | gated (eq. 6-7)
    order: int = 3  # N, number of feedback paths
    alpha: float = 0.6  # FOFE forgetting factor, in (0, 1)
    hidden_size: int = 400
    embedding_size: int = 0  # 0 means equal to hidden_size
    num_layers: int = 1
    activation: str = "tanh"  # tanh | sigmoid | relu (hornn and rnn)
    init_std: float = 0.1  # weights ~ N(0, init_std), as in §4
    # dropout on the non-recurrent connections (Zaremba et al. 2014): after the embedding,
    # between layers and before the output layer; never on the recurrent paths. 0 = off (paper)
    dropout: float = 0.0
    tie_weights: bool = False  # the output layer reuses the embedding matrix (needs E = H)
    # feedback weights: paper (N(0, init_std), §4) | scaled (the pooled feedback's gain capped
    # at 1 whatever H, order and pooling); the rule: hornn_dist/models/init.py; README "Recipes"
    recurrent_init: str = "scaled"
    # auto (triton on CUDA under mixed precision at small batch x hidden, else fused) | fused
    # (one cuBLAS GEMM per step) | triton (one Triton kernel per step, CUDA only) | loop (plain
    # autograd, slow reference); resolved once per run: hornn_dist/models/plan.py
    engine: str = "auto"
    # under mixed precision (CUDA), each HORNN layer runs in: fp16 (whatever the autocast dtype,
    # as cuDNN runs its RNNs; on CPU: autocast's) | autocast (its dtype) | fp32 (TF32 GEMMs).
    # GEMMs and sums accumulate in fp32. Without mixed precision all are the same fp32 math.
    # The rule: precision.layer_dtype; speed and rounding of each: benchmarks/README.md.
    recurrence_precision: str = "fp16"

    def validate(self) -> None:
        """Raise ConfigError naming the first key whose value is out of range."""
        check_choice("model.arch", self.arch, ARCHS)
        check_choice("model.pooling", self.pooling, POOLINGS)
        check_choice("model.activation", self.activation, ACTIVATIONS)
        if self.arch == "rnn":
            check_choice("model.activation", self.activation, RNN_ACTIVATIONS, " for arch rnn")
        check_choice("model.engine", self.engine, ENGINES)
        check_choice("model.recurrent_init", self.recurrent_init, RECURRENT_INITS)
        check_choice("model.recurrence_precision", self.recurrence_precision, RECURRENCE_PRECISIONS)
        check_count("model.order", self.order)
        check_at_most("model.order", self.order, MAX_ORDER)
        check_alpha("model.alpha", self.alpha)
        check_count("model.hidden_size", self.hidden_size)
        check_at_most("model.hidden_size", self.hidden_size, MAX_WIDTH)
        check_count("model.num_layers", self.num_layers)
        check_at_most("model.num_layers", self.num_layers, MAX_LAYERS)
        check_count("model.embedding_size", self.embedding_size, 0, " (0 = hidden_size)")
        check_at_most("model.embedding_size", self.embedding_size, MAX_WIDTH)
        if not 0 < self.init_std <= MAX_INIT_STD:
            raise ConfigError(
                f"model.init_std must be in (0, {MAX_INIT_STD:g}], got {self.init_std}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout must be in [0, 1), got {self.dropout!r}")
        if self.tie_weights and self.embedding_size not in (0, self.hidden_size):
            raise ConfigError(
                f"model.tie_weights = true needs model.embedding_size equal to model.hidden_size, "
                f"got {self.embedding_size} and {self.hidden_size}; set model.embedding_size = 0 "
                "(= hidden_size) or model.tie_weights = false"
            )


def check_alpha(key: str, value: float) -> None:
    """Raise ConfigError (a ValueError) unless value, FOFE's forgetting factor, is in (0, 1)."""
    if not 0.0 < value < 1.0:
        raise ConfigError(f"{key} must be in (0, 1), got {value!r}")
