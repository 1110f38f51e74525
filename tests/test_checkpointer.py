"""The Checkpointer, the one owner of a run's state: every registered part is saved and restored
together, a new part (shared or per rank) is one registration, and a checkpoint lacking a part
is one line; a new [model] key, declared here alone, goes through save and resume (one
change, one place)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from hornn_dist import config as run_config
from hornn_dist.config import load_config
from hornn_dist.models import ModelConfig
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.run_state import STATE_FILE, TrainerState
from hornn_dist.util.errors import CheckpointError
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


class Tally:
    """A shared part added by registration alone: one count, the same on every rank."""

    def __init__(self, value: int) -> None:
        self.value = value

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = state["value"]


@dataclass
class GainModel(ModelConfig):
    """The [model] section with one key more, declared here and nowhere else."""

    out_gain: float = 1.0  # a key of this test: shapes the model, so a resume must keep it


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny corpus, prepared once for this module's runs (each writes its own output_dir)."""
    return prepared_tiny(tmp_path_factory.mktemp("checkpointer"))


def _trainer(folder: Path, out: Path, *sets: str):
    from hornn_dist.training.trainer import Trainer

    cfg = load_config(folder / "config.toml", [f"train.output_dir={out}", *sets])
    reset_accelerate_state()
    return Trainer(cfg)


