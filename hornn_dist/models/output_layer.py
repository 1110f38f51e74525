"""The output layer's loss without the full logits: a fused linear + cross-entropy, and an
adaptive softmax (Grave et al. 2017).

`model.output_layer` picks how the language model turns its last hidden states h (N, H) into
the loss of the next words (models/lm.py):

    plain     Linear(H, V) -> logits (N, V) -> float32 cross-entropy   (PyTorch's way)
    fused     the same Linear (tied or not, the same weights and checkpoints), its loss and
              gradients computed here in chunks of tokens: no (N, V) float32 tensor is held
    adaptive  a head over the shortlist and one logit per cluster, then each cluster's words
              behind a projection H -> H / div^i (`AdaptiveSoftmax`); tied, the head's
              shortlist rows are the embedding's rows of those words (`TiedHead`)

The fused layer (`fused_cross_entropy`) is one autograd Function. Its forward runs the three
GEMMs of the plain layer's forward and backward, chunk by chunk over `chunk_tokens` tokens, and
between them the softmax in blocks of rows a CPU's caches hold (`block_rows`):

    z_c  = h_c W^T                     (n, V) in the compute dtype (autocast's, as the plain layer)
    p_c  = softmax(z_c + b) in float32 the loss: -log p_t = max z - log max p - z_t (lse - z_t)
    g_c  = p_c - onehot                the logits' gradient, written over z_c in the compute dtype
    db  += Σ (p_c - onehot)            in float32
    dh   = g W, dW = g^T h             (N, H), (V, H): one GEMM each over every token (bf16,
                                       fp16), else chunk by chunk, dW summed in place

so the backward only scales the stored gradients by grad_output / N (the loss is a mean). In
bf16/fp16 the (N, V) g are kept in that dtype for the last two GEMMs, the longer the faster
(dW rounded once, as the plain layer's backward rounds it; the plain layer holds those logits
too, besides float32 logits, log-probabilities and their gradient); no (N, V) float32 tensor
is ever held, and dW takes the place of the weight's bf16 copy. No host sync, no
data-dependent shape: a CUDA graph can capture it (unmeasured on a GPU). The vocabulary is not
cut into chunks: a row of V float32 probabilities is at most a few MB, and cutting it would
compute the logits twice.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from hornn_dist.util.errors import ConfigError

OUTPUT_LAYERS = ("plain", "fused", "adaptive")
# logits in one GEMM chunk of the fused layer (in bf16 and fp16 its two gradient GEMMs run over
# every token at once), and in one block of rows whose softmax runs at once on a
# CPU (a few MB of float32: the caches hold it); the layer's speed and memory at these sizes:
# benchmarks/README.md, "Output layer"
CHUNK_ELEMENTS = 1 << 23
MIN_CHUNK_TOKENS = 128
BLOCK_ELEMENTS = 1 << 19
# the adaptive softmax's default cutoffs (`model.adaptive_cutoffs = []`): where the most
# frequent words reach these shares of the training tokens, so the head holds the words of 90%
# of the text and the first cluster those of the next 8% (a fixed fraction of V covers a share
# that varies with V: docs/models.md, the output layer)
DEFAULT_CUTOFF_COVERAGE = (0.9, 0.98)
# the cutoffs a run saved with [] before the trainer resolved them from counts was built with:
# 5% and 20% of V (the ids are ordered by training count, data/vocab.py)
SAVED_DEFAULT_FRACTIONS = (0.05, 0.2)
MAX_DIV_VALUE = 64.0
LOW_PRECISION = (torch.bfloat16, torch.float16)


def chunk_tokens(tokens: int, vocab: int) -> int:
    """Return how many tokens one GEMM chunk of the fused layer takes: all of them when few,
    else about CHUNK_ELEMENTS // vocab (at least MIN_CHUNK_TOKENS), the chunks made equal."""
    most = max(MIN_CHUNK_TOKENS, CHUNK_ELEMENTS // max(vocab, 1))
    chunks = -(-tokens // most)
    return max(1, -(-tokens // max(chunks, 1)))


def block_rows(chunk: int, vocab: int, device: torch.device) -> int:
    """Return the rows of a chunk whose softmax runs at once: on a CPU a block of about
    BLOCK_ELEMENTS float32 values (its caches hold it), elsewhere the whole chunk (few kernels)."""
    if device.type != "cpu":
        return chunk
    return max(1, min(chunk, BLOCK_ELEMENTS // max(vocab, 1)))


def compute_dtype(hidden: Tensor, weight: Tensor) -> torch.dtype:
    """Return the dtype the output layer's GEMMs run in: autocast's where it is on (float32
    weights), else the weights' and hidden states' common dtype (float32, float64)."""
    device = hidden.device.type
    if weight.dtype == torch.float32 and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return torch.promote_types(hidden.dtype, weight.dtype)


def _accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    """Return the dtype a softmax over logits of `dtype` runs in: float32, or float64."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


def _scores(logits: Tensor) -> Tensor:
    """Return logits ready for a log-softmax: bf16/fp16 ones in float32 (the plain layer's
    `.float()`), float32 and float64 ones as they are."""
    return logits.to(_accumulate_dtype(logits.dtype))


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of `hidden @ weight.T + bias` against `targets`, its gradients
    computed during the forward (module docstring)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        targets: Tensor,
        dtype: torch.dtype,
    ) -> Tensor:
        with torch.autocast(hidden.device.type, enabled=False):  # dtypes chosen here, by hand
            loss, grads = _loss_and_gradients(hidden, weight, bias, targets, dtype)
        ctx.grads = grads  # intermediate tensors: attributes, not save_for_backward
        ctx.dtype = dtype
        ctx.save_for_backward(hidden, weight, bias, targets)  # a second backward recomputes
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_loss: Tensor) -> tuple:  # type: ignore[override]
        hidden, weight, bias, targets = ctx.saved_tensors
        grads, ctx.grads = ctx.grads, None  # handed over, scaled in place: nothing kept
        if grads is None:  # a second backward through this graph (retain_graph, gradcheck)
            with torch.autocast(hidden.device.type, enabled=False):
                grads = _loss_and_gradients(hidden, weight, bias, targets, ctx.dtype)[1]
        scale = grad_loss / hidden.shape[0]  # the loss is a mean; a 0-dim tensor: no host sync
        inputs = (hidden, weight, bias)
        out = [
            None if grad is None or not needed else _scaled(grad, x.dtype, scale)
            for grad, x, needed in zip(grads, inputs, ctx.needs_input_grad[:3], strict=True)
        ]
        return (*out, None, None)


def _scaled(grad: Tensor, dtype: torch.dtype, scale: Tensor) -> Tensor:
    """Return `grad` in `dtype` times `scale`, in place where no cast makes a new tensor (the
    caller holds it no more, so the optimizer's .grad can be this very tensor)."""
    return grad.to(dtype).mul_(scale.to(dtype))


def _loss_and_gradients(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, dtype: torch.dtype
) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor | None]]:
    """Return the mean NLL (0-dim, float32 or float64) and the unscaled gradients of its sum:
    (d hidden (N, H), d weight (V, H)) in the compute dtype and d bias (V,) in float32."""
    tokens, width = hidden.shape
    vocab = weight.shape[0]
    acc = _accumulate_dtype(dtype)
    low = acc != dtype
    device = hidden.device
    x, w = hidden.to(dtype), weight.to(dtype)  # (N, H), (V, H): autocast's casts, by hand
    b_acc = None if bias is None else bias.to(dtype).to(acc)  # (V,) as autocast rounds it
    n = chunk_tokens(tokens, vocab)
    rows = block_rows(n, vocab, device)
    # low precision: every token's logits, then its g in their place, kept for one dW GEMM at
    # the end (the plain layer holds them too); else one chunk's, and dW summed in place
    kept = torch.empty(tokens, vocab, dtype=dtype, device=device) if low else None
    logits_buf = None if low else torch.empty(n, vocab, dtype=dtype, device=device)  # (n, V)
    scores_buf = torch.empty(rows, vocab, dtype=acc, device=device) if low else None
    probs_buf = torch.empty(rows, vocab, dtype=acc, device=device)
    offsets = torch.arange(rows, device=device) * vocab  # row starts in a flat block
    ones = torch.ones(rows, dtype=acc, device=device)
    grad_x = torch.empty(tokens, width, dtype=dtype, device=device)
    grad_b = None if bias is None else torch.zeros(vocab, dtype=acc, device=device)
    grad_w = torch.zeros(vocab, width, dtype=dtype, device=device) if kept is None else None
    nll_sum = torch.zeros((), dtype=acc, device=device)
    for start in range(0, tokens, n):
        stop = min(start + n, tokens)
        xc = x[start:stop]
        logits = kept[start:stop] if kept is not None else logits_buf[: stop - start]  # (m, V)
        torch.mm(xc, w.t(), out=logits)  # the bias is added in each block: one pass less
        for first in range(0, stop - start, rows):  # a block of rows the caches hold
            last = min(first + rows, stop - start)
            k = last - first
            t = targets[start + first : start + last]
            z = logits[first:last]
            if scores_buf is not None:
                z = scores_buf[:k].copy_(z)  # the plain layer's .float()
            if b_acc is not None:
                z.add_(b_acc)
            probs = torch.softmax(z, 1, out=probs_buf[:k])  # (k, V), one exp per logit
            # -log p_t = lse - z_t, lse = max z + log Σ exp(z - max z) = max z - log max p:
            # the largest probability is 1 / Σ as the softmax computed it, never underflowing
            lse = z.amax(1) - torch.log(probs.amax(1))  # (k,)
            nll_sum.add_(lse.sum() - z.gather(1, t[:, None]).sum())
            if grad_b is not None:  # Σ (p - onehot), in float32
                grad_b.add_(probs.sum(0)).index_add_(0, t, ones[:k], alpha=-1)
            flat = offsets[:k] + t
            target_p = probs.view(-1)[flat]
            g = logits[first:last].copy_(probs)  # the softmax in the logits' place, z used up
            g.view(-1).index_put_((flat,), (target_p - 1).to(g.dtype))  # p - onehot
        if kept is None:  # the rows hold g now
            torch.mm(logits, w, out=grad_x[start:stop])  # (m, H)
            grad_w.addmm_(logits.t(), xc)
    if kept is not None:  # the other two GEMMs, over every token at once (longer, faster)
        torch.mm(kept, w, out=grad_x)  # (N, H)
        grad_w = torch.mm(kept.t(), x, out=w if w is not weight else None)  # (V, H), in w's place
    assert grad_w is not None
    return nll_sum / tokens, (grad_x, grad_w, grad_b)


@torch.no_grad()
def linear_nll(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, dtype: torch.dtype
) -> Tensor:
    """Return each token's NLL (N,) of `hidden @ weight.T + bias` against `targets`, in float32
    (float64 for float64 inputs), computed in chunks of tokens (scoring: no gradient)."""
    tokens, vocab = hidden.shape[0], weight.shape[0]
    acc = _accumulate_dtype(dtype)
    with torch.autocast(hidden.device.type, enabled=False):
        x, w = hidden.to(dtype), weight.to(dtype)
        b = None if bias is None else bias.to(dtype)
        out = torch.empty(tokens, dtype=acc, device=x.device)
        n = chunk_tokens(tokens, vocab)
        for start in range(0, tokens, n):
            stop = min(start + n, tokens)
            xc = x[start:stop]
            logits = xc @ w.t() if b is None else torch.addmm(b, xc, w.t())
            lsm = torch.log_softmax(logits.to(acc), 1)
            out[start:stop] = -lsm.gather(1, targets[start:stop, None]).squeeze(1)
    return out


def fused_cross_entropy(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, reduction: str = "mean"
) -> Tensor:
    """Return the cross-entropy of the linear layer (weight (V, H), bias (V,)) over hidden
    (N, H) against targets (N,): the mean (0-dim, differentiable through the fused Function)
    or, with reduction "none", each token's (N,) (no gradient: scoring). The GEMMs run in
    autocast's dtype where it is on; the log-softmax in float32 (or float64)."""
    dtype = compute_dtype(hidden, weight)
    if reduction == "none":
        if torch.is_grad_enabled() and any(t.requires_grad for t in (hidden, weight)):
            raise ValueError("the fused output layer gives per-token losses without gradient only")
        return linear_nll(hidden, weight, bias, targets, dtype)
    if reduction != "mean":
        raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
    return _FusedLinearCrossEntropy.apply(hidden, weight, bias, targets, dtype)


def _distinct_inside(cuts: list[int], vocab_size: int) -> list[int]:
    out: list[int] = []
    for cut in cuts:
        if 1 <= cut < vocab_size and (not out or cut > out[-1]):
            out.append(cut)
    return out


def coverage_cutoffs(counts: Sequence[int]) -> list[int]:
    """Return the adaptive softmax's default cutoffs from each id's training count (ids ordered
    by count): for each share of DEFAULT_CUTOFF_COVERAGE the fewest leading ids whose tokens
    reach it, those in [1, V) and distinct (none for a tiny V)."""
    total = sum(counts)
    cuts, running, shares = [], 0, list(DEFAULT_CUTOFF_COVERAGE)
    for i, count in enumerate(counts):
        running += count
        while shares and running >= shares[0] * total:
            cuts.append(i + 1)
            shares.pop(0)
    return _distinct_inside(cuts, len(counts))


def default_cutoffs(vocab_size: int) -> list[int]:
    """Return the cutoffs of a run saved with `model.adaptive_cutoffs = []` (the trainer now
    saves those `coverage_cutoffs` resolved): V times each of SAVED_DEFAULT_FRACTIONS, rounded,
    those in [1, V) and distinct."""
    return _distinct_inside([round(vocab_size * f) for f in SAVED_DEFAULT_FRACTIONS], vocab_size)


def resolve_cutoffs(cutoffs: list[int], vocab_size: int) -> list[int]:
    """Return the cutoffs the adaptive softmax of a vocabulary of `vocab_size` uses: the given
    ones, each checked below V (a ConfigError naming the key), or `default_cutoffs`."""
    if not cutoffs:
        return default_cutoffs(vocab_size)
    if cutoffs[-1] >= vocab_size:
        raise ConfigError(
            f"model.adaptive_cutoffs must be below the vocabulary size {vocab_size:,}, got "
            f"{cutoffs}; lower them or set [] (from the vocabulary)"
        )
    return list(cutoffs)


class TiedHead(nn.Module):
    """The adaptive softmax's head with its shortlist tied to the embedding (Press & Wolf 2017
    for the words the head scores; the clusters' entries and every tail are weights of their
    own, as the head tying of Baevski & Auli 2019 without adaptive inputs): `weight` (c_1 +
    clusters, H) is the embedding's first c_1 rows over `cluster_weight`, `bias` its own.

    The embedding is held outside the module's parameters, so a state dict saves it once (as
    `embedding.weight`) and `parameters()` lists it once, under the embedding."""

    def __init__(self, embedding: nn.Embedding, shortlist: int, clusters: int):
        super().__init__()
        hidden = embedding.weight.shape[1]
        self._embedding = (embedding,)  # a tuple: not registered, the LM owns it
        self.shortlist = shortlist
        self.cluster_weight = nn.Parameter(torch.empty(clusters, hidden))
        self.bias = nn.Parameter(torch.zeros(shortlist + clusters))

    @property
    def embedding(self) -> nn.Embedding:
        """Return the embedding whose first c_1 rows are the head's shortlist rows."""
        return self._embedding[0]

    @property
    def weight(self) -> Tensor:
        """Return the head's weight (c_1 + clusters, H): the shortlist's embedding rows, then
        one row per cluster."""
        words = self.embedding.weight[: self.shortlist]
        return torch.cat([words, self.cluster_weight])

    def forward(self, hidden: Tensor) -> Tensor:
        """Return the head's logits (N, c_1 + clusters) for hidden (N, H)."""
        return nn.functional.linear(hidden, self.weight, self.bias)


class AdaptiveSoftmax(nn.Module):
    """Adaptive softmax (Grave et al. 2017, "Efficient softmax approximation for GPUs").

    The words, ordered by training count, are cut at `cutoffs` c_1 < c_2 < ... into a
    shortlist [0, c_1) and clusters [c_i, c_{i+1}). The head scores the shortlist's words
    and one entry per cluster; cluster i scores its own words from a projection of h to
    H / div^i units (at least 1):

        log p(w | h) = log softmax(head(h))[w]                                  w in shortlist
                     = log softmax(head(h))[c_1 + i - 1]
                       + log softmax(tail_i(h))[w - c_i]                        w in cluster i

    a normalised distribution over all V words (perplexity is exact). Weights: `head`
    (Linear(H, c_1 + clusters), with a bias), `tail.<i>.0` (H -> H/div^i) and `tail.<i>.1`
    (-> the cluster's words), no bias, as torch.nn.AdaptiveLogSoftmaxWithLoss names them.
    Training scores a cluster only for the tokens whose target lies in it (their rows are
    picked by value: a data-dependent shape, so no CUDA graph holds it), the head and each
    cluster through the fused layer (`mean_loss`). Given `tied_to` (the embedding, E = H), the
    head is a `TiedHead`: its shortlist rows are the embedding's.
    """

    def __init__(
        self,
        hidden: int,
        vocab_size: int,
        cutoffs: list[int],
        div_value: float,
        tied_to: nn.Embedding | None = None,
    ):
        super().__init__()
        self.vocab_size = vocab_size
        self.cutoffs = list(cutoffs)
        bounds = [*self.cutoffs, vocab_size]
        self.shortlist = bounds[0]
        self.clusters = len(self.cutoffs)
        self.head: nn.Linear | TiedHead  # (c_1 + clusters, H)
        if tied_to is None:
            self.head = nn.Linear(hidden, self.shortlist + self.clusters)
        else:
            self.head = TiedHead(tied_to, self.shortlist, self.clusters)
        self.tail = nn.ModuleList()
        for i in range(self.clusters):
            width = max(1, int(hidden // div_value ** (i + 1)))
            size = bounds[i + 1] - bounds[i]
            self.tail.append(
                nn.Sequential(
                    nn.Linear(hidden, width, bias=False), nn.Linear(width, size, bias=False)
                )
            )
        # cluster of a word id: bucketize(ids, cutoffs, right=True); 0 = the shortlist
        self.register_buffer(
            "bounds", torch.tensor(self.cutoffs, dtype=torch.long), persistent=False
        )

    def weights(self) -> list[nn.Parameter]:
        """Return its own weight matrices, each (out, in): a row is one output unit's weights
        (tied, the head's cluster rows: the embedding holds its shortlist rows)."""
        head = self.head.cluster_weight if isinstance(self.head, TiedHead) else self.head.weight
        return [head, *(p for tail in self.tail for p in tail.parameters())]

    def mean_loss(self, hidden: Tensor, targets: Tensor) -> Tensor:
        """Return the mean NLL (0-dim, float32) of hidden (N, H) against targets (N,), each part
        through the fused layer: the head's over every token, and each cluster's over its own
        tokens (projected) weighted by their share; the same value as `nll(...).mean()`."""
        tokens = hidden.shape[0]
        cluster = torch.bucketize(targets, self.bounds, right=True)  # (N,) 0 = shortlist
        head_target = torch.where(cluster == 0, targets, self.shortlist + cluster - 1)
        loss = fused_cross_entropy(hidden, self.head.weight, self.head.bias, head_target)
        for i, tail in enumerate(self.tail):
            rows = (cluster == i + 1).nonzero().squeeze(1)  # tokens whose word is in cluster i
            if rows.numel() == 0:  # known on the host since nonzero: no further sync
                # a zero that keeps the cluster's weights in the backward: every step gives
                # every weight a gradient (the exchange starts once all of them arrived)
                loss = loss + sum(w.sum() for w in tail.parameters()) * 0.0
                continue
            projected = tail[0](hidden.index_select(0, rows))  # (n_i, H / div^i)
            inside = targets.index_select(0, rows) - self.cutoffs[i]
            share = rows.numel() / tokens
            loss = loss + fused_cross_entropy(projected, tail[1].weight, None, inside) * share
        return loss

    def nll(self, hidden: Tensor, targets: Tensor) -> Tensor:
        """Return each token's NLL (N,), float32, for hidden (N, H) and targets (N,)."""
        cluster = torch.bucketize(targets, self.bounds, right=True)  # (N,) 0 = shortlist
        head_target = torch.where(cluster == 0, targets, self.shortlist + cluster - 1)
        head_lp = torch.log_softmax(_scores(self.head(hidden)), 1)  # (N, c_1 + clusters)
        nll = -head_lp.gather(1, head_target[:, None]).squeeze(1)
        for i, tail in enumerate(self.tail):
            rows = (cluster == i + 1).nonzero().squeeze(1)  # tokens whose word is in cluster i
            lp = torch.log_softmax(_scores(tail(hidden.index_select(0, rows))), 1)  # (n_i, size)
            inside = (targets.index_select(0, rows) - self.cutoffs[i])[:, None]
            nll = nll.index_add(0, rows, -lp.gather(1, inside).squeeze(1))
        return nll

    def log_prob(self, hidden: Tensor) -> Tensor:
        """Return the log-probabilities of every word (N, V), float32, for hidden (N, H)."""
        head_lp = torch.log_softmax(_scores(self.head(hidden)), 1)  # (N, c_1 + clusters)
        parts = [head_lp[:, : self.shortlist]]
        for i, tail in enumerate(self.tail):
            cluster_lp = head_lp[:, self.shortlist + i, None]  # (N, 1)
            parts.append(torch.log_softmax(_scores(tail(hidden)), 1) + cluster_lp)
        return torch.cat(parts, 1)

    def extra_repr(self) -> str:
        tied = ", shortlist tied to the embedding" if isinstance(self.head, TiedHead) else ""
        return f"vocab_size={self.vocab_size}, cutoffs={self.cutoffs}{tied}"
