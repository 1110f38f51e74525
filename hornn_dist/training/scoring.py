"""Exact evaluation: token-weighted loss of a whole split, summed over every rank.

`score_split` is how the trainer (validation, test), `evaluate` and `export` score a split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hornn_dist.data.shards import Corpus
from hornn_dist.data.streams import EvalStream
from hornn_dist.training.metrics import perplexity


@dataclass
class EvalResult:
    """Summed negative log-likelihood (nats) and number of predicted tokens of a split."""

    loss_sum: float
    tokens: int

    @property
    def loss(self) -> float:
        """Mean loss per token."""
        return self.loss_sum / self.tokens

    @property
    def ppl(self) -> float:
        """Perplexity exp(mean loss), in float64."""
        return perplexity(self.loss_sum, self.tokens)

    def record(self) -> dict[str, float]:
        """Return the result as trainer_state.json stores it (loss and ppl for the reader)."""
        return {
            "tokens": self.tokens,
            "loss_sum": self.loss_sum,
            "loss": self.loss,
            "ppl": self.ppl,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> EvalResult:
        """Return the result a `record()` holds; KeyError, TypeError or ValueError if it is none."""
        return cls(loss_sum=float(record["loss_sum"]), tokens=int(record["tokens"]))


@torch.no_grad()
def evaluate_split(model: torch.nn.Module, stream: EvalStream, accelerator: Any) -> EvalResult:
    """Return the loss over every target token of the stream's split, reduced across ranks.

    `model` is the unwrapped language model; the hidden state is carried across steps.
    """
    was_training = model.training
    model.eval()
    device = accelerator.device
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    count = torch.zeros((), dtype=torch.int64, device=device)
    state = None
    for x, y, mask in stream:
        x, y, mask = x.to(device), y.to(device), mask.to(device)
        with accelerator.autocast():  # each token's loss from the model's output layer
            nll, state = model(x, state, targets=y, reduction="none")  # (T, b)
        loss_sum += (nll.flatten().double() * mask.flatten()).sum()
        count += mask.sum()
    totals = accelerator.reduce(torch.stack([loss_sum, count.double()]), reduction="sum")
    model.train(was_training)
    return EvalResult(loss_sum=float(totals[0]), tokens=int(totals[1]))


def split_stream(
    corpus: Corpus,
    split: str,
    accelerator: Any,
    batch_size: int,
    bptt: int,
    *,
    batch_key: str = "train.eval_batch_size",
    bptt_key: str = "train.bptt",
) -> EvalStream:
    """Return this rank's evaluation stream of `split`: `batch_size` streams over all ranks in
    windows of `bptt`; a size the split or the ranks cannot take is a ConfigError naming
    `batch_key` or `bptt_key`."""
    return EvalStream(
        corpus.split(split),
        batch_size,
        bptt,
        accelerator.process_index,
        accelerator.num_processes,
        split=split,
        batch_key=batch_key,
        bptt_key=bptt_key,
    )


def score_split(
    model: torch.nn.Module,
    corpus: Corpus,
    split: str,
    accelerator: Any,
    batch_size: int,
    bptt: int,
    **keys: str,
) -> EvalResult:
    """Return `model`'s loss over every target of `split`, scored in the streams of
    `split_stream` (`keys`: its batch_key and bptt_key) and summed over the ranks."""
    stream = split_stream(corpus, split, accelerator, batch_size, bptt, **keys)
    return evaluate_split(model, stream, accelerator)