def test_every_registered_part_round_trips_and_a_new_part_is_one_entry(
    folder: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    try:
        saver = _trainer(folder, out)
        saver.run()  # trains the tiny config to its end: every part has moved
        for buf in saver.step.state:  # a carried history mid-epoch (a run's end holds zeros)
            buf.copy_(torch.randn_like(buf))
        parts = saver.checkpointer
        parts.per_rank["counter"] = Counter(7)
        parts.shared["tally"] = Tally(5)
        progress = TrainerState(step=saver.progress.step + 1, epoch=3)
        saved = parts.save(progress)

        loader = _trainer(folder, tmp_path / "other")
        loader.checkpointer.per_rank["counter"] = Counter(0)
        loader.checkpointer.shared["tally"] = Tally(0)
        assert loader.schedule.state_dict() != saver.schedule.state_dict()  # a fresh run's
        assert loader.train_stream.state_dict() != saver.train_stream.state_dict()
        assert not any(buf.abs().sum() for buf in loader.step.state)
        loader.checkpointer.load(saved, TrainerState.read(saved))
    finally:
        reset_accelerate_state()
    counter = loader.checkpointer.per_rank["counter"]
    assert counter.value == 7 and torch.equal(counter.tensor, torch.full((3,), 7.0))
    assert loader.checkpointer.shared["tally"].value == 5
    assert loader.schedule.state_dict() == saver.schedule.state_dict()
    assert loader.train_stream.state_dict() == saver.train_stream.state_dict()
    for got, want in zip(loader.step.state, saver.step.state, strict=True):
        assert torch.equal(got, want)
    for got, want in zip(loader.core.parameters(), saver.core.parameters(), strict=True):
        assert torch.equal(got, want)
    state = TrainerState.read(saved)
    assert (state.step, state.epoch, state.world_size) == (progress.step, 3, 1)
    raw = json.loads((saved / STATE_FILE).read_text())  # a top-level field, as "schedule" is
    assert raw["tally"] == {"value": 5} and raw["schedule"] == state.schedule != {}
    assert state.parameters == saver.core.num_parameters()


def test_a_checkpoint_without_a_registered_part_is_one_line(folder: Path, tmp_path: Path) -> None:
    try:
        saver = _trainer(folder, tmp_path / "run")
        saved = saver.checkpointer.save(TrainerState(step=1))
        loader = _trainer(folder, tmp_path / "other")
        loader.checkpointer.per_rank["counter"] = Counter(0)  # registered after that save
        with pytest.raises(CheckpointError, match="a rank file lacks the part 'counter'"):
            loader.checkpointer.load(saved, TrainerState.read(saved))
        del loader.checkpointer.per_rank["counter"]
        loader.checkpointer.shared["tally"] = Tally(0)  # a shared part, as alike
        with pytest.raises(CheckpointError, match="trainer_state.json lacks the part 'tally'"):
            loader.checkpointer.load(saved, TrainerState.read(saved))
    finally:
        reset_accelerate_state()


def test_a_shared_part_named_like_a_state_field_is_refused_at_registration() -> None:
    """A shared part's state is a top-level field of trainer_state.json: one named like the
    state's own (its step) is refused when registered, before any training or save."""
    from hornn_dist.run.checkpointer import Checkpointer

    with pytest.raises(ValueError, match=r"parts \['step'\] are named like trainer state"):
        Checkpointer(None, None, None, Path(), None, None, False, {"step": Tally(0)}, {})
    with pytest.raises(ValueError, match="named like trainer state"):
        TrainerState().with_parts({"shared": {}})
    assert TrainerState().with_parts({"schedule": {"lr": 1.0}, "tally": {}}).shared == {"tally": {}}


def test_a_shared_parts_state_is_read_back_and_checked_like_the_schedules(tmp_path: Path) -> None:
    """trainer_state.json's fields that TrainerState does not declare are parts' states: read
    into `shared`, and refused in one line unless each is a JSON object."""
    folder = tmp_path / "step_00000002"
    folder.mkdir()
    TrainerState(step=2).with_parts({"schedule": {"lr": 0.5}, "tally": {"value": 5}}).write(folder)
    state = TrainerState.read(folder)
    assert state.part("tally") == {"value": 5} and state.part("schedule") == {"lr": 0.5}
    assert state.part("other") is None and state.shared == {"tally": {"value": 5}}
    for name in ("tally", "schedule"):
        raw = json.loads((folder / STATE_FILE).read_text())
        (folder / STATE_FILE).write_text(json.dumps({**raw, name: 3}))
        with pytest.raises(CheckpointError, match=f'field "{name}" must be a JSON object'):
            TrainerState.read(folder)
        (folder / STATE_FILE).write_text(json.dumps(raw))


def test_a_new_model_key_and_shared_part_round_trip_through_save_and_resume(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A [model] key declared in this module alone (GainModel) reaches every HORNN layer (it
    holds the section), the checkpoint's config and its weights' record, and a resume refuses
    a changed one (every [model] key shapes the weights unless declared otherwise); a shared
    part registered by one entry (Tally) is saved as a field of trainer_state.json and
    restored by the resume, with no TrainerState field or check of its own."""
    monkeypatch.setitem(run_config._SECTION_TYPES, "model", GainModel)  # the loader's [model]
    out, quiet = tmp_path / "run", "log.tensorboard=false"

    def trainer(steps: int, gain: float, tally: int):
        made = _trainer(folder, out, quiet, f"train.max_steps={steps}", f"model.out_gain={gain}")
        made.checkpointer.shared["tally"] = Tally(tally)  # the part's one registration
        return made

    try:
        first = trainer(3, 2.0, tally=5)
        assert all(layer.cfg.out_gain == 2.0 for layer in first.core.layers)
        first.run()
        saved = ckpt.list_checkpoints(out)[-1]
        assert "out_gain = 2.0" in (saved / ckpt.CONFIG_FILE).read_text()
        ckpt.check_model_record(saved, ckpt.read_config(saved))  # the record holds the key
        assert TrainerState.read(saved).part("tally") == {"value": 5}

        resumed = trainer(5, 2.0, tally=0)
        resumed.run()
        assert resumed.progress.step == 5 and resumed.checkpointer.shared["tally"].value == 5
        assert TrainerState.read(ckpt.list_checkpoints(out)[-1]).part("tally") == {"value": 5}

        with pytest.raises(CheckpointError, match=r"model.out_gain: checkpoint 2.0 != config 3.0"):
            trainer(7, 3.0, tally=0).run()
    finally:
        reset_accelerate_state()
