"""Per feedback path gradient norms of a RecurrentLM: ‖∂L/∂W_hn‖ per layer and path (and gate).

It reads the model's `arch`, `layers` and `rnn` (models/lm.py), which imports this module: so
it takes any nn.Module with them rather than importing the class, and the two stay a line.

`feedback_path_slices` says where each path's matrices sit in the parameters; the norms are
computed with one reduction per weight matrix, in float32 (`path_grad_norm_vector`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from hornn_dist.models.hornn import HornnLayer

PathSlices = dict[str, list[tuple[nn.Parameter, tuple[slice, ...]]]]

ALL = (slice(None),)


def feedback_path_slices(model: nn.Module) -> PathSlices:
    """Return {"layer{l}/path{n}" | "layer{l}/gate{n}": [(param, index), ...]}.

    `param.grad[index]` is the gradient of that matrix (W_hn; for a gate, W1n and W2n).
    """
    out: PathSlices = {}
    if model.arch == "hornn":
        for layer_idx, layer in enumerate(model.layers):
            for n in range(1, layer.order + 1):
                out[f"layer{layer_idx}/path{n}"] = [
                    (layer.weight_hh, (slice(None), layer.path_block(n)))
                ]
            if layer.gated:
                for n in range(1, layer.order + 1):
                    ih, hh = layer.gate_blocks(n)
                    out[f"layer{layer_idx}/gate{n}"] = [
                        (layer.weight_ih, (slice(None), ih)),
                        (layer.weight_hh, (slice(None), hh)),
                    ]
    else:
        assert model.rnn is not None
        for layer_idx in range(model.num_layers):
            w = getattr(model.rnn, f"weight_hh_l{layer_idx}")
            out[f"layer{layer_idx}/path1"] = [(w, ALL)]
    return out


def path_grad_norm_vector(model: nn.Module) -> Tensor:
    """Return every feedback path's float32 gradient norm as one 1-d tensor, in key order."""
    pieces: list[Tensor] = []
    if model.arch == "hornn":
        for layer in model.layers:
            pieces += _layer_path_norms(layer)
    else:
        assert model.rnn is not None
        for layer_idx in range(model.num_layers):
            pieces.append(_block_norms(getattr(model.rnn, f"weight_hh_l{layer_idx}"), 1))
    return torch.cat(pieces)


def _norm32(x: Tensor, dim: tuple[int, ...]) -> Tensor:
    """Return the float32 L2 norm of x over dim (summed in float64 for a float64 x)."""
    if x.dtype == torch.float64:
        return torch.linalg.vector_norm(x, dim=dim).float()
    return torch.linalg.vector_norm(x, dim=dim, dtype=torch.float32)


def _block_norms(param: nn.Parameter, blocks: int) -> Tensor:
    """Return the norms (blocks,) of param.grad's equal column blocks, in one reduction.

    The gradient (rows, blocks·cols) is viewed (rows, blocks, cols); zeros without a gradient.
    """
    if param.grad is None:
        return torch.zeros(blocks, device=param.device)
    grad = param.grad
    return _norm32(grad.reshape(grad.shape[0], blocks, -1), (0, 2))


def _block_range(first: slice, last: slice, size: int) -> slice:
    """Return the block indices first..last of the column slices `first`, `last` (size columns)."""
    return slice(first.start // size, last.stop // size)


def _layer_path_norms(layer: HornnLayer) -> list[Tensor]:
    """Return a HORNN layer's [path norms (N,)] (+ [gate norms (N,)] if gated), in key order.

    One reduction per weight matrix; a gate's norm is hypot(|W1n grad|, |W2n grad|).
    """
    H, N = layer.hidden_size, layer.order
    hh = _block_norms(layer.weight_hh, layer.weight_hh.shape[1] // H)
    pieces = [hh[_block_range(layer.path_block(1), layer.path_block(N), H)]]
    if layer.gated:
        ih = _block_norms(layer.weight_ih, layer.weight_ih.shape[1] // H)
        (ih_first, hh_first), (ih_last, hh_last) = layer.gate_blocks(1), layer.gate_blocks(N)
        w1 = ih[_block_range(ih_first, ih_last, H)]
        w2 = hh[_block_range(hh_first, hh_last, H)]
        pieces.append(torch.hypot(w1, w2))
    return pieces
