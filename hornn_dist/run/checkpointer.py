"""The one owner of a run's state: the parts that survive a restart, saved and restored together.

Each part has `state_dict()` / `load_state_dict()` (torchtitan's `Stateful`) and is registered
here by name; `Checkpointer.save` writes them all into one checkpoint folder (atomically, with
checksums and the DONE marker: `checkpoint.save_checkpoint`) and `Checkpointer.load` restores
them all from one. Where each part lives in a checkpoint folder:

    part        kept in                                  holds
    model       model.safetensors                        the weights
    optimizer   optimizer.bin, random_states_<r>.pkl,    Accelerate's save_state: the
                [scaler.pt]                              optimizer, every rank's RNG, scaler
    progress    trainer_state.json                       the loop's TrainerState: step,
                                                         validations, test, timing
    schedule    trainer_state.json, field "schedule"     the lr schedule (LrSchedule)
    stream      rank_<r>.pt                              each rank's data position
    step        rank_<r>.pt                              each rank's carried hidden history
    loss_window rank_<r>.pt                              each rank's train loss since the
                                                         last log line (RunningLoss)
    epoch_loss  rank_<r>.pt                              each rank's train loss of the
                                                         epoch so far (RunningLoss)

A new part is one entry in `shared` (the same on every rank: a field of trainer_state.json,
`TrainerState.with_parts`) or in `per_rank` (its own on each rank: a key of rank_<r>.pt);
each is saved, restored and, missing from a checkpoint, refused in one line alike.

Accelerate's `register_for_checkpointing` was not chosen for the per-rank parts: it saves a
registered object from the main process only (each rank's stream position and hidden history
would be lost) and loads it with `weights_only=False` (unpickling a checkpoint could run code).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from hornn_dist.config import RunConfig
from hornn_dist.data.shards import Corpus
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.run_state import STATE_FILE, TrainerState, check_part_names
from hornn_dist.training.optim import keep_fused
from hornn_dist.util.errors import CheckpointError


class Stateful(Protocol):
    """A part of a run that survives a restart."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass
class Checkpointer:
    """The run's parts (built for this run's config) and the one place that saves and loads them."""

    accelerator: Any
    cfg: RunConfig
    corpus: Corpus
    out: Path  # train.output_dir
    model: torch.nn.Module  # model.safetensors
    optimizer: torch.optim.Optimizer  # with the RNG and scaler: Accelerate's save_state
    fused_sgd: bool  # this run's choice of fused SGD (training/step_setup.py)
    shared: dict[str, Stateful]  # name: a field of trainer_state.json
    per_rank: dict[str, Stateful]  # name: a key of each rank_<r>.pt

    def __post_init__(self) -> None:
        check_part_names(self.shared)  # a part's field must not overwrite the state's own

    def save(self, progress: TrainerState) -> Path:
        """Write a complete checkpoint of every part at `progress.step` and return its folder
        (call on every rank)."""
        acc = self.accelerator
        state = replace(
            progress.with_parts({name: part.state_dict() for name, part in self.shared.items()}),
            parameters=self.model.num_parameters(),
            vocab_hash=self.corpus.vocab_hash,
            corpus_hash=self.corpus.content_hash,
            world_size=acc.num_processes,
        )
        rank_state = {name: part.state_dict() for name, part in self.per_rank.items()}
        return ckpt.save_checkpoint(acc, self.out, state, rank_state, self.cfg, self.model)

    def load(self, folder: Path, state: TrainerState) -> None:
        """Restore every part from checkpoint `folder`, whose trainer state is `state` (read and
        checked by the caller); a checkpoint of another process count is re-sliced."""
        acc = self.accelerator
        ckpt.load_state(acc, folder, self.model)  # weights, optimizer, RNG, scaler
        ckpt.check_finite_optimizer(folder, self.optimizer)  # as the weights were checked
        keep_fused(self.optimizer, self.fused_sgd)  # the checkpoint's run may have chosen otherwise
        for name, part in self.shared.items():
            saved_part = state.part(name)
            if saved_part is None:
                raise CheckpointError(
                    f"{folder / STATE_FILE} lacks the part {name!r}: the checkpoint is "
                    f"incomplete; {ckpt.older_instead(folder)}"
                )
            part.load_state_dict(saved_part)
        rank, world = acc.process_index, acc.num_processes
        same = state.world_size == world  # then each rank reads its own file alone
        ranks = [rank] if same else range(state.world_size)
        saved = [ckpt.load_rank_file(folder, r) for r in ranks]
        for name, part in self.per_rank.items():
            if any(name not in s for s in saved):
                raise CheckpointError(
                    f"{folder}: a rank file lacks the part {name!r}: the checkpoint is "
                    f"incomplete; {ckpt.older_instead(folder)}"
                )
            states = [s[name] for s in saved]
            part.load_state_dict(states[0] if same else _reshard(part, states, rank, world))


def _reshard(part: Stateful, states: list[dict], rank: int, world_size: int) -> dict[str, Any]:
    """Return rank `rank` of `world_size`'s state of `part` from the states every rank of a
    run with another process count wrote: the part's re-slicing (a part without one holds the
    same state on every rank)."""
    reshard = getattr(part, "reshard", None)
    return reshard(states, rank, world_size) if reshard is not None else states[0]
