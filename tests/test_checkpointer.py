"""The Checkpointer, the one owner of a run's state: every registered part is saved and restored
together, a new part is one registration, and a rank file lacking a part is one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from hornn_dist.config import load_config
from hornn_dist.errors import CheckpointError
from hornn_dist.run_state import TrainerState
from tests.train_helpers import prepared_tiny, reset_accelerate_state


class Counter:
    """A part added by registration alone: a count and a tensor, each rank its own."""

    def __init__(self, value: int) -> None:
        self.value = value
        self.tensor = torch.full((3,), float(value))

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value, "tensor": self.tensor.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value, self.tensor = state["value"], state["tensor"].clone()


def _trainer(folder: Path, out: Path):
    from hornn_dist.training.trainer import Trainer

    cfg = load_config(folder / "config.toml", [f"train.output_dir={out}"])
    reset_accelerate_state()
    return Trainer(cfg)


def test_every_registered_part_round_trips_and_a_new_part_is_one_entry(tmp_path: Path) -> None:
    folder = prepared_tiny(tmp_path / "data")
    out = tmp_path / "run"
    try:
        saver = _trainer(folder, out)
        saver.run()  # trains the tiny config to its end: every part has moved
        for buf in saver.step.state:  # a carried history mid-epoch (a run's end holds zeros)
            buf.copy_(torch.randn_like(buf))
        parts = saver.checkpointer
        parts.per_rank["counter"] = Counter(7)
        progress = TrainerState(step=saver.progress.step + 1, epoch=3)
        saved = parts.save(progress)

        loader = _trainer(folder, tmp_path / "other")
        loader.checkpointer.per_rank["counter"] = Counter(0)
        assert loader.schedule.state_dict() != saver.schedule.state_dict()  # a fresh run's
        assert loader.train_stream.state_dict() != saver.train_stream.state_dict()
        assert not any(buf.abs().sum() for buf in loader.step.state)
        loader.checkpointer.load(saved, TrainerState.read(saved))
    finally:
        reset_accelerate_state()
    counter = loader.checkpointer.per_rank["counter"]
    assert counter.value == 7 and torch.equal(counter.tensor, torch.full((3,), 7.0))
    assert loader.schedule.state_dict() == saver.schedule.state_dict()
    assert loader.train_stream.state_dict() == saver.train_stream.state_dict()
    for got, want in zip(loader.step.state, saver.step.state, strict=True):
        assert torch.equal(got, want)
    for got, want in zip(loader.core.parameters(), saver.core.parameters(), strict=True):
        assert torch.equal(got, want)
    state = TrainerState.read(saved)
    assert (state.step, state.epoch, state.world_size) == (progress.step, 3, 1)
    assert state.parameters == saver.core.num_parameters()


def test_a_rank_file_without_a_registered_part_is_one_line(tmp_path: Path) -> None:
    folder = prepared_tiny(tmp_path / "data")
    try:
        saver = _trainer(folder, tmp_path / "run")
        saved = saver.checkpointer.save(TrainerState(step=1))
        loader = _trainer(folder, tmp_path / "other")
        loader.checkpointer.per_rank["counter"] = Counter(0)  # registered after that save
        with pytest.raises(CheckpointError, match="a rank file lacks the part 'counter'"):
            loader.checkpointer.load(saved, TrainerState.read(saved))
    finally:
        reset_accelerate_state()
