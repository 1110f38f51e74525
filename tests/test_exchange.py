"""The gradient exchange: which parameters travel how, and that it averages as the dense fp32
all-reduce does (bit for bit with 2 real gloo ranks; within summation-order rounding with 3).

`tests/exchange_ranks.py` runs the cases under a real `accelerate launch` and saves what each
rank averaged; the integration tests compare it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hornn_dist.models import ModelConfig, build_model
from hornn_dist.training.exchange import ROW_ID_LIMIT, plan_exchange, rows_pay
from tests.exchange_ranks import CASES
from tests.train_helpers import REPO, check_ok, env, free_port

PAPER = ModelConfig(pooling="fofe", order=3, hidden_size=400)  # V 10k, H = E 400


def _meta_model(cfg: ModelConfig, vocab: int):
    with torch.device("meta"):  # sizes only: no weights drawn
        return build_model(cfg, vocab)


def test_the_paper_config_sends_its_output_layer_early_and_its_embedding_as_rows():
    model = _meta_model(PAPER, 10_000)
    plan = plan_exchange(model, tokens=20 * 30, processes=8, reduce_dtype="bf16")
    assert plan.early == ("decoder.weight", "decoder.bias")
    assert plan.rows == "embedding.weight" and plan.row_slots == 600 and plan.row_width == 400
    assert "embedding.weight" not in plan.late and plan.late[0].startswith("layers.0.")
    total = plan.late_numel + plan.early_numel + 10_000 * 400
    assert total == model.num_parameters() == 8_650_400
    sizes = plan.bytes_per_process()
    assert sizes == {
        "early": 2 * (10_000 * 400 + 10_000),  # bf16
        "late": 2 * plan.late_numel,
        "rows": 600 * 401 * 4,  # fp32 rows and their ids
    }


def test_tied_weights_send_the_shared_matrix_late_and_only_the_bias_early():
    tied = _meta_model(ModelConfig(pooling="fofe", hidden_size=400, tie_weights=True), 10_000)
    plan = plan_exchange(tied, tokens=600, processes=2, reduce_dtype="fp32")
    assert plan.early == ("decoder.bias",) and plan.rows is None and plan.row_slots == 0
    assert "embedding.weight" in plan.late and "decoder.weight" not in plan.late  # one name
    assert plan.late_numel + plan.early_numel == tied.num_parameters()


def test_rows_travel_only_where_they_send_fewer_bytes():
    # per process: P·n·(E+1)·4 against 2·V·E·(4 fp32 | 2 bf16)
    assert rows_pay(600, 10_000, 400, 8, 2)  # the paper config on 8 GPUs, bf16
    assert rows_pay(3840, 44_000, 1024, 8, 2) and not rows_pay(3840, 44_000, 1024, 16, 2)
    assert rows_pay(3840, 44_000, 1024, 16, 4)  # fp32 dense costs twice: rows still pay
    assert not rows_pay(120, 100, 12, 2, 4) and rows_pay(24, 100, 12, 3, 2)  # the cases below
    assert not rows_pay(1, ROW_ID_LIMIT + 1, 8, 2, 4)  # ids beyond float32's exact integers
    big = _meta_model(ModelConfig(hidden_size=1024), 44_000)
    assert plan_exchange(big, 3840, 16, "bf16").rows is None
    assert "embedding.weight" in plan_exchange(big, 3840, 16, "bf16").late


def test_an_unknown_reduce_dtype_is_one_line():
    with pytest.raises(ValueError, match="reduce_dtype must be one of fp32, bf16"):
        plan_exchange(_meta_model(PAPER, 100), 10, 2, "fp16")


def _launch(out: Path, processes: int) -> dict[str, list[dict]]:
    """Run tests.exchange_ranks under a real `accelerate launch` of `processes` CPU ranks."""
    out.mkdir()
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", str(processes), "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()),
        "-m", "tests.exchange_ranks", str(out),
    ]  # fmt: skip
    check_ok(subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env(), timeout=300))
    runs: dict[str, list[dict]] = {}
    for path in sorted(out.glob("*.rank*.pt")):
        name, rank = path.stem.split(".rank")
        runs.setdefault(name, []).insert(int(rank), torch.load(path))
    assert sorted(runs) == sorted(CASES) and all(len(r) == processes for r in runs.values())
    return runs


def _check_plans(runs: dict[str, list[dict]]) -> None:
    plans = {name: ranks[0]["plan"] for name, ranks in runs.items()}
    for name in ("rows", "rows_graphed", "rows_bf16", "graphed_bf16"):
        assert plans[name]["rows"] == "embedding.weight"
    assert plans["tied"]["rows"] is None and plans["tied"]["early"] == ("decoder.bias",)
    assert plans["dense_embedding"]["rows"] is None
    assert "embedding.weight" in plans["dense_embedding"]["late"]


def _assert_within_bf16(got: torch.Tensor, want: torch.Tensor, addends: int) -> None:
    """Assert that a bf16 all-reduce of `addends` terms is within its rounding of the fp32
    sum: each term and each partial sum rounded once (2^-9 of the largest), bounded by the
    largest value (a sum of opposite terms loses its relative precision)."""
    bound = 2 * addends * 2**-9 * float(want.abs().max())
    assert float((got - want).abs().max()) <= bound


@pytest.mark.integration
def test_two_ranks_exchange_exactly_what_the_dense_fp32_all_reduce_gives(tmp_path):
    """fp32: bit for bit, rows or dense, overlapped or as between two graphs, tied or not.
    bf16: the dense parts bit for bit what a bf16 sum of the two rounded halves gives, within
    bf16's rounding of fp32; the rows (fp32) bit for bit the dense fp32 all-reduce's."""
    runs = _launch(tmp_path / "two", 2)
    _check_plans(runs)
    for name, ranks in runs.items():
        for saved in ranks:
            got, dense = saved["exchange"], saved["dense"]
            assert got.keys() == dense.keys()
            for key in got:
                if CASES[name][2] == "fp32" or key == saved["plan"]["rows"]:  # rows: fp32
                    assert torch.equal(got[key], dense[key]), (name, key)
                else:
                    assert torch.equal(got[key], saved["bf16"][key]), (name, key)
                    _assert_within_bf16(got[key], dense[key], addends=2)
        for key in ranks[0]["exchange"]:  # every rank holds the same average
            assert torch.equal(ranks[0]["exchange"][key], ranks[1]["exchange"][key])


@pytest.mark.integration
def test_three_ranks_exchange_the_dense_average_within_summation_order_rounding(tmp_path):
    """Three addends: the rows are summed in rank order and each all-reduce over its own
    chunks, so the result may differ from the dense all-reduce's in the last bits."""
    runs = _launch(tmp_path / "three", 3)
    _check_plans(runs)
    for name, ranks in runs.items():
        fp32 = CASES[name][2] == "fp32"
        for saved in ranks:
            for key, got in saved["exchange"].items():
                if fp32 or key == saved["plan"]["rows"]:
                    torch.testing.assert_close(got, saved["dense"][key], rtol=1e-6, atol=1e-9)
                else:
                    _assert_within_bf16(got, saved["dense"][key], addends=3)
        for key in ranks[0]["exchange"]:
            assert all(torch.equal(ranks[0]["exchange"][key], r["exchange"][key]) for r in ranks)
