"""The `[model]` section of a run config, its tables of choices and the rules that check a value.

Each table, rule and default is written once here: `ModelConfig.validate` applies the rules
under the config's key names ("model.order"), and a `HornnLayer` is built from a ModelConfig
(models/hornn.py), so a new key is its field here and its use where it acts. The model's
words (the start-up line, the model card) and the settings no CUDA graph has run yet are
the section's own methods, so no other module names its keys for them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hornn_dist.models.output_layer import MAX_DIV_VALUE, OUTPUT_LAYERS
from hornn_dist.models.poolings import DEFAULT, get_pooling, pooling_names
from hornn_dist.run.on_resume import EXECUTION, on_resume
from hornn_dist.util.checks import check_at_most, check_choice, check_count
from hornn_dist.util.errors import ConfigError

ARCHS = ("hornn", "rnn", "lstm", "gru")
ACTIVATIONS = ("tanh", "sigmoid", "relu")
RNN_ACTIVATIONS = ("tanh", "relu")  # what torch.nn.RNN offers
ENGINES = ("auto", "fused", "loop", "triton")
RECURRENCE_PRECISIONS = ("fp32", "autocast", "fp16")  # what a HORNN layer runs in under autocast
RECURRENT_INITS = ("paper", "scaled")  # how the feedback weights are drawn (models/init.py)
DROPOUT_MASKS = ("step", "sequence")  # a new mask per token, or one per stream for a window
# Upper bounds far past any model that trains, below sizes whose shapes overflow an index or
# whose first allocation is terabytes (the memory check judges what lies between)
MAX_ORDER = 4096
MAX_WIDTH = 1 << 20  # model.hidden_size, model.embedding_size
MAX_LAYERS = 1024
MAX_INIT_STD = 100.0
MAX_FEEDBACK_SCALE = 10.0


@dataclass
class ModelConfig:
    """Hyper-parameters of the language model (paper §3, §4)."""

    arch: str = "hornn"  # hornn | rnn | lstm | gru
    # sum (eq. 3) | max (eq. 4) | fofe (eq. 5) | gated (eq. 6-7), or one registered in
    # models/poolings.py
    pooling: str = DEFAULT
    order: int = 3  # N, number of feedback paths
    alpha: float = 0.6  # FOFE forgetting factor, in (0, 1)
    # c in h_t = f(W_in x_t + b + c·pool(W_hn h_{t-n})): every feedback path W_hn (not gated's
    # gate weights W2n) is multiplied by c in the forward, so c sets the feedback's size at init
    # (models/init.py counts it) and c² its step under SGD. At order 1 it is FOFE's α at order 1:
    # the RNN with its feedback scaled. For torch's rnn, lstm and gru: every weight_hh (all of
    # a gate's recurrent matrices) times c. In (0, 10]; 1 = the paper's model
    feedback_scale: float = 1.0
    hidden_size: int = 400  # H, hidden units per layer
    embedding_size: int = 0  # 0 means equal to hidden_size
    num_layers: int = 1  # stacked recurrent layers
    # tanh | sigmoid | relu (hornn and rnn); see docs/training.md, "The default recipe"
    activation: str = "tanh"
    init_std: float = 0.1  # weights ~ N(0, init_std), as in §4
    # dropout on the non-recurrent connections (Zaremba et al. 2014): after the embedding,
    # between layers, before the output layer; never on a recurrent path. In [0, 1); 0 = off,
    # as in the paper
    dropout: float = 0.0
    # step: a new mask for every token (Zaremba et al.; torch's nn.Dropout); sequence: one mask
    # per stream, shared by every step of a window, at each place dropout drops ("variational"
    # dropout, Gal & Ghahramani 2016; AWD-LSTM's locked dropout)
    dropout_mask: str = "step"
    # DropConnect on the recurrent weights (Wan et al. 2013; AWD-LSTM's weight drop, Merity et
    # al. 2017): in training, one Bernoulli mask per forward zeroes entries of every feedback
    # matrix (weight_hh: the HORNN's W_hn and gated's W2n, the RNN/LSTM/GRU's) and scales the
    # rest by 1/(1-p); every stream and step of the window sees the same weights. In [0, 1); 0 = off
    weight_drop: float = 0.0
    # the output layer reuses the embedding matrix (one tensor, saved once; with
    # `output_layer = "adaptive"`, the head's rows of its shortlist words); needs
    # `embedding_size` = `hidden_size` (or 0)
    tie_weights: bool = False
    # feedback weights (HORNN paths W_hn, the RNN's weight_hh): `scaled` draws them at
    # min(init_std, 1/√(H·Σₙwₙ²)), wₙ = each path's weight in the pool at init (1 for sum/max,
    # αⁿ fofe, ½ gated), so the pooled feedback starts at gain ≤ 1; `paper`: N(0, init_std)
    # like every weight. LSTM/GRU: init_std either way. The rule: hornn_dist/models/init.py;
    # why: docs/training.md, "The default recipe"
    recurrent_init: str = "scaled"
    # auto (triton on CUDA under bf16/fp16 when batch per process × hidden_size ≤ 32768, where
    # it was measured faster; fused otherwise) | fused (one cuBLAS GEMM per step) | triton (one
    # Triton kernel per step, CUDA only) | loop (plain autograd, slow reference); resolved once
    # per run: hornn_dist/models/plan.py
    engine: str = on_resume(EXECUTION, "auto")
    # under `train.mixed_precision` bf16/fp16: `fp16` runs each HORNN layer (input GEMM and
    # recurrence) in fp16 whatever the autocast dtype, as PyTorch runs cuDNN's RNNs (on a CPU:
    # the autocast dtype); `autocast` runs it in the autocast dtype; `fp32` keeps its state and
    # element-wise math in fp32 (TF32 GEMMs on CUDA). GEMMs and sums accumulate in fp32 in all
    # three; without mixed precision all are the same fp32 math. The rule:
    # precision.layer_dtype; speed and rounding of each: docs/performance.md
    recurrence_precision: str = on_resume(EXECUTION, "fp16")
    # how the last hidden states become the loss: `plain` (Linear(H, V) -> logits -> float32
    # cross-entropy, as PyTorch's word_language_model) | `fused` (the same weights, tied or
    # not, and the same checkpoints; the loss and its gradients computed in chunks of tokens,
    # never the float32 logits: faster and smaller at a large vocabulary) | `adaptive` (the
    # adaptive softmax of Grave et al. 2017: a head over the frequent words and one entry per
    # cluster of rarer words, each cluster behind a smaller projection; tied, the head's
    # shortlist rows are the embedding's). The layers: hornn_dist/models/output_layer.py; speed
    # and memory: benchmarks/README.md
    output_layer: str = "plain"
    # `adaptive` only: the word ids where each cluster starts, increasing, from 1 and below the
    # vocabulary size (ids are ordered by training count: the head holds the words below the
    # first); [] = where the most frequent words cover 90% and 98% of the training tokens,
    # counted when the run starts and saved in its config.toml (a run saved with [] before
    # that: 5% and 20% of the vocabulary)
    adaptive_cutoffs: list[int] = field(default_factory=list)
    # `adaptive` only: cluster i (from 1) projects the hidden state to hidden_size / div^i units
    # (at least 1). In [1, 64]
    adaptive_div_value: float = 4.0

    def validate(self) -> None:
        """Raise ConfigError naming the first key whose value is out of range."""
        check_choice("model.arch", self.arch, ARCHS)
        check_choice("model.pooling", self.pooling, pooling_names())
        check_choice("model.activation", self.activation, ACTIVATIONS)
        if self.arch == "rnn":
            check_choice("model.activation", self.activation, RNN_ACTIVATIONS, " for arch rnn")
        check_choice("model.engine", self.engine, ENGINES)
        kernels = get_pooling(self.pooling).engines
        if self.arch == "hornn" and self.engine != "auto" and self.engine not in kernels:
            raise ConfigError(
                f"model.engine = {self.engine!r} has no kernel for model.pooling = "
                f"{self.pooling!r}; set model.engine to one of auto, {', '.join(kernels)}"
            )
        check_choice("model.recurrent_init", self.recurrent_init, RECURRENT_INITS)
        check_choice("model.dropout_mask", self.dropout_mask, DROPOUT_MASKS)
        check_choice("model.recurrence_precision", self.recurrence_precision, RECURRENCE_PRECISIONS)
        check_count("model.order", self.order)
        check_at_most("model.order", self.order, MAX_ORDER)
        check_alpha("model.alpha", self.alpha)
        check_feedback_scale("model.feedback_scale", self.feedback_scale)
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
        check_drop_rate("model.dropout", self.dropout)
        check_drop_rate("model.weight_drop", self.weight_drop)
        check_choice("model.output_layer", self.output_layer, OUTPUT_LAYERS)
        check_cutoffs("model.adaptive_cutoffs", self.adaptive_cutoffs)
        if self.adaptive_cutoffs and self.output_layer != "adaptive":
            raise ConfigError(
                f'model.adaptive_cutoffs applies to model.output_layer = "adaptive" only, got '
                f"{self.adaptive_cutoffs} with {self.output_layer!r}; set it to [] or "
                'model.output_layer = "adaptive"'
            )
        if not 1.0 <= self.adaptive_div_value <= MAX_DIV_VALUE:
            raise ConfigError(
                f"model.adaptive_div_value must be in [1, {MAX_DIV_VALUE:g}], got "
                f"{self.adaptive_div_value!r}"
            )
        if self.tie_weights and self.embedding_size not in (0, self.hidden_size):
            raise ConfigError(
                f"model.tie_weights = true needs model.embedding_size equal to model.hidden_size, "
                f"got {self.embedding_size} and {self.hidden_size}; set model.embedding_size = 0 "
                "(= hidden_size) or model.tie_weights = false"
            )

    def label(self) -> str:
        """Return the model's name in the start-up log: "hornn/fofe order 3", "lstm", its
        feedback scale after it where not 1 ("hornn/max order 3, feedback x0.3")."""
        name = f"hornn/{self.pooling} order {self.order}" if self.arch == "hornn" else self.arch
        return name + (f", feedback x{self.feedback_scale:g}" if self.feedback_scale != 1 else "")

    def describe(self) -> str:
        """Return the model in words (the exported model card's): "HORNN-3 with fofe pooling,
        1 layer of 128 tanh units, word vectors of 128", then each setting beyond the paper's."""
        hornn = self.arch == "hornn"
        kind = f"HORNN-{self.order} with {self.pooling} pooling" if hornn else self.arch.upper()
        units = f"{self.activation} units" if self.arch in ("hornn", "rnn") else "units"
        layers = f"{self.num_layers} layer{'s' if self.num_layers > 1 else ''}"
        return (
            f"{kind}, {layers} of {self.hidden_size} {units}, "
            f"word vectors of {self.embedding_size or self.hidden_size}"
            + (" tied to the output layer" if self.tie_weights else "")
            + (f", dropout {self.dropout:g} in training" if self.dropout else "")
            + (f", weight drop {self.weight_drop:g} in training" if self.weight_drop else "")
            + (f", feedback scaled by {self.feedback_scale:g}" if self.feedback_scale != 1 else "")
            + (", an adaptive softmax output layer" if self.output_layer == "adaptive" else "")
        )

    def graph_unavailable_reason(self) -> str | None:
        """Return why this model's training step is not yet run under CUDA graphs (a setting
        whose path no graphed step has run), or None when it may be."""
        if self.dropout and self.dropout_mask == "sequence":
            return 'model.dropout_mask = "sequence" (not yet run under CUDA graphs)'
        if self.weight_drop:
            return "model.weight_drop > 0 (not yet run under CUDA graphs)"
        if self.feedback_scale != 1.0:
            return "model.feedback_scale != 1 (not yet run under CUDA graphs)"
        if self.output_layer == "adaptive":  # picks each cluster's tokens by value
            return 'model.output_layer = "adaptive" (its shapes depend on the data)'
        if self.output_layer == "fused":
            return 'model.output_layer = "fused" (not yet run under CUDA graphs)'
        return None


def check_cutoffs(key: str, value: list[int]) -> None:
    """Raise ConfigError (a ValueError) unless value is a list of increasing word ids >= 1 (the
    vocabulary size, which bounds them, is checked where the model is built)."""
    if any(cut < 1 for cut in value) or any(a >= b for a, b in itertools.pairwise(value)):
        raise ConfigError(f"{key} must be increasing word ids >= 1, got {value!r}")


def check_drop_rate(key: str, value: float) -> None:
    """Raise ConfigError (a ValueError) unless value, a dropout probability, is in [0, 1)."""
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"{key} must be in [0, 1), got {value!r}")


def check_alpha(key: str, value: float) -> None:
    """Raise ConfigError (a ValueError) unless value, FOFE's forgetting factor, is in (0, 1)."""
    if not 0.0 < value < 1.0:
        raise ConfigError(f"{key} must be in (0, 1), got {value!r}")


def check_feedback_scale(key: str, value: float) -> None:
    """Raise ConfigError (a ValueError) unless value, the feedback paths' multiplier, is in
    (0, MAX_FEEDBACK_SCALE]."""
    if not 0.0 < value <= MAX_FEEDBACK_SCALE:
        raise ConfigError(f"{key} must be in (0, {MAX_FEEDBACK_SCALE:g}], got {value!r}")
