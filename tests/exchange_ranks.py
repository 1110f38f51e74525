"""Average one step's gradients with the exchange and with a dense fp32 all-reduce; save both.

Run under a launcher that starts 2 or more ranks (tests/test_exchange.py uses `accelerate
launch`):

    python -m tests.exchange_ranks OUT_DIR

Every rank joins a gloo group. For each case below it builds two copies of the same seeded
model, runs forward and backward on its own tokens in both, then averages the first copy's
gradients as the step did before (scaled by 1/processes, one fp32 all-reduce of them all,
concatenated) and the second's with `GradientExchange` (arm, backward, pack, communicate,
unpack, as TrainStep calls them). Each rank saves `OUT_DIR/<case>.rank<r>.pt` =
{"exchange", "dense", "plan", "bf16"}: the gradients by name, the exchange's plan as a
dict, and for bf16 cases what the exchange
should give: each rank's scaled gradient rounded to bf16, summed in fp32 in rank order and the
sum rounded to bf16 (what a bf16 all-reduce of two does).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from hornn_dist.models import ModelConfig, build_model
from hornn_dist.training.exchange import GradientExchange, plan_exchange

V, T, H = 100, 6, 12

# name: (streams per rank, tie_weights, reduce dtype, overlap)
CASES = {
    "rows": (4, False, "fp32", True),  # 24 tokens of 100 rows: the rows are all-gathered
    "rows_graphed": (4, False, "fp32", False),  # as between two graphs: no hook
    "tied": (4, True, "fp32", True),  # the shared matrix is dense: it goes late
    "dense_embedding": (20, False, "fp32", True),  # 120 tokens: the dense all-reduce is cheaper
    "rows_bf16": (4, False, "bf16", True),
    "graphed_bf16": (4, False, "bf16", False),
}


def model_and_grads(streams: int, tied: bool, rank: int, exchange: dict | None = None):
    """Return the model after one forward and backward on rank `rank`'s tokens; with
    `exchange` (plan_exchange's arguments) through a GradientExchange, returned too."""
    cfg = ModelConfig(pooling="gated", order=3, hidden_size=H, embedding_size=H, tie_weights=tied)
    torch.manual_seed(0)
    model = build_model(cfg, V)
    gen = torch.Generator().manual_seed(100 + rank)
    tokens = torch.randint(0, V, (T + 1, streams), generator=gen)  # (T+1, b)
    ex = None
    if exchange is not None:
        overlap = exchange.pop("overlap")
        ex = GradientExchange(model, plan_exchange(model, **exchange), overlap=overlap)
        ex.arm()
    logits, _ = model(tokens[:-1])
    F.cross_entropy(logits.flatten(0, 1), tokens[1:].flatten()).backward()
    if ex is not None:
        ex.pack(tokens[:-1])
        ex.communicate()
        ex.unpack()
    return model, ex


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Return a copy of every parameter's gradient by name."""
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def run_case(name: str, out: Path, rank: int, world: int) -> None:
    """Average case `name`'s gradients both ways; save them."""
    streams, tied, dtype, overlap = CASES[name]
    plain, _ = model_and_grads(streams, tied, rank)
    raw = grads(plain)
    flat = torch.cat([g.flatten() for g in raw.values()]) * (1.0 / world)
    dist.all_reduce(flat)  # the step's route before the exchange: one dense fp32 all-reduce
    dense, offset = {}, 0
    for n, g in raw.items():
        dense[n] = flat[offset : offset + g.numel()].view_as(g)
        offset += g.numel()
    exchanged, ex = model_and_grads(
        streams,
        tied,
        rank,
        {"tokens": streams * T, "processes": world, "reduce_dtype": dtype, "overlap": overlap},
    )
    plan = dataclasses.asdict(ex.plan)
    saved = {"exchange": grads(exchanged), "dense": dense, "plan": plan, "bf16": None}
    if dtype == "bf16":
        rounded = {n: (g * (1.0 / world)).bfloat16() for n, g in raw.items()}
        every = {}
        for n, g in rounded.items():
            parts = [torch.empty_like(g) for _ in range(world)]
            dist.all_gather(parts, g)
            total = parts[0].float()
            for part in parts[1:]:
                total = total + part.float()
            every[n] = total.bfloat16().float()
        saved["bf16"] = every
    torch.save(saved, out / f"{name}.rank{rank}.pt")


def main() -> None:
    """Join the gloo group, run every case, save them."""
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    args = p.parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        raise SystemExit("exchange_ranks: launch 2 or more ranks (accelerate launch)")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for name in CASES:
        run_case(name, args.out, rank, world)
    # Leave the group together: a gloo rank torn down while its peer still works can abort.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
