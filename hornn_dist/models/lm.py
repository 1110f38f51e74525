"""Word-level recurrent language models: embedding -> HORNN / RNN / LSTM / GRU -> logits.

    tokens (T, B) ─► embedding (V, E) ─► L recurrent layers ─► Linear(H, V) ─► logits (T, B, V)

`model.output_layer` says how the last arrow gives the loss (models/output_layer.py): `plain`
(the logits, then a float32 cross-entropy), `fused` (the same Linear, its loss computed in
chunks) or `adaptive` (an adaptive softmax in place of the Linear: `forward` then returns
log-probabilities, which a softmax or a cross-entropy reads as logits).

The one-hot input x_t of eq. 3 times a V × E table is the embedding lookup; each HORNN layer
then applies its own W_in (E -> H). With V = 10k and H = E = 400 this gives the paper's
parameter counts (§4.1.1): RNN 8.3M, HORNN-3 8.6M, LSTM 9.3M, gated HORNN-3 9.6M.

`model.dropout` > 0 drops units where the arrows ─► cross between modules above (after the
embedding, between layers, before the output layer), never on a recurrent path (Zaremba et
al. 2014; `word_language_model`); `model.weight_drop` > 0 drops entries of the recurrent
weights (DropConnect: one mask per forward, AWD-LSTM's weight drop). `model.tie_weights`
makes the output layer's (V, H) matrix the embedding's (V, E = H) one: a single Parameter,
saved once under "embedding.weight" (an adaptive softmax: its head's shortlist rows).

State is always a tuple of tensors whose dim 1 is the batch, so a trainer can slice, detach
and checkpoint it without knowing the architecture:

    hornn       (hist_0, ..., hist_{L-1}), each (N, B, H), index N-1 = newest
    rnn / gru   (h,) with h (L, B, H)
    lstm        (h, c), each (L, B, H)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from hornn_dist.models import path_norms
from hornn_dist.models.config import ModelConfig
from hornn_dist.models.hornn import HornnLayer, drop_connect
from hornn_dist.models.init import recurrent_std
from hornn_dist.models.output_layer import AdaptiveSoftmax, fused_cross_entropy, resolve_cutoffs
from hornn_dist.models.plan import LayerPlan, checked_plan
from hornn_dist.util.errors import ConfigError

State = tuple[Tensor, ...]


class RecurrentLM(nn.Module):
    """A recurrent LM; forward(tokens (T, B), state | None) -> (logits (T, B, V), new state),
    and with targets (T, B) -> (their cross-entropy, new state)."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, plan: LayerPlan | None = None) -> None:
        """plan: how the HORNN layers run (`plan.plan_for`); None = for a CPU without mixed
        precision, no device check ("auto" is "fused")."""
        super().__init__()
        self.plan = plan = checked_plan(cfg, plan)
        self.cfg = cfg
        self.arch = cfg.arch
        self.vocab_size = vocab_size
        self.hidden_size = cfg.hidden_size
        self.num_layers = cfg.num_layers
        E = cfg.embedding_size or cfg.hidden_size
        H = cfg.hidden_size
        self.embedding = nn.Embedding(vocab_size, E)  # (V, E): W_in applied to one-hot x_t
        self.layers = nn.ModuleList()
        self.rnn: nn.RNNBase | None = None
        # torch's RNNs drop between their own layers (one layer: none, and no warning); cuDNN
        # keeps that dropout's random state itself, outside checkpoints (docs/models.md)
        between = cfg.dropout if cfg.num_layers > 1 else 0.0
        if cfg.arch == "hornn":
            for layer in range(cfg.num_layers):  # each layer reads its settings from cfg
                self.layers.append(HornnLayer(E if layer == 0 else H, cfg=cfg, plan=plan))
        elif cfg.arch == "rnn":
            self.rnn = nn.RNN(E, H, cfg.num_layers, nonlinearity=cfg.activation, dropout=between)
        elif cfg.arch == "lstm":
            self.rnn = nn.LSTM(E, H, cfg.num_layers, dropout=between)
        else:
            self.rnn = nn.GRU(E, H, cfg.num_layers, dropout=between)
        self.decoder: nn.Linear | AdaptiveSoftmax  # the output layer, W_out of eq. 2
        if cfg.output_layer == "adaptive":
            cutoffs = resolve_cutoffs(cfg.adaptive_cutoffs, vocab_size)
            tied_to = self.embedding if cfg.tie_weights else None  # the head's shortlist rows
            self.decoder = AdaptiveSoftmax(H, vocab_size, cutoffs, cfg.adaptive_div_value, tied_to)
        else:
            self.decoder = nn.Linear(H, vocab_size)  # (V, H)
        # Zaremba et al. 2014: dropout on the non-recurrent connections only
        self.drop = nn.Dropout(cfg.dropout)
        if cfg.tie_weights and isinstance(self.decoder, nn.Linear):
            # Press & Wolf 2017: one (V, H) matrix, E = H (cfg.validate)
            self.decoder.weight = self.embedding.weight
            self.register_state_dict_post_hook(_drop_tied_key)
            self.register_load_state_dict_pre_hook(_fill_tied_key)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw every weight matrix from N(0, init_std), then the feedback matrices as
        `model.recurrent_init` says (models/init.py), and zero every bias (paper §4)."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "bias" in name.rsplit(".", 1)[-1]:
                    p.zero_()
                else:
                    p.normal_(0.0, self.cfg.init_std)
            std = recurrent_std(self.cfg)
            if std == self.cfg.init_std:  # "paper": drawn above, the random stream as before
                return
            for layer in self.layers:  # the N path blocks W_hn^T; gated's W2n keep init_std
                layer.weight_hh[:, : layer.order * layer.hidden_size].normal_(0.0, std)
            if self.rnn is not None:  # arch rnn (recurrent_std is init_std for lstm and gru)
                for name, p in self.rnn.named_parameters():
                    if name.startswith("weight_hh"):
                        p.normal_(0.0, std)

    def init_state(
        self,
        batch_size: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> State:
        """Return a zero state for `batch_size` streams."""
        if self.arch == "hornn":
            return tuple(layer.init_history(batch_size, device, dtype) for layer in self.layers)
        h = torch.zeros(self.num_layers, batch_size, self.hidden_size, device=device, dtype=dtype)
        return (h, torch.zeros_like(h)) if self.arch == "lstm" else (h,)

    @staticmethod
    def detach_state(state: State) -> State:
        """Return the state cut from the autograd graph (for truncated BPTT)."""
        return tuple(s.detach() for s in state)

    def forward(
        self,
        tokens: Tensor,
        state: State | None = None,
        targets: Tensor | None = None,
        reduction: str = "mean",
    ) -> tuple[Tensor, State]:
        """Return (logits (T, B, V), new state, not detached) for tokens (T, B); with targets
        (T, B), (the loss, new state): the float32 cross-entropy of the next words, their mean
        (reduction "mean") or each token's (T, B) ("none"), from the output layer
        `model.output_layer` names. An adaptive output layer's logits are log-probabilities."""
        hidden, new = self._hidden(tokens, state)  # (T, B, H), after dropout
        if targets is None:
            if isinstance(self.decoder, AdaptiveSoftmax):
                return self.decoder.log_prob(hidden.flatten(0, 1)).unflatten(0, tokens.shape), new
            return self.decoder(hidden), new  # (T, B, V)
        return self.output_loss(hidden, targets, reduction), new

    def output_loss(self, hidden: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
        """Return the output layer's float32 cross-entropy of hidden (T, B, H) against targets
        (T, B): the mean ("mean") or each token's (T, B) ("none")."""
        if reduction not in ("mean", "none"):
            raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
        y = targets.flatten()
        if self.cfg.output_layer == "plain":
            logits = self.decoder(hidden)  # (T, B, V)
            loss = F.cross_entropy(logits.float().flatten(0, 1), y, reduction=reduction)
        elif isinstance(self.decoder, AdaptiveSoftmax):
            h = hidden.flatten(0, 1)  # (T·B, H)
            loss = self.decoder.mean_loss(h, y) if reduction == "mean" else self.decoder.nll(h, y)
        else:
            h = hidden.flatten(0, 1)  # (T·B, H)
            loss = fused_cross_entropy(h, self.decoder.weight, self.decoder.bias, y, reduction)
        return loss if reduction == "mean" else loss.view_as(targets)

    def _hidden(self, tokens: Tensor, state: State | None) -> tuple[Tensor, State]:
        """Return (the last layer's outputs after dropout (T, B, H), new state) for tokens (T, B)."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must have shape (T, B), got {tuple(tokens.shape)}")
        x = self._drop(self.embedding(tokens))  # (T, B, E)
        if self.arch == "hornn":
            histories = state if state is not None else (None,) * len(self.layers)
            if len(histories) != len(self.layers):
                raise ValueError(
                    f"state must hold one history per layer ({len(self.layers)}), "
                    f"got {len(histories)}"
                )
            new_state = []
            for i, (layer, hist) in enumerate(zip(self.layers, histories, strict=True)):
                x, new_hist = layer(x if i == 0 else self._drop(x), hist)  # (T, B, H), (N, B, H)
                new_state.append(new_hist)
            new = tuple(new_state)
        else:
            if state is None:
                x, hidden = self._run_rnn(x)
            elif self.arch == "lstm":
                x, hidden = self._run_rnn(x, (state[0], state[1]))
            else:
                x, hidden = self._run_rnn(x, state[0])
            new = tuple(hidden) if self.arch == "lstm" else (hidden,)
        return self._drop(x), new

    def _run_rnn(self, *args: Tensor | tuple[Tensor, Tensor]) -> Any:
        """Run the torch RNN module on args, each weight_hh_l* (every gate's recurrent matrix)
        times model.feedback_scale c, as a HORNN's W_hn are, then under DropConnect in training
        (model.weight_drop, as HornnLayer does); its other parameters as they are."""
        assert self.rnn is not None
        c, drop = self.cfg.feedback_scale, self.training and self.cfg.weight_drop > 0
        if c == 1.0 and not drop:
            return self.rnn(*args)

        def recurrent(weight: Tensor) -> Tensor:
            scaled = weight * c if c != 1.0 else weight
            return drop_connect(scaled, self.cfg.weight_drop, True) if drop else scaled

        weights = {
            name: recurrent(p) if name.startswith("weight_hh") else p
            for name, p in self.rnn.named_parameters()
        }
        return functional_call(self.rnn, weights, args)

    def _drop(self, x: Tensor) -> Tensor:
        """Return x (T, B, F) after dropout (model.dropout, training mode only): a mask per
        token, or under model.dropout_mask = "sequence" one (1, B, F) mask for every step of
        the window; dropout 0 or eval mode does nothing, not even a draw from the generator."""
        if self.cfg.dropout == 0:
            return x
        if self.cfg.dropout_mask == "step" or not self.training:
            return self.drop(x)
        keep = 1.0 - self.cfg.dropout
        mask = x.new_empty(1, *x.shape[1:]).bernoulli_(keep).div_(keep)
        return x * mask

    def feedback_path_slices(self) -> path_norms.PathSlices:
        """Return {"layer{l}/path{n}" | "layer{l}/gate{n}": [(param, index), ...]} (path_norms)."""
        return path_norms.feedback_path_slices(self)

    def path_grad_norm_vector(self) -> Tensor:
        """Return every feedback path's float32 gradient norm as one 1-d tensor, in key order."""
        return path_norms.path_grad_norm_vector(self)

    def path_grad_norms(self) -> dict[str, Tensor]:
        """Return the L2 norm of each feedback path's gradient (0 where no gradient yet)."""
        keys = self.feedback_path_slices()
        return dict(zip(keys, self.path_grad_norm_vector().unbind(0), strict=True))

    def num_parameters(self) -> int:
        """Return the number of trainable scalars."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def num_recurrent_parameters(self) -> int:
        """Return the trainable scalars of the recurrent layers: everything between the
        embedding and the output layer (each layer's input weights, feedback paths, gates and
        biases), the part that differs between architectures of one hidden size."""
        layers = self.rnn if self.rnn is not None else self.layers
        return sum(p.numel() for p in layers.parameters() if p.requires_grad)


TIED_KEY, TIED_TO = "decoder.weight", "embedding.weight"  # model.tie_weights: saved once


def _drop_tied_key(module: nn.Module, state_dict: dict[str, Tensor], prefix: str, _: Any) -> None:
    """Leave the tied output matrix out of a state dict: the embedding holds it, and
    safetensors refuses two names for one tensor."""
    state_dict.pop(prefix + TIED_KEY, None)


def _fill_tied_key(module: nn.Module, state_dict: dict[str, Tensor], prefix: str, *_: Any) -> None:
    """Before loading a state dict saved by `_drop_tied_key`, point the output matrix's key at
    the embedding's, so a strict load finds every key."""
    if prefix + TIED_TO in state_dict:
        state_dict.setdefault(prefix + TIED_KEY, state_dict[prefix + TIED_TO])


def build_model(cfg: ModelConfig, vocab_size: int, plan: LayerPlan | None = None) -> RecurrentLM:
    """Return a freshly initialised RecurrentLM for cfg whose HORNN layers run as `plan` says
    (None: see RecurrentLM); raises ConfigError for bad settings."""
    cfg.validate()
    if vocab_size < 1:
        raise ConfigError(f"vocab_size must be >= 1, got {vocab_size}")
    return RecurrentLM(cfg, vocab_size, plan)
