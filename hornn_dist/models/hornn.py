"""One Higher Order RNN layer (paper §3, eq. 3-7): parameters and forward pass.

Its settings are the `[model]` section it is built from (`ModelConfig`, models/config.py); how
it runs (engine, precision) is its `LayerPlan` (plan.py), resolved once when it is built.

    h_t = f( W_in x_t + b + pool_{n=1..N}( W_hn h_{t-n} ) )

    pooling  eq  feedback into step t
    sum      3   Σ_n W_hn h_{t-n}
    max      4   max_n (W_hn h_{t-n}), element-wise; gradient to the winner, ties to the lowest n
    fofe     5   Σ_n α^n W_hn h_{t-n}
    gated    6-7 Σ_n r_n ⊙ (W_hn h_{t-n}),  r_n = σ(W1n x_t + W2n h_{t-n} + c_n)

The gate bias c_n is ours: eq. 7 has none; it is one vector per path, initialised to zero,
so a fresh layer computes exactly eq. 7. So is `feedback_scale` c (`model.feedback_scale`, 1
in the paper): the engines get c·W_hn in place of each W_hn, so the pooled feedback is c times
the pool above for every pooling (max too, c > 0); gated's gate weights W2n stay as they are.

Parameter layout (the trainer's per-path gradient norms and max-norm rely on it), with
K = N, or 2N for gated, and tensors multiplied from the right (x @ W, the transpose of the
paper's W x):

    weight_ih  (I, H)        [W_in^T]                     sum / max / fofe
               (I, (1+N)·H)  [W_in^T | W1_1^T .. W1_N^T]  gated
    weight_hh  (H, K·H)      [W_h1^T .. W_hN^T (| W2_1^T .. W2_N^T)]
    bias       (H,)          b, inside f
    gate_bias  (N·H,)        [c_1 .. c_N]                 gated only

so U_t = h_t @ weight_hh holds block n-1 = (W_hn h_t)^T and, for gated, block N+n-1 =
(W2n h_t)^T. History is one tensor (N, B, H): index N-1 is h_{t-1} (newest), index 0 is h_{t-N}.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hornn_dist.models.config import ModelConfig
from hornn_dist.models.plan import LayerPlan, checked_plan
from hornn_dist.models.poolings import get_pooling
from hornn_dist.models.precision import recurrence_dtype
from hornn_dist.models.recurrence import fused_scan, input_projection_autocast, loop_scan
from hornn_dist.util.checks import check_count


def drop_connect(weight: Tensor, p: float, training: bool) -> Tensor:
    """Return weight with each entry zeroed with probability p and the rest scaled by 1/(1-p)
    (DropConnect, `model.weight_drop`) in training; weight itself otherwise, with no draw."""
    return F.dropout(weight, p, training=True) if training and p > 0 else weight


def scale_feedback(weight_hh: Tensor, scale: float, path_columns: int) -> Tensor:
    """Return weight_hh with its first path_columns columns (the W_hn^T blocks) times scale;
    weight_hh itself at scale 1."""
    if scale == 1.0:
        return weight_hh
    if path_columns == weight_hh.shape[1]:
        return weight_hh * scale
    return torch.cat([weight_hh[:, :path_columns] * scale, weight_hh[:, path_columns:]], 1)


def hornn_forward(
    x: Tensor,
    history: Tensor,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias: Tensor,
    gate_bias: Tensor | None,
    *,
    pooling: str,
    alpha: float,
    activation: str,
    plan: LayerPlan,
) -> tuple[Tensor, Tensor]:
    """Return (outputs (T, B, H), new history (N, B, H)) of one HORNN layer (eq. 3-7), run by
    the plan's engine in its precision."""
    N = history.shape[0]
    T, B, _ = x.shape
    # All input-side terms for every token in one GEMM: W_in x_t (+ W1n x_t for gated).
    # Under autocast this GEMM may run in bf16/fp16 (fp16 for precision "fp16"); what follows
    # runs in `dtype`, or in the precision's low dtype inside the engine.
    dtype = recurrence_dtype(x, history, weight_ih, weight_hh)
    with input_projection_autocast(plan.precision, x):
        xp = (x.reshape(T * B, x.shape[2]) @ weight_ih).view(T, B, weight_ih.shape[1])  # (T, B, ·)
    biases = bias if gate_bias is None else torch.cat([bias, gate_bias])
    xp = xp + biases.to(dtype)  # in `dtype` (type promotion); b inside f, gate biases inside σ
    args = (xp, history, weight_hh, pooling, alpha, activation)
    if plan.engine == "fused":
        out = fused_scan(*args, plan.precision)
    elif plan.engine == "triton":  # imported here: the triton package is optional
        from hornn_dist.models import triton_scan

        out = triton_scan.triton_scan(*args, plan.precision)
    else:  # the plain reference: always the recurrence dtype
        out = loop_scan(*args)  # (T, B, H)
    if T >= N:  # the newest N outputs: a view, no copy
        return out, out[T - N :]
    return out, torch.cat([history.to(out.dtype), out], 0)[-N:]  # (N, B, H)


