"""Tests of benchmarks/throughput.py: its one training step, every row of its JSON, CUDA graphs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
TINY = ["--vocab", "50", "--hidden", "16", "--batch", "4", "--bptt", "5"]
FAST = [*TINY, "--steps", "2", "--warmup", "1", "--rounds", "1"]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _load_throughput():
    spec = importlib.util.spec_from_file_location(
        "bench_throughput", REPO / "benchmarks" / "throughput.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


tp = _load_throughput()
SHAPE = tp.Shape(vocab=50, hidden=16, batch=4, bptt=5)
DEFAULT_VARIANTS = tp.DEFAULT_VARIANTS.split(",")


@pytest.mark.parametrize("variant", list(tp.VARIANTS))
def test_train_step_lowers_loss_on_repeated_data_and_carries_state_in_place(variant):
    device = torch.device("cpu")
    model, opt = tp.build(variant, SHAPE, device)
    tokens = torch.randint(0, SHAPE.vocab, (SHAPE.bptt + 1, SHAPE.batch), generator=gen(0))
    state = model.init_state(SHAPE.batch, device)
    shapes = [(s.shape, s.dtype, s.data_ptr()) for s in state]
    losses = [tp.train_step(model, opt, tokens, state, "fp32").item() for _ in range(8)]
    assert losses[-1] < losses[0] - 0.1, losses
    assert [(s.shape, s.dtype, s.data_ptr()) for s in state] == shapes  # same buffers, in place
    assert all(not s.requires_grad and s.abs().sum() > 0 for s in state)  # detached, carried
    assert all(opt.state[p]["momentum_buffer"] is not None for p in model.parameters())


def test_train_step_carries_the_new_state_of_the_forward_pass():
    device = torch.device("cpu")
    model, opt = tp.build("hornn-fofe", SHAPE, device)
    tokens = torch.randint(0, SHAPE.vocab, (SHAPE.bptt + 1, SHAPE.batch), generator=gen(1))
    state = model.init_state(SHAPE.batch, device)
    with torch.no_grad():
        _, want = model(tokens[:-1], tuple(s.clone() for s in state))
    tp.train_step(model, opt, tokens, state, "fp32")
    for got, ref in zip(state, want, strict=True):
        torch.testing.assert_close(got, ref)


def test_main_writes_every_row_to_the_json(tmp_path):
    out = tmp_path / "t.json"
    rows = tp.main([*FAST, "--configs", "paper,big", "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["results"] == json.loads(json.dumps(rows))
    got = {(r["variant"], r["config"], r["precision"], r["mode"]) for r in data["results"]}
    want = {(v, c, "fp32", "eager") for v in DEFAULT_VARIANTS for c in ("paper", "big")}
    assert got == want and len(data["results"]) == len(want)
    for r in data["results"]:
        assert "error" not in r, r
        assert r["tokens_per_s"] > 0 and r["steps"] == 2 and r["vocab"] == 50
        assert r["peak_mem_mib"] is None  # CPU
        assert r["ratio_to_best_lstm"] > 0
    assert [r["ratio_to_best_lstm"] for r in rows if r["arch"] == "lstm"] == [1.0, 1.0]
    meta = data["meta"]
    assert meta["torch"] == torch.__version__ and meta["device_name"] and meta["date"]
    assert meta["command"].startswith("python benchmarks/throughput.py --vocab 50")
    assert meta["configs"]["big"]["hidden"] == 16


def test_a_failing_row_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    build = tp.build

    def broken_rnn(variant, *args, **kwargs):
        if variant == "rnn":
            raise RuntimeError("capture failed\nsecond line")
        return build(variant, *args, **kwargs)

    monkeypatch.setattr(tp, "build", broken_rnn)
    rows = tp.main([*FAST, "--variants", "rnn,lstm", "--json", str(tmp_path / "t.json")])
    assert rows[0]["error"] == "RuntimeError: capture failed"
    assert "error" not in rows[1] and rows[1]["tokens_per_s"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_graphed_mode_without_a_gpu_is_an_error_row(tmp_path):
    argv = [*FAST, "--variants", "lstm", "--modes", "eager,graphed"]
    rows = tp.main([*argv, "--json", str(tmp_path / "t.json")])
    assert [r["mode"] for r in rows] == ["eager", "graphed"]
    assert rows[1]["error"] == "RuntimeError: graphed mode needs --device cuda"


def test_defaults_depend_on_the_device_and_flags_are_checked(capsys):
    cpu = tp.parse_args([])
    assert (cpu.configs, cpu.precisions, cpu.modes) == (["paper"], ["fp32"], ["eager"])
    assert (cpu.warmup, cpu.steps) == (2, 6)
    gpu = tp.parse_args(["--device", "cuda", "--compile"])
    assert (gpu.configs, gpu.precisions) == (["paper", "big"], ["fp32", "bf16"])
    assert gpu.modes == ["eager", "graphed", "compiled"] and gpu.steps == 0
    assert tp.parse_args(["--precision", "bf16"]).precisions == ["bf16"]  # the old flag
    assert tp.shape_of("big", tp.parse_args(["--batch", "7"])) == tp.Shape(44_000, 1024, 7, 30)
    with pytest.raises(SystemExit):
        tp.parse_args(["--configs", "huge"])
    assert "--configs: unknown 'huge'" in capsys.readouterr().err


def gen(seed: int) -> torch.Generator:
    """Return a seeded CPU generator."""
    return torch.Generator().manual_seed(seed)


@cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("variant", DEFAULT_VARIANTS)
def test_cuda_graphed_step_matches_eager(variant, precision):
    args = tp.parse_args(["--device", "cuda", *TINY])
    device = torch.device("cuda")
    runners = [
        tp.Runner(tp.Case(variant, "paper", precision, mode), SHAPE, args, device)
        for mode in ("eager", "graphed")
    ]
    for runner in runners:
        runner.warmup(2)  # graphed: 2 eager steps, then the capture (which takes no step)
        runner.run(3)
    eager, graphed = runners
    assert graphed.graph is not None and eager.i == graphed.i == 5
    tol = {"fp32": 1e-4, "bf16": 2e-2}[precision]
    torch.testing.assert_close(graphed.loss, eager.loss, rtol=tol, atol=tol)
    for got, want in zip(graphed.state, eager.state, strict=True):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    for got, want in zip(graphed.model.parameters(), eager.model.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@cuda
def test_cuda_main_graphs_every_variant_and_reports_memory(tmp_path):
    argv = ["--device", "cuda", *FAST, "--configs", "paper", "--json", str(tmp_path / "t.json")]
    rows = tp.main(argv)
    assert len(rows) == len(DEFAULT_VARIANTS) * 2 * 2  # fp32, bf16 × eager, graphed
    for r in rows:
        assert "error" not in r, r
        assert r["tokens_per_s"] > 0 and r["peak_mem_mib"] > 0


def test_profile_adds_launches_and_time_per_step(tmp_path):
    argv = [*FAST, "--variants", "hornn-fofe,lstm", "--profile", "--json", str(tmp_path / "p.json")]
    rows = tp.main(argv)
    assert all(r["kernels_per_step"] > 0 and r["kernel_ms_per_step"] > 0 for r in rows)
    saved = json.loads((tmp_path / "p.json").read_text())["results"]
    assert [r["kernels_per_step"] for r in saved] == [r["kernels_per_step"] for r in rows]
