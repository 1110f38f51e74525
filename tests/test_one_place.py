"""One change, one place (issue 67, item 4): a new [model] key, [optim] key or shared checkpoint
part is declared once, here each in this module alone, and the package carries it through
the layers, the schedule, save and resume without a list or a relay to extend."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from hornn_dist import checkpoint as ckpt
from hornn_dist import config as run_config
from hornn_dist.config import OptimConfig, load_config
from hornn_dist.errors import CheckpointError
from hornn_dist.models import ModelConfig
from hornn_dist.on_resume import SCHEDULE, on_resume
from hornn_dist.run_state import TrainerState
from hornn_dist.training.optim import LrSchedule
from hornn_dist.training.resume import apply_changed_settings
from tests.train_helpers import prepared_tiny, reset_accelerate_state


@dataclass
class GainModel(ModelConfig):
    """The [model] section with one key more, declared here and nowhere else."""

    out_gain: float = 1.0  # a key of this test: shapes the model, so a resume must keep it


@dataclass
class PatientOptim(OptimConfig):
    """The [optim] section with one schedule key more, declared here and nowhere else."""

    halve_cap: int = on_resume(SCHEDULE, 9)  # a key of this test: the schedule follows it


class Tally:
    """A shared checkpoint part (the same on every rank), registered by one entry."""

    def __init__(self, value: int) -> None:
        self.value = value

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = state["value"]


def _trainer(folder: Path, out: Path, *sets: str, tally: int):
    """Return a Trainer of the tiny run into `out` with `sets`, Tally(tally) registered."""
    from hornn_dist.training.trainer import Trainer

    cfg = load_config(folder / "config.toml", [f"train.output_dir={out}", *sets])
    reset_accelerate_state()
    trainer = Trainer(cfg)
    trainer.checkpointer.shared["tally"] = Tally(tally)  # the part's one registration
    return trainer


def test_a_new_model_key_and_shared_part_round_trip_through_save_and_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key reaches every HORNN layer (it holds the section), the checkpoint's config and
    its weights' record, and a resume refuses a changed one (every [model] key shapes the
    weights unless declared otherwise); the part is saved as a field of trainer_state.json and
    restored by the resume, with no TrainerState field or check of its own."""
    folder = prepared_tiny(tmp_path / "data", log={"tensorboard": False})
    monkeypatch.setitem(run_config._SECTION_TYPES, "model", GainModel)  # the loader's [model]
    out = tmp_path / "run"
    try:
        first = _trainer(folder, out, "train.max_steps=3", "model.out_gain=2.0", tally=5)
        assert all(layer.cfg.out_gain == 2.0 for layer in first.core.layers)
        first.run()
        saved = ckpt.list_checkpoints(out)[-1]
        assert "out_gain = 2.0" in (saved / ckpt.CONFIG_FILE).read_text()
        ckpt.check_model_record(saved, ckpt.read_config(saved))  # the record holds the key
        assert TrainerState.read(saved).part("tally") == {"value": 5}

        resumed = _trainer(folder, out, "train.max_steps=5", "model.out_gain=2.0", tally=0)
        resumed.run()
        assert resumed.progress.step == 5 and resumed.checkpointer.shared["tally"].value == 5
        assert TrainerState.read(ckpt.list_checkpoints(out)[-1]).part("tally") == {"value": 5}
        for got, want in zip(resumed.core.layers, first.core.layers, strict=True):
            assert got.cfg == want.cfg and not torch.equal(got.weight_hh, want.weight_hh)

        changed = _trainer(folder, out, "train.max_steps=7", "model.out_gain=3.0", tally=0)
        with pytest.raises(CheckpointError, match=r"model.out_gain: checkpoint 2.0 != config 3.0"):
            changed.run()
    finally:
        reset_accelerate_state()


def test_a_new_schedule_key_is_held_saved_and_followed_by_the_schedule() -> None:
    """An [optim] key of way `schedule` is in the schedule's section, its state dict and so
    its checkpoint, and a resume's change of it is applied and named, with no copy of it."""
    schedule = LrSchedule.from_config(PatientOptim(halve_cap=4))
    schedule.end_epoch(5.0)
    state = schedule.state_dict()
    assert state["halve_cap"] == 4 and state["epochs_done"] == 1

    restored = LrSchedule.from_config(PatientOptim())  # this run's default: 9
    restored.load_state_dict(state)
    assert restored.cfg.halve_cap == 4 and restored.state_dict() == state
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=schedule.lr)
    notes = apply_changed_settings(PatientOptim(halve_cap=4), PatientOptim(), restored, optimizer)
    assert notes == ["optim.halve_cap 4 -> 9"] and restored.cfg.halve_cap == 9
    assert restored.epochs_done == 1 and restored.lr == schedule.lr  # the history stays