class HornnLayer(nn.Module):
    """An N-th order HORNN layer: forward(x (T, B, I), history (N, B, H) | None) -> (out, hist).

    Built from the [model] section, `cfg` (its width model.hidden_size): its settings are that
    section's keys, read where they are used, and no default is the layer's own."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int | None = None,
        *,
        cfg: ModelConfig | None = None,
        plan: LayerPlan | None = None,
        **keys: Any,
    ) -> None:
        """Build the layer of `cfg` (a model's [model] section), or of a layer alone from
        hidden_size and [model] keys by name (`layer_config`); raise ConfigError naming the
        key of a bad value. plan: how it runs, for cfg's engine and precision (`checked_plan`:
        None makes the layer's own, with no device check, "auto" being "fused")."""
        super().__init__()
        check_count("input_size", input_size)
        if cfg is None:
            cfg = layer_config(hidden_size, plan, **keys)
        elif hidden_size is not None or keys:
            raise ValueError("pass cfg, or hidden_size and [model] keys by name: not both")
        cfg.validate()
        self.cfg = cfg  # every setting of the layer
        self.plan = checked_plan(cfg, plan)  # how the forward runs: engine and precision
        # the layer's shape, read by the model, its path norms and max-norm
        self.input_size, self.hidden_size, self.order = input_size, cfg.hidden_size, cfg.order
        pooling = get_pooling(cfg.pooling)
        self.gated = pooling.gated
        N, H = cfg.order, cfg.hidden_size
        n_in, n_hh = pooling.weight_blocks(N)
        self.weight_ih = nn.Parameter(torch.empty(input_size, n_in * H))  # (I, (1[+N])·H)
        self.weight_hh = nn.Parameter(torch.empty(H, n_hh * H))  # (H, K·H)
        self.bias = nn.Parameter(torch.empty(H))  # (H,)
        self.gate_bias = nn.Parameter(torch.empty(N * H)) if self.gated else None  # (N·H,)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw weights from N(0, model.init_std) and zero the biases (paper §4)."""
        init_std = self.cfg.init_std
        with torch.no_grad():
            self.weight_ih.normal_(0.0, init_std)
            self.weight_hh.normal_(0.0, init_std)
            self.bias.zero_()
            if self.gate_bias is not None:
                self.gate_bias.zero_()

    def init_history(
        self,
        batch_size: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> Tensor:
        """Return a zero history (N, B, H)."""
        return torch.zeros(self.order, batch_size, self.hidden_size, device=device, dtype=dtype)

    def path_block(self, n: int) -> slice:
        """Return the column slice of weight_hh holding W_hn^T (n = 1..N)."""
        return slice((n - 1) * self.hidden_size, n * self.hidden_size)

    def gate_blocks(self, n: int) -> tuple[slice, slice]:
        """Return the column slices (in weight_ih, in weight_hh) of W1n^T and W2n^T (gated only)."""
        H, N = self.hidden_size, self.order
        return slice(n * H, (n + 1) * H), slice((N + n - 1) * H, (N + n) * H)

    def forward(self, x: Tensor, history: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Return (outputs (T, B, H), new history (N, B, H)); history None means zeros."""
        if x.dim() != 3 or x.shape[2] != self.input_size:
            raise ValueError(f"x must have shape (T, B, {self.input_size}), got {tuple(x.shape)}")
        B = x.shape[1]
        want = (self.order, B, self.hidden_size)
        if history is None:
            history = self.init_history(B, x.device, self.weight_hh.dtype)
        elif tuple(history.shape) != want:
            raise ValueError(
                f"history must have shape (order, batch, hidden) = {want}, "
                f"got {tuple(history.shape)}"
            )
        cfg = self.cfg
        weight_hh = drop_connect(self.weight_hh, cfg.weight_drop, self.training)
        return hornn_forward(
            x,
            history,
            self.weight_ih,
            scale_feedback(weight_hh, cfg.feedback_scale, self.order * self.hidden_size),
            self.bias,
            self.gate_bias,
            pooling=cfg.pooling,
            alpha=cfg.alpha,
            activation=cfg.activation,
            plan=self.plan,
        )

    def extra_repr(self) -> str:
        """Return the layer's settings for print(model)."""
        cfg = self.cfg
        return (
            f"{self.input_size}, {self.hidden_size}, order={self.order}, pooling={cfg.pooling}, "
            f"alpha={cfg.alpha}, activation={cfg.activation}, engine={self.plan.engine}, "
            f"precision={self.plan.precision}"
            + (f", weight_drop={cfg.weight_drop}" if cfg.weight_drop else "")
            + (f", feedback_scale={cfg.feedback_scale}" if cfg.feedback_scale != 1 else "")
        )


def layer_config(
    hidden_size: int | None,
    plan: LayerPlan | None = None,
    precision: str | None = None,
    **keys: Any,
) -> ModelConfig:
    """Return the [model] section of a layer alone: hidden_size and `keys` by name, every key
    not given (or None) ModelConfig's default; `precision` is model.recurrence_precision, and a
    plan's engine and precision stand for those not given."""
    if hidden_size is None:
        raise TypeError("HornnLayer needs cfg, or hidden_size and [model] keys by name")
    given = {key: value for key, value in keys.items() if value is not None}
    if precision is not None:  # the benchmarks' and tests' word for it
        given["recurrence_precision"] = precision
    if plan is not None:
        given = {"engine": plan.configured, "recurrence_precision": plan.precision, **given}
    return ModelConfig(**{**given, "hidden_size": hidden_size})
