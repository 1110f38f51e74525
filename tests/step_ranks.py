"""Train a few steps with the flat all-reduce, with DDP and in one process; save what each did.

Run under a launcher that starts 2 ranks (tests/test_step_ranks.py uses `accelerate launch`):

    python -m tests.step_ranks OUT_DIR --device cpu|cuda

Every rank joins a gloo group (on CUDA both ranks share cuda:0: gloo all-reduces CUDA
tensors, NCCL refuses two ranks on one GPU) and trains, from the same seeded model on its own
batches, the runs below; each rank saves `OUT_DIR/<run>.rank<r>.pt` = {"losses", "params"}:

    ddp      the reference step (tests/reference_step.py) on the model wrapped in
             DistributedDataParallel
    flat     TrainStep(reduce=True) eager: the gradient exchange (training/exchange.py)
    graphed  (CUDA) TrainStep(reduce=True) replaying its two graphs, the all-reduce between
    one      (rank 0) one process on both ranks' batches side by side (batch 2b), eager
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist

from hornn_dist.config import config_from_dict
from hornn_dist.models import build_model
from hornn_dist.training.optim import build_optimizer
from hornn_dist.training.step import TrainStep
from tests.reference_step import reference_step

V, T, B, STEPS = 50, 6, 4, 8  # B streams per rank


def run_config():
    """Return the small run config every run trains (momentum, decay, clip and max-norm on)."""
    model = {"pooling": "gated", "order": 3, "hidden_size": 16, "embedding_size": 12}
    optim = {"lr": 0.3, "momentum": 0.5, "weight_decay": 1e-5, "max_col_norm": 2.0}
    return config_from_dict({"model": model, "optim": optim, "train": {"batch_size": B, "bptt": T}})


def batches(rank: int) -> torch.Tensor:
    """Return rank `rank`'s STEPS token blocks (STEPS, T+1, B)."""
    gen = torch.Generator().manual_seed(100 + rank)
    return torch.randint(0, V, (STEPS, T + 1, B), generator=gen)


def train(name: str, data: torch.Tensor, device: torch.device, out: Path, rank: int) -> None:
    """Train run `name` on `data` (STEPS, T+1, b); save its losses and final parameters."""
    cfg = run_config()
    torch.manual_seed(0)  # every run, every rank: the same initial model
    core = build_model(cfg.model, V).to(device)
    optimizer = build_optimizer(core, cfg.optim)
    if name == "ddp":  # the reference: the plain step on a DDP model
        model = torch.nn.parallel.DistributedDataParallel(
            core, device_ids=[device.index] if device.type == "cuda" else None
        )
        state, losses = core.init_state(data.shape[2], device), []
        for block in data.to(device):
            result = reference_step(model, optimizer, block[:-1], block[1:], state, cfg.optim)
            state = result.state
            losses.append(result.loss)
        _save(out / f"{name}.rank{rank}.pt", losses, core)
        return
    step = TrainStep(
        core,
        optimizer,
        device=device,
        batch_size=data.shape[2],
        bptt=T,
        optim=cfg.optim,
        graph_reason=None if name == "graphed" else f"{name} run",
        reduce=name in ("flat", "graphed"),
    )
    losses = [step.run(block[:-1], block[1:], measure=False).clone() for block in data]
    _save(out / f"{name}.rank{rank}.pt", losses, core)


def _save(path: Path, losses: list[torch.Tensor], core: torch.nn.Module) -> None:
    """Save a run's losses and final parameters."""
    params = [p.detach().cpu() for p in core.parameters()]
    torch.save({"losses": torch.stack(losses).cpu(), "params": params}, path)


def main() -> None:
    """Join the gloo group, train every run, save them."""
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = p.parse_args()
    if os.environ.get("WORLD_SIZE") != "2":
        raise SystemExit("step_ranks: launch 2 ranks (accelerate launch --num_processes 2)")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    runs = ["ddp", "flat"] + (["graphed"] if device.type == "cuda" else [])
    for name in runs:
        train(name, batches(rank), device, args.out, rank)
    if rank == 0:  # one process, nothing to reduce: both ranks' streams side by side
        both = torch.cat([batches(r) for r in range(dist.get_world_size())], dim=2)
        train("one", both, device, args.out, rank)
    # Leave the group together: a gloo rank torn down while its peer still works can abort.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
