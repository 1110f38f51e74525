"""One Higher Order RNN layer (paper §3, eq. 3-7): parameters, argument checks, forward pass.

    h_t = f( W_in x_t + b + pool_{n=1..N}( W_hn h_{t-n} ) )

    pooling  eq  feedback into step t
    sum      3   Σ_n W_hn h_{t-n}
    max      4   max_n (W_hn h_{t-n}), element-wise; gradient to the winner, ties to the lowest n
    fofe     5   Σ_n α^n W_hn h_{t-n}
    gated    6-7 Σ_n r_n ⊙ (W_hn h_{t-n}),  r_n = σ(W1n x_t + W2n h_{t-n} + c_n)

The gate bias c_n is ours: eq. 7 has none; it is one vector per path, initialised to zero,
so a fresh layer computes exactly eq. 7.

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

import functools
import warnings

import torch
from torch import Tensor, nn

from hornn_dist.models.recurrence import (
    ACTIVATIONS,
    POOLINGS,
    PRECISIONS,
    fused_scan,
    input_projection_autocast,
    loop_scan,
    recurrence_dtype,
)

ENGINES = ("auto", "fused", "loop", "triton")
# engine "auto" runs "triton" up to this many outputs per step (B·H): on one H100 under bf16
# autocast it beat "fused" at B 20 x H 400 (1.03-1.07x of cuDNN LSTM, against 0.86-0.90x;
# layers in fp16) and lost at B 128 x H 1024 (0.97-0.99x against 1.03-1.07x);
# benchmarks/README.md. Between them: a guess.
AUTO_TRITON_MAX_OUTPUTS = 2**15


def check_hornn_args(
    order: int, pooling: str, alpha: float, activation: str, engine: str, precision: str
) -> None:
    """Raise a one-line ValueError naming the first bad argument and the allowed values."""
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"order must be an integer >= 1, got {order!r}")
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}; got {pooling!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}; got {activation!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")


def pick_engine(engine: str, device: torch.device, batch: int, hidden: int, autocast: bool) -> str:
    """Return the engine that runs: "auto" is "triton" on CUDA under autocast where the triton
    engine can run and B·H <= AUTO_TRITON_MAX_OUTPUTS (where it is the faster one), else "fused";
    any other engine as given."""
    if engine != "auto":
        return engine
    if device.type != "cuda" or not autocast or batch * hidden > AUTO_TRITON_MAX_OUTPUTS:
        return "fused"
    from hornn_dist.models import triton_scan  # the triton package is optional

    return "triton" if triton_scan.unavailable_reason(device) is None else "fused"


@functools.cache
def _warn_triton_fallback(reason: str) -> None:
    """Say once per reason that engine 'triton' runs as 'fused' here."""
    warnings.warn(f"{reason}; running engine 'fused' instead", stacklevel=3)


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
    engine: str = "auto",
    precision: str = "fp16",
) -> tuple[Tensor, Tensor]:
    """Return (outputs (T, B, H), new history (N, B, H)) of one HORNN layer (eq. 3-7)."""
    N, _, H = history.shape
    T, B, _ = x.shape
    # All input-side terms for every token in one GEMM: W_in x_t (+ W1n x_t for gated).
    # Under autocast this GEMM may run in bf16/fp16 (fp16 for precision "fp16"); what follows
    # runs in `dtype`, or in the precision's low dtype inside the engine.
    dtype = recurrence_dtype(x, history, weight_ih, weight_hh)
    with input_projection_autocast(precision, x):
        xp = (x.reshape(T * B, x.shape[2]) @ weight_ih).view(T, B, weight_ih.shape[1])  # (T, B, ·)
    biases = bias if gate_bias is None else torch.cat([bias, gate_bias])
    xp = xp + biases.to(dtype)  # in `dtype` (type promotion); b inside f, gate biases inside σ
    device = xp.device
    engine = pick_engine(engine, device, B, H, torch.is_autocast_enabled(device.type))
    if engine == "fused":
        out = fused_scan(xp, history, weight_hh, pooling, alpha, activation, precision)
    elif engine == "triton":  # imported here: the triton package is optional
        from hornn_dist.models import triton_scan

        reason = triton_scan.unavailable_reason(xp.device)
        scan = triton_scan.triton_scan if reason is None else fused_scan
        if reason is not None:  # the same function: e.g. a model trained on a GPU, run on a CPU
            _warn_triton_fallback(reason)
        out = scan(xp, history, weight_hh, pooling, alpha, activation, precision)
    else:  # the plain reference: always the recurrence dtype
        out = loop_scan(xp, history, weight_hh, pooling, alpha, activation)  # (T, B, H)
    if T >= N:  # the newest N outputs: a view, no copy
        return out, out[T - N :]
    return out, torch.cat([history.to(out.dtype), out], 0)[-N:]  # (N, B, H)


class HornnLayer(nn.Module):
    """An N-th order HORNN layer: forward(x (T, B, I), history (N, B, H) | None) -> (out, hist)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        order: int = 3,
        pooling: str = "fofe",
        alpha: float = 0.6,
        activation: str = "tanh",
        engine: str = "auto",
        init_std: float = 0.1,
        precision: str = "fp16",
    ) -> None:
        super().__init__()
        check_hornn_args(order, pooling, alpha, activation, engine, precision)
        self.precision = precision
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value!r}")
        self.input_size, self.hidden_size, self.order = input_size, hidden_size, order
        self.pooling, self.alpha, self.activation, self.engine = pooling, alpha, activation, engine
        self.gated = pooling == "gated"
        n_in = 1 + order if self.gated else 1
        n_hh = 2 * order if self.gated else order
        H = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(input_size, n_in * H))  # (I, (1[+N])·H)
        self.weight_hh = nn.Parameter(torch.empty(H, n_hh * H))  # (H, K·H)
        self.bias = nn.Parameter(torch.empty(H))  # (H,)
        self.gate_bias = nn.Parameter(torch.empty(order * H)) if self.gated else None  # (N·H,)
        self.reset_parameters(init_std)

    def reset_parameters(self, init_std: float = 0.1) -> None:
        """Draw weights from N(0, init_std) and zero the biases (paper §4)."""
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
        return hornn_forward(
            x,
            history,
            self.weight_ih,
            self.weight_hh,
            self.bias,
            self.gate_bias,
            pooling=self.pooling,
            alpha=self.alpha,
            activation=self.activation,
            engine=self.engine,
            precision=self.precision,
        )

    def extra_repr(self) -> str:
        """Return the layer's settings for print(model)."""
        return (
            f"{self.input_size}, {self.hidden_size}, order={self.order}, pooling={self.pooling}, "
            f"alpha={self.alpha}, activation={self.activation}, engine={self.engine}, "
            f"precision={self.precision}"
        )
