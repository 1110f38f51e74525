"""The `[model]` section of a run config: which recurrent language model to build."""

from __future__ import annotations

from dataclasses import dataclass

from hornn_dist.errors import ConfigError

ARCHS = ("hornn", "rnn", "lstm", "gru")
POOLINGS = ("sum", "max", "fofe", "gated")
ACTIVATIONS = ("tanh", "sigmoid", "relu")
ENGINES = ("auto", "fused", "loop", "triton")
RECURRENCE_PRECISIONS = ("fp32", "autocast", "fp16")


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
    # auto (triton on CUDA under mixed precision at small batch x hidden, else fused) | fused
    # (one cuBLAS GEMM per step) | triton (one Triton kernel per step, CUDA only) | loop (plain
    # autograd, slow reference)
    engine: str = "auto"
    # under mixed precision (CUDA), each HORNN layer runs in: fp16 (whatever the autocast dtype,
    # as cuDNN runs its RNNs; on CPU: autocast's) | autocast (its dtype) | fp32 (TF32 GEMMs).
    # GEMMs and sums accumulate in fp32. Without mixed precision all are the same fp32 math.
    # Speed and rounding of each: hornn_dist/models/recurrence.py, benchmarks/README.md.
    recurrence_precision: str = "fp16"

    def validate(self) -> None:
        """Raise ConfigError naming the first key whose value is out of range."""
        _choice("model.arch", self.arch, ARCHS)
        _choice("model.pooling", self.pooling, POOLINGS)
        _choice("model.activation", self.activation, ACTIVATIONS)
        _choice("model.engine", self.engine, ENGINES)
        _choice("model.recurrence_precision", self.recurrence_precision, RECURRENCE_PRECISIONS)
        if self.order < 1:
            raise ConfigError(f"model.order must be >= 1, got {self.order}")
        if not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"model.alpha must be in (0, 1), got {self.alpha}")
        for key in ("hidden_size", "num_layers"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.{key} must be >= 1, got {getattr(self, key)}")
        if self.embedding_size < 0:
            raise ConfigError(
                f"model.embedding_size must be >= 0 (0 = hidden_size), got {self.embedding_size}"
            )
        if self.init_std <= 0:
            raise ConfigError(f"model.init_std must be > 0, got {self.init_std}")


def _choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {', '.join(allowed)}; got {value!r}")
