"""Max-norm "column normalisation" (Pachitariu & Sahani 2013): cap every unit's incoming weight
vector and every word vector of a RecurrentLM after each update."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from hornn_dist.models.lm import RecurrentLM
from hornn_dist.models.output_layer import AdaptiveSoftmax


def max_norm_vectors(model: RecurrentLM) -> list[tuple[nn.Parameter, int]]:
    """Return (weight, dim) pairs: the norm over `dim` is one unit's incoming weight vector."""
    pairs: list[tuple[nn.Parameter, int]] = [(model.embedding.weight, 1)]  # each word vector
    for layer in model.layers:  # x @ W layout: column j is unit j's incoming weights
        pairs += [(layer.weight_ih, 0), (layer.weight_hh, 0)]
    if model.rnn is not None:  # torch layout (gates·H, in): row k is unit k's incoming weights
        pairs += [(p, 1) for name, p in model.rnn.named_parameters() if name.startswith("weight")]
    if isinstance(model.decoder, AdaptiveSoftmax):  # (out, in): a row is one unit's weights
        pairs += [(weight, 1) for weight in model.decoder.weights()]
    elif model.decoder.weight is not model.embedding.weight:  # tied: capped once, above
        pairs.append((model.decoder.weight, 1))  # (V, H): row v is word v's output weights
    return pairs


@torch.no_grad()
def column_normalize_(model: nn.Module, max_norm: float) -> None:
    """Rescale in place each weight vector whose L2 norm exceeds max_norm; no-op if max_norm <= 0.

    The max-norm constraint of Pachitariu & Sahani (2013), the paper's "column
    normalization", applied after each update. The vectors are each hidden or output unit's
    incoming weights in the paper's W (out × in) convention (a row of W, a column of our
    x @ W matrices, per path block), and each word vector of the embedding. Biases are left
    alone. Works on a bare RecurrentLM and through wrappers (DDP, torch.compile): every
    RecurrentLM found among model.modules() is normalised.
    """
    if max_norm <= 0:
        return
    for module in model.modules():
        if isinstance(module, RecurrentLM):
            for weight, dim in max_norm_vectors(module):
                norms = torch.linalg.vector_norm(weight, dim=dim, keepdim=True)
                weight.mul_(_cap_factors_(norms, max_norm))


def _cap_factors_(norms: Tensor, max_norm: float) -> Tensor:
    """Turn norms in place into the factors min(1, max_norm / norm) and return them.

    Bit for bit (max_norm / norms.clamp_min(1e-12)).clamp(max=1.0), one op fewer: Python's
    `max_norm / t` is t.reciprocal() * max_norm, and a zero norm gives inf, clamped to 1. The
    1e-12 floor can change a factor only for a max_norm near 1e-12 or less; only then it runs.
    (Clamping the norms to max_norm instead would not do: x.reciprocal() * x is 1 - 2**-24,
    not 1, in float32 for about one x in eight, e.g. 1.7.)
    """
    if max_norm < 1e-6:
        norms.clamp_(min=1e-12)
    return norms.reciprocal_().mul_(max_norm).clamp_(max=1.0)
