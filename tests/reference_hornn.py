"""A plain HORNN reference straight from paper eq. 3-7: one step at a time, one matrix per path.

The test oracle for both engines of `hornn_dist.models`. Matrices are taken from a layer's
parameters by slicing and transposed into the paper's convention (W is out × in, h_t = f(W x)),
then used one by one; nothing is fused, cached or reordered.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hornn_dist.models.hornn import HornnLayer


def paper_matrices(layer: HornnLayer) -> dict[str, object]:
    """Return the layer's parameters as the paper's matrices W_in, W_h[n], W1[n], W2[n], b, c[n]."""
    H, N = layer.hidden_size, layer.order
    mats: dict[str, object] = {
        "W_in": layer.weight_ih[:, :H].T,  # (H, I)
        "W_h": {n: layer.weight_hh[:, (n - 1) * H : n * H].T for n in range(1, N + 1)},  # (H, H)
        "b": layer.bias,
    }
    if layer.cfg.pooling == "gated":
        mats["W1"] = {n: layer.weight_ih[:, n * H : (n + 1) * H].T for n in range(1, N + 1)}
        mats["W2"] = {
            n: layer.weight_hh[:, (N + n - 1) * H : (N + n) * H].T for n in range(1, N + 1)
        }
        mats["c"] = {n: layer.gate_bias[(n - 1) * H : n * H] for n in range(1, N + 1)}
    return mats


def reference_layer(
    layer: HornnLayer, x: Tensor, history: Tensor, mats: dict[str, object] | None = None
) -> tuple[Tensor, Tensor]:
    """Return (outputs (T, B, H), new history (N, B, H)) computed one step and one path at a time.

    `mats` (as from `paper_matrices`) replaces the layer's parameters when given.
    """
    m = paper_matrices(layer) if mats is None else mats
    N, pooling, alpha = layer.order, layer.cfg.pooling, layer.cfg.alpha
    f = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu}[layer.cfg.activation]

    def mv(W: Tensor, v: Tensor) -> Tensor:
        """W v for each row of the batch: (H, I) x (B, I) -> (B, H)."""
        return torch.einsum("oi,bi->bo", W, v)

    h = {-N + k: history[k] for k in range(N)}  # h[s] for s = -N .. -1; history[N-1] = h_{-1}
    outputs = []
    for t in range(x.shape[0]):
        x_t = x[t]
        terms = {n: mv(m["W_h"][n], h[t - n]) for n in range(1, N + 1)}  # W_hn h_{t-n}
        if pooling == "sum":  # eq. 3
            fb = sum(terms[n] for n in range(1, N + 1))
        elif pooling == "max":  # eq. 4
            fb = torch.stack([terms[n] for n in range(1, N + 1)]).max(0).values
        elif pooling == "fofe":  # eq. 5
            fb = sum(alpha**n * terms[n] for n in range(1, N + 1))
        else:  # eq. 6 with r_n from eq. 7 (plus the gate bias c_n)
            fb = 0
            for n in range(1, N + 1):
                r_n = torch.sigmoid(mv(m["W1"][n], x_t) + mv(m["W2"][n], h[t - n]) + m["c"][n])
                fb = fb + r_n * terms[n]
        h[t] = f(
            mv(m["W_in"], x_t) + layer.cfg.feedback_scale * fb + m["b"]
        )  # (B, H), c = 1: eq. 3-7
        outputs.append(h[t])
    T = x.shape[0]
    new_history = torch.stack([h[s] for s in range(T - N, T)])  # (N, B, H), newest last
    return torch.stack(outputs), new_history


def reference_stack(
    layers: list[HornnLayer], x: Tensor, histories: list[Tensor]
) -> tuple[Tensor, list[Tensor]]:
    """Return (top outputs, new histories) of stacked layers, each run by `reference_layer`."""
    new = []
    for layer, hist in zip(layers, histories, strict=True):
        x, nh = reference_layer(layer, x, hist)
        new.append(nh)
    return x, new
