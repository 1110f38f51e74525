"""benchmarks/path_norms.py over a real trained run: per-epoch medians of the gradient norms
TensorBoard holds, and each path's weight norms, against plain recomputations."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import torch
from safetensors.torch import load_file

from tests.train_helpers import check_ok, load_benchmark, run_here, scalars, write_tiny_config


def test_path_norms_are_the_event_files_per_epoch_and_the_best_checkpoints_weights(
    tmp_path: Path,
) -> None:
    config = write_tiny_config(tmp_path, log={"every": 1, "progress": False})
    check_ok(run_here("hornn_dist.train", str(config)))
    run = tmp_path / "run"
    script = load_benchmark("path_norms")
    out = tmp_path / "norms.json"
    assert script.main([str(run), "--json", str(out)]) == 0
    (result,) = json.loads(out.read_text())["results"]

    state = json.loads(sorted((run / "checkpoints").glob("step_*"))[-1].joinpath(
        "trainer_state.json").read_text())  # fmt: skip
    per_epoch = result["steps_per_epoch"]
    assert per_epoch == state["valid_history"][0]["step"]  # the first epoch-end validation
    logged = scalars(run)
    keys = {f"layer0/path{n}" for n in (1, 2, 3)} | {f"layer0/gate{n}" for n in (1, 2, 3)}
    assert {k for row in result["epochs"] for k in row} == {"epoch", "total", *keys}
    assert [row["epoch"] for row in result["epochs"]] == [1, 2, 3]
    for row in result["epochs"]:
        epoch = row["epoch"]
        for key in ("total", "layer0/path2", "layer0/gate3"):
            values = [
                v for s, v in logged[f"grad_norm/{key}"] if (epoch - 1) * per_epoch < s <= epoch * per_epoch
            ]  # fmt: skip
            assert len(values) == per_epoch  # log.every = 1: every step
            assert row[key] == statistics.median(values)

    best = run / "checkpoints" / state["best_checkpoint"]
    weights = load_file(str(best / "model.safetensors"))
    hidden = 12
    path2 = weights["layers.0.weight_hh"][:, hidden : 2 * hidden].double()
    got = result["weights"]["layer0/path2"]
    assert abs(got["frobenius"] - path2.norm().item()) < 1e-9
    assert abs(got["spectral"] - torch.linalg.svdvals(path2)[0].item()) < 1e-9
    assert set(result["weights"]) == keys
    assert "pool_weight" not in got  # gated: each path's weight depends on the input


def test_path_norms_weigh_fofe_paths_by_alpha_to_the_n(tmp_path: Path) -> None:
    """For FOFE pooling each path's gain as applied is alpha^n times its spectral norm (eq. 5)."""
    model = {"pooling": "fofe", "order": 2, "alpha": 0.3, "hidden_size": 12, "embedding_size": 10}
    config = write_tiny_config(tmp_path, model=model, train={"epochs": 1})
    check_ok(run_here("hornn_dist.train", str(config)))
    (result,) = [load_benchmark("path_norms").describe(tmp_path / "run")]
    assert set(result["weights"]) == {"layer0/path1", "layer0/path2"}
    for n in (1, 2):
        got = result["weights"][f"layer0/path{n}"]
        assert got["pool_weight"] == 0.3**n
        assert got["applied_spectral"] == 0.3**n * got["spectral"]
        assert got["spectral"] != got["spectral_init"]  # trained


def test_path_norms_init_is_the_trainers_own_init(tmp_path: Path) -> None:
    """The init norms are the run's own start: after one step at lr 1e-9 (no momentum, weight
    decay or column norm) the trained weights are the trainer's init, and match them."""
    optim = {"lr": 1e-9, "momentum": 0.0, "weight_decay": 0.0, "max_col_norm": 0.0}
    config = write_tiny_config(tmp_path, optim=optim, train={"max_steps": 1, "epochs": 1})
    check_ok(run_here("hornn_dist.train", str(config)))
    (best,) = (tmp_path / "run" / "checkpoints").glob("step_*")
    weights = load_benchmark("path_norms").path_weights(best)
    assert len(weights) == 6  # three paths, three gates
    for norms in weights.values():
        assert abs(norms["frobenius"] - norms["frobenius_init"]) < 1e-6 * norms["frobenius"]
        assert abs(norms["spectral"] - norms["spectral_init"]) < 1e-6 * norms["spectral"]
