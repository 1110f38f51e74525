"""Exact evaluation: token-weighted loss of a whole split, summed over every rank."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

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
        with accelerator.autocast():
            logits, state = model(x, state)  # (T, b, V)
        nll = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none")
        loss_sum += (nll.double() * mask.flatten()).sum()
        count += mask.sum()
    totals = accelerator.reduce(torch.stack([loss_sum, count.double()]), reduction="sum")
    model.train(was_training)
    return EvalResult(loss_sum=float(totals[0]), tokens=int(totals[1]))
