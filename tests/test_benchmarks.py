"""Tests of benchmarks/throughput.py (the trainer's step it times, every row of its JSON, CUDA
graphs) and of benchmarks/triton_tiles.py (CUDA only: its refusal without a GPU, one tiny run on
one)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hornn_dist.config import OptimConfig
from hornn_dist.models.poolings import PAPER_POOLINGS
from hornn_dist.models.step_gemm import onednn_linear_works
from hornn_dist.models.triton_tiles import TILES_ENV
from hornn_dist.training.optim import resolve_clip
from hornn_dist.training.step import WARMUP_STEPS, TrainStep
from hornn_dist.util.provenance import code_commit, describe_commit
from tests.train_helpers import load_benchmark

REPO = Path(__file__).resolve().parents[1]
TINY = ["--vocab", "50", "--hidden", "16", "--batch", "4", "--bptt", "5"]
FAST = [*TINY, "--steps", "2", "--warmup", "1", "--rounds", "1"]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout


def check_meta(meta: dict, script: str) -> None:
    """Assert the metadata every benchmark's JSON carries: command, UTC date, commit with its
    dirty flag (as git says here), machine, torch."""
    assert meta["command"].startswith(f"python benchmarks/{script} ")
    assert meta["date"].endswith("+00:00")
    if os.environ.get("HORNN_COMMIT"):  # a copy without .git (gpu_check.sh's GPU_CHECK_COMMIT)
        assert (meta["commit"], meta["dirty"]) == (os.environ["HORNN_COMMIT"], None)
    elif head := _git("rev-parse", "HEAD").strip():
        assert meta["commit"] == head
        assert meta["dirty"] is bool(_git("status", "--porcelain").strip())
    else:
        assert (meta["commit"], meta["dirty"]) == ("unknown", None)
    machine = meta["machine"]
    assert machine["cpu"] and machine["cores"] == os.cpu_count()
    assert machine["gpu"] == (torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    assert meta["torch"] == torch.__version__ and meta["device_name"]


def triton_cpu_reason() -> str | None:
    """Return why the triton engine cannot run on this CPU (no interpreter, no triton), or None."""
    from hornn_dist.models.triton_scan import unavailable_reason

    return unavailable_reason("cpu")


tp = load_benchmark("throughput")
SHAPE = tp.Shape(vocab=50, hidden=16, batch=4, bptt=5)
DEFAULT_VARIANTS = tp.DEFAULT_VARIANTS.split(",")  # CPU
TRITON_VARIANTS = [v for v, cfg in tp.VARIANTS.items() if cfg.engine == "triton"]
# the interpreted triton engine takes ~0.4 s a step on CPU: one of its variants is enough here
STEP_VARIANTS = [v for v in tp.VARIANTS if v not in TRITON_VARIANTS] + ["hornn-fofe-triton"]


def runner(variant: str, mode: str = "eager", precision: str = "fp32", device: str = "cpu"):
    """Return a Runner of one case at the tiny SHAPE."""
    args = tp.parse_args(["--device", device, *TINY])
    return tp.Runner(tp.Case(variant, "paper", precision, mode), SHAPE, args, torch.device(device))


@pytest.mark.parametrize(
    "variant",
    # the triton variant interprets its kernels: the full tier's
    [pytest.param(v, marks=pytest.mark.integration) if "triton" in v else v for v in STEP_VARIANTS],
)
def test_the_timed_step_lowers_loss_on_repeated_data_and_carries_state_in_place(variant):
    if variant in TRITON_VARIANTS and triton_cpu_reason() is not None:
        pytest.skip(triton_cpu_reason())
    run = runner(variant)
    step = run.train
    recipe = resolve_clip(tp.VARIANTS[variant], OptimConfig())  # the trainer's, for this model
    assert isinstance(step, TrainStep) and step.optim == recipe
    assert step.describe() == "eager (eager mode)"
    tokens = torch.randint(0, SHAPE.vocab, (SHAPE.bptt + 1, SHAPE.batch), generator=gen(0))
    shapes = [(s.shape, s.dtype, s.data_ptr()) for s in step.state]
    losses = [step.run(tokens[:-1], tokens[1:], measure=False).item() for _ in range(8)]
    assert losses[-1] < losses[0] - 0.1, losses
    assert [(s.shape, s.dtype, s.data_ptr()) for s in step.state] == shapes  # same buffers
    assert all(not s.requires_grad and s.abs().sum() > 0 for s in step.state)  # detached, carried
    assert all(run.opt.state[p]["momentum_buffer"] is not None for p in run.model.parameters())
    assert int(step.step_id) == 8 and step.norms.abs().sum() == 0  # no norms: measure=False


def test_the_timed_step_carries_the_new_state_of_the_forward_pass():
    run = runner("hornn-fofe")
    block = run.data[0]
    with torch.no_grad():
        _, want = run.model(block[:-1], tuple(s.clone() for s in run.train.state))
    run.step()
    assert run.i == 1
    for got, ref in zip(run.train.state, want, strict=True):
        torch.testing.assert_close(got, ref)


@pytest.mark.integration
def test_compiled_mode_compiles_the_trainers_step_body():
    """The compiled row takes the same steps as the eager one (Dynamo breaks its graph)."""
    eager, compiled = runner("hornn-fofe"), runner("hornn-fofe", mode="compiled")
    for run in (eager, compiled):
        run.warmup(1)  # compiled: at least 3 (compile, recompile once momentum exists)
        run.run(1)
    assert eager.i == 2 and compiled.i == 4
    eager.run(2)  # now both took 4 steps on the same blocks
    torch.testing.assert_close(compiled.train.loss, eager.train.loss, rtol=1e-5, atol=1e-6)
    for got, want in zip(compiled.model.parameters(), eager.model.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.integration
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
    check_meta(meta, "throughput.py")
    assert meta["command"].startswith("python benchmarks/throughput.py --vocab 50")
    assert meta["configs"]["big"]["hidden"] == 16


def test_the_recorded_commit_is_overridden_by_hornn_commit_and_unknown_outside_git(
    tmp_path, monkeypatch
):
    """A folder that is not a checkout's top (none, or inside another repository) records
    "unknown" unless HORNN_COMMIT names the commit; the JSON carries what HORNN_COMMIT says."""
    monkeypatch.delenv("HORNN_COMMIT", raising=False)
    assert code_commit(tmp_path) == {"commit": "unknown", "dirty": None}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "site-packages").mkdir()  # an installed copy inside a user's own repository
    assert code_commit(tmp_path / "site-packages") == {"commit": "unknown", "dirty": None}
    monkeypatch.setenv("HORNN_COMMIT", "abc123-dirty")
    common = load_benchmark("common")
    assert code_commit(tmp_path) == {"commit": "abc123-dirty", "dirty": None}
    assert describe_commit(code_commit(tmp_path)) == "commit abc123-dirty"
    assert describe_commit({"commit": "0123456789" * 4, "dirty": True}) == "commit 0123456 (dirty)"
    meta = common.run_meta("x.py", ["--a", "b c"], torch.device("cpu"))
    assert meta["commit"] == "abc123-dirty" and meta["dirty"] is None
    assert meta["command"] == "python benchmarks/x.py --a 'b c'"


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


def test_triton_variants_are_cuda_defaults_only_where_the_engine_runs(monkeypatch):
    from hornn_dist.models import triton_scan

    assert {"hornn-sum-triton", "hornn-max-triton", "hornn-fofe-triton"} < set(TRITON_VARIANTS)
    assert {"hornn-gated-triton", "hornn-fofe-triton-fp32rec"} < set(TRITON_VARIANTS)
    assert tp.VARIANTS["hornn-fofe-triton-fp32rec"].recurrence_precision == "fp32"
    assert tp.VARIANTS["hornn-fofe-triton"].recurrence_precision == "fp16"  # the default
    assert all(tp.VARIANTS[v].arch == "hornn" for v in TRITON_VARIANTS)
    assert tp.parse_args([]).variants == DEFAULT_VARIANTS  # CPU: never the triton ones
    four = [f"hornn-{p}-triton" for p in ("sum", "max", "fofe", "gated")]
    gpu = tp.parse_args(["--device", "cuda"]).variants
    if triton_scan.unavailable_reason("cuda") is None:
        assert gpu == DEFAULT_VARIANTS + four
    monkeypatch.setattr(triton_scan, "unavailable_reason", lambda device=None: "no triton")
    assert tp.parse_args(["--device", "cuda"]).variants == DEFAULT_VARIANTS
    assert tp.parse_args(["--device", "cuda", "--variants", four[0]]).variants == four[:1]


@pytest.mark.integration
def test_triton_variant_runs_under_the_interpreter(tmp_path):
    if triton_cpu_reason() is not None:
        pytest.skip(triton_cpu_reason())
    argv = [*FAST, "--variants", "hornn-fofe-triton,hornn-fofe", "--json", str(tmp_path / "t.json")]
    rows = tp.main([*argv, "--triton-tiles", "paper=16x16x16x4x2"])  # K split over 2 programs
    assert [(r["variant"], r["engine"]) for r in rows] == [
        ("hornn-fofe-triton", "triton"),
        ("hornn-fofe", "fused"),
    ]
    for r in rows:
        assert "error" not in r, r
        assert r["tokens_per_s"] > 0 and r["params"] == rows[1]["params"]
    meta = json.loads((tmp_path / "t.json").read_text())["meta"]
    assert meta["args"]["triton_tiles"] == {"paper": [16, 16, 16, 4, 2]}
    assert TILES_ENV not in os.environ  # only while the group ran
    with pytest.raises(SystemExit):
        tp.parse_args(["--triton-tiles", "paper=16x16"])


def test_triton_variant_without_the_engine_is_an_error_row(tmp_path, monkeypatch):
    """Not a silent fallback to the fused engine: the row says why it did not run."""
    from hornn_dist.models import triton_scan

    monkeypatch.setattr(triton_scan, "INTERPRETED", False)  # CPU without the interpreter
    rows = tp.main([*FAST, "--variants", "hornn-max-triton,lstm", "--json", str(tmp_path / "t")])
    assert rows[0]["error"].startswith("RuntimeError: model.engine = 'triton'"), rows[0]
    assert "error" not in rows[1] and rows[1]["tokens_per_s"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_triton_tiles_without_cuda_exits_2_with_one_line():
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "benchmarks/triton_tiles.py", "--configs", "paper"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "triton_tiles.py: needs a CUDA GPU (torch.cuda.is_available() is False)"
    ]


def gen(seed: int) -> torch.Generator:
    """Return a seeded CPU generator."""
    return torch.Generator().manual_seed(seed)


@cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("variant", tp.default_variants("cuda").split(","))
def test_cuda_graphed_step_matches_eager(variant, precision):
    runners = [runner(variant, mode, precision, "cuda") for mode in ("eager", "graphed")]
    for run in runners:
        run.warmup(2)  # graphed: TrainStep's eager warm-up steps, then the capture and a replay
        run.run(3)
    eager, graphed = runners
    assert graphed.i == WARMUP_STEPS + 1 + 3
    eager.run(graphed.i - eager.i)  # both took the same steps on the same blocks
    step = graphed.train
    assert step.use_graph and step.captures == 1 and step.eager_steps == WARMUP_STEPS
    assert not eager.train.use_graph and not eager.train.graphs
    tol = {"fp32": 1e-4, "bf16": 2e-2}[precision]
    torch.testing.assert_close(step.loss, eager.train.loss, rtol=tol, atol=tol)
    for got, want in zip(step.state, eager.train.state, strict=True):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    for got, want in zip(graphed.model.parameters(), eager.model.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@cuda
def test_cuda_main_graphs_every_variant_and_reports_memory(tmp_path):
    argv = ["--device", "cuda", *FAST, "--configs", "paper", "--json", str(tmp_path / "t.json")]
    rows = tp.main(argv)
    variants = tp.default_variants("cuda").split(",")  # with triton: its four variants too
    assert len(rows) == len(variants) * 2 * 2  # fp32, bf16 × eager, graphed
    for r in rows:
        assert "error" not in r, r
        assert r["tokens_per_s"] > 0 and r["peak_mem_mib"] > 0


def test_profile_adds_launches_and_time_per_step(tmp_path):
    argv = [*FAST, "--variants", "hornn-fofe,lstm", "--profile", "--json", str(tmp_path / "p.json")]
    rows = tp.main(argv)
    assert all(r["kernels_per_step"] > 0 and r["kernel_ms_per_step"] > 0 for r in rows)
    saved = json.loads((tmp_path / "p.json").read_text())["results"]
    assert [r["kernels_per_step"] for r in saved] == [r["kernels_per_step"] for r in rows]


@cuda
def test_cuda_triton_tiles_times_fused_and_each_tile_choice(tmp_path):
    tt = load_benchmark("triton_tiles")

    out = tmp_path / "tiles.json"
    argv = ["--configs", "paper", "--hidden", "32", "--batch", "4", "--bptt", "5"]
    argv += [
        "--poolings",
        "fofe",
        "--precisions",
        "fp32,bf16",
        "--tiles",
        "16x16x32x4,16x32x32x2x2",
    ]
    assert tt.main([*argv, "--rounds", "2", "--iters", "2", "--json", str(out)]) == 0
    assert TILES_ENV not in os.environ
    rows = json.loads(out.read_text())["results"]
    got = [(r["precision"], r["engine"], r["tiles"]) for r in rows]
    tiles = [None, [16, 16, 32, 4, 1], [16, 32, 32, 2, 2]]  # 4 parts: split 1
    want = [(p, "fused" if t is None else "triton", t) for p in ("fp32", "bf16") for t in tiles]
    assert got == want
    for r in rows:
        assert "error" not in r, r
        assert r["ms_per_iter"] > 0 and len(r["round_ms"]) == 2 and r["hidden"] == 32
        if r["engine"] == "triton":
            assert r["ratio_to_fused"] > 0 and r["max_abs_diff"] < 2e-2
    for precision in ("fp32", "bf16"):
        assert sum(bool(r.get("best")) for r in rows if r["precision"] == precision) == 1
    assert [r["default"] for r in rows if r["engine"] == "triton"] == [True, False] * 2


@pytest.mark.skipif(not onednn_linear_works(), reason="needs oneDNN's linear on an x86-64 CPU")
def test_step_gemm_benchmark_times_both_products_and_the_layer(tmp_path):
    sg = load_benchmark("step_gemm")
    out = tmp_path / "s.json"
    argv = ["--poolings", "sum,gated", "--hidden", "256", "--batch", "2", "--bptt", "3"]
    rows = sg.main([*argv, "--rounds", "1", "--repeats", "1", "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["results"] == json.loads(json.dumps(rows))
    check_meta(data["meta"], "step_gemm.py")
    assert data["meta"]["command"].startswith("python benchmarks/step_gemm.py --poolings sum")
    products = [r["case"] for r in rows if r["table"] == "product"]
    assert len(products) == 10 and "gated forward oneDNN" in products
    layers = [r["case"] for r in rows if r["table"] == "layer"]
    assert layers == [  # H 256: the engine takes oneDNN
        "sum layer, engine (oneDNN)",
        "sum layer, mm",
        "gated layer, engine (oneDNN)",
        "gated layer, mm",
    ]
    assert all(r["ms"] > 0 for r in rows)


def _cpu_runs_a_bf16_lstm() -> bool:
    """Return whether oneDNN runs torch.nn.LSTM under bf16 autocast here (not on AVX2-only
    CPUs: "could not create a primitive descriptor")."""
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.LSTM(4, 4)(torch.randn(2, 1, 4))
    except RuntimeError:
        return False
    return True


def test_precision_benchmark_measures_each_precision_against_float64(tmp_path):
    """benchmarks/precision.py on CPU: a row per pooling and recurrence precision and one for
    the LSTM peer, errors against float64 in the range bf16 gives; "fp16" is "autocast" here."""
    pb = load_benchmark("precision")
    out = tmp_path / "p.json"
    argv = ["--hidden", "16", "--batch", "3", "--bptt", "5", "--seeds", "2", "--json", str(out)]
    rows = pb.main(argv)
    data = json.loads(out.read_text())
    assert data["results"] == json.loads(json.dumps(rows))
    check_meta(data["meta"], "precision.py")
    keyed = {(r["pooling"], r["recurrence_precision"]): r for r in rows}
    assert set(keyed) == {(p, q) for p in PAPER_POOLINGS for q in ("fp32", "autocast", "fp16")} | {
        ("lstm", "-")
    }
    for row in rows:
        if row["pooling"] == "lstm" and not _cpu_runs_a_bf16_lstm():  # the row says why
            assert row["dtype"] == "bf16" and "primitive descriptor" in row["error"]
            continue
        assert row["dtype"] == "bf16" and "error" not in row
        grad_limit = 1.0 if row["pooling"] == "max" else 5e-2  # max: a flipped winner moves it
        assert 1e-4 < row["output_err"] < 3e-2 and 1e-4 < row["grad_err"] < grad_limit
    for pooling in PAPER_POOLINGS:  # on a CPU precision "fp16" runs autocast's dtype: the same bits
        fp16, autocast = keyed[(pooling, "fp16")], keyed[(pooling, "autocast")]
        assert fp16["output_err"] == autocast["output_err"]
        assert keyed[(pooling, "fp32")]["output_err"] != autocast["output_err"]
    with pytest.raises(SystemExit):
        pb.main(["--seeds", "0"])


def test_markdown_table_of_a_real_run(tmp_path):
    """benchmarks/markdown_table.py: one row per variant, a column per config, the LSTM's own
    tokens/s; bold exactly where a HORNN row meets the issue's goal (gated: 0.8)."""
    out = tmp_path / "t.json"
    tp.main([*FAST, "--variants", "hornn-fofe,hornn-gated,lstm", "--json", str(out)])
    data = json.loads(out.read_text())
    rows = {r["variant"]: r for r in data["results"]}
    rows["hornn-fofe"]["ratio_to_best_lstm"] = 0.999  # just short of 1.0
    rows["hornn-gated"]["ratio_to_best_lstm"] = 0.8  # gated's goal, met
    data["results"].append({**rows["lstm"], "variant": "gru", "arch": "gru", "tokens_per_s": None})
    del data["results"][-1]["tokens_per_s"]  # a failed row
    table = load_benchmark("markdown_table").markdown(data).splitlines()
    assert table[0] == "| variant | paper fp32 |"
    fofe, gated, lstm, gru = table[2:6]
    assert fofe.startswith("| hornn-fofe | ") and fofe.endswith(", 1.00× |")  # rounded, not bold
    assert gated.endswith(", **0.80×** |")
    assert lstm == f"| lstm | {rows['lstm']['tokens_per_s'] / 1000:.0f}K |"
    assert gru == "| gru | failed |"
    assert "`python benchmarks/throughput.py --vocab 50" in table[-1]


def test_markdown_table_refuses_a_bad_file_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert load_benchmark("markdown_table").main([str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"markdown_table.py: cannot read {bad}")


def test_shard_check_benchmark_times_every_row_cold_and_warm(tmp_path):
    """benchmarks/shard_check.py at a tiny size: every row cold and warm, the recorded check
    reads nothing, and the folder it wrote is gone."""
    sc = load_benchmark("shard_check")
    out = tmp_path / "s.json"
    argv = ["--gb", "0.002", "--shard-tokens", "300000", "--repeats", "1", "--dir", str(tmp_path)]
    rows = sc.main([*argv, "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["results"] == json.loads(json.dumps(rows))
    check_meta(data["meta"], "shard_check.py")
    assert data["meta"]["command"].startswith("python benchmarks/shard_check.py --gb 0.002")
    threads = data["meta"]["hash_threads"]
    cases = ["read", f"read, {threads} threads", "sha256, 1 thread", f"sha256, {threads} threads",
             f"crc32, {threads} threads", f"blake2b, {threads} threads", "verify_shards",
             "verify_shards, recorded"]  # fmt: skip
    assert [(r["case"], r["cache"]) for r in rows] == [
        (case, cache) for cache in ("cold", "warm") for case in cases
    ]
    for r in rows:
        assert r["shards"] == 4 and r["bytes"] == 2_000_000 + 4 * 64
        assert r["seconds"] > 0 and r["seconds_extrapolated"] == pytest.approx(
            r["seconds"] * 40 / (r["bytes"] / 1e9)
        )
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]


def test_scaling_projects_what_the_exchange_sends_and_what_the_step_waits_for():
    """The projection's arithmetic on a real plan: eager steps hide the output layer's
    all-reduce up to the window, graphed steps all-reduce the dense parts as one."""
    sc = load_benchmark("scaling")
    from hornn_dist.training.exchange import plan_exchange

    model = runner("hornn-fofe").model
    plan = plan_exchange(model, tokens=20, processes=8, reduce_dtype="bf16")
    sizes = plan.bytes_per_process()
    assert plan.rows is None and sizes["rows"] == 0  # 8 x 20 rows of 17 floats > 50 x 16 bf16
    ring = lambda b, n: 2 * (n - 1) / n * b / 450e9 + 2 * (n - 1) * 5e-6  # noqa: E731
    eager = sc.project_exchange(plan, 8, 450.0, 5.0, window_s=1e-5)
    assert eager["early"] == pytest.approx(ring(sizes["early"], 8))
    assert eager["hidden"] == pytest.approx(1e-5)
    assert eager["exposed"] == pytest.approx(eager["early"] - 1e-5 + ring(sizes["late"], 8))
    graphed = sc.project_exchange(plan, 8, 450.0, 5.0, window_s=None)
    assert graphed["hidden"] == 0
    assert graphed["exposed"] == pytest.approx(ring(sizes["early"] + sizes["late"], 8))
    two = plan_exchange(model, tokens=20, processes=2, reduce_dtype="fp32")
    assert two.rows == "embedding.weight"  # 2 x 20 rows of 17 floats < 50 x 16 fp32
    gathered = sc.project_exchange(two, 2, 450.0, 5.0, window_s=1.0)
    assert gathered["rows"] == pytest.approx(20 * 17 * 4 / 450e9 + 5e-6)
    assert gathered["exposed"] == pytest.approx(gathered["late"] + gathered["rows"])  # hidden


@pytest.mark.integration
def test_scaling_measures_the_step_its_window_and_real_collectives_and_projects_them(
    tmp_path, capsys
):
    """benchmarks/scaling.py at a tiny size on CPU: the step, its overlap window, what the
    exchange sends and real 2-process gloo collectives are measured; the table and the JSON
    hold a projected row for 1, 2, 4, 8, 16 and 64 GPUs per reduce dtype, efficiency 1 at one
    GPU and non-increasing after."""
    sc = load_benchmark("scaling")
    out = tmp_path / "s.json"
    argv = ["--vocab", "50", "--hidden", "16", "--batch-per-process", "4", "--bptt", "5",
            "--steps", "2", "--warmup", "1", "--rounds", "1", "--allreduce-repeats", "2"]  # fmt: skip
    rows = sc.main([*argv, "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["results"] == json.loads(json.dumps(rows))
    check_meta(data["meta"], "scaling.py")
    assert data["meta"]["command"].startswith("python benchmarks/scaling.py --vocab 50")
    (m,) = rows
    params = sum(p.numel() for p in runner("hornn-fofe").model.parameters())
    assert m["config"] == "paper" and m["batch_per_process"] == 4 and m["params"] == params
    assert m["grad_bytes"] == 4 * params and m["step_ms"] > 0 and m["mode"] == "eager"
    assert m["window_ms"] > 0 and len(m["window_steps_ms"]) == 2 and m["window_step_ms"] > 0
    ops = [(c["op"], c["dtype"], c["backend"], c["ranks"]) for c in m["collectives"]]
    assert ops == [("allreduce", "fp32", "gloo", 2), ("allreduce", "bf16", "gloo", 2),
                   ("allgather", "fp32", "gloo", 2)]  # fmt: skip
    assert all(c["ms"] > 0 and len(c["times_ms"]) == 2 for c in m["collectives"])
    assert list(m["projection"]) == ["fp32", "bf16"]
    for dtype, proj in m["projection"].items():
        assert [r["gpus"] for r in proj] == [1, 2, 4, 8, 16, 64]
        assert [r["link"] for r in proj] == ["intra-node"] * 4 + ["inter-node"] * 2
        assert all(r["reduce_dtype"] == dtype for r in proj)
        effs = [r["projected_efficiency"] for r in proj]
        assert effs[0] == pytest.approx(1.0) and all(0 < e <= 1 for e in effs)
        assert effs == sorted(effs, reverse=True)
        two = proj[1]
        assert two["rows_exchanged"] and two["projected_rows_ms"] > 0
        hidden = min(two["projected_early_ms"], m["window_ms"])
        assert two["projected_hidden_ms"] == pytest.approx(hidden)
        waited = two["projected_early_ms"] - hidden + two["projected_late_ms"]
        assert two["projected_exposed_ms"] == pytest.approx(waited + two["projected_rows_ms"])
        assert two["projected_step_ms"] == pytest.approx(
            m["step_ms"] + waited + two["projected_rows_ms"]
        )
    table = capsys.readouterr().out.splitlines()
    heads = [i for i, line in enumerate(table) if line.lstrip().startswith("GPUs")]
    assert len(heads) == 2
    for head in heads:
        counts = [int(line.split()[0]) for line in table[head + 1 : head + 7]]
        assert counts == [1, 2, 4, 8, 16, 64]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    for bad, message in (
        (["--batch-per-process", "0"], "scaling.py: --batch-per-process must be >= 1, got 0"),
        (["--configs", "huge"], "scaling.py: --configs: unknown 'huge'; choose from paper, big"),
        (["--reduce-dtypes", "fp16"],
         "scaling.py: --reduce-dtypes: unknown 'fp16'; choose from fp32, bf16"),
    ):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "benchmarks/scaling.py", *bad],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.strip().splitlines() == [message]


def test_scaling_reprojects_a_records_compute_without_timing_it(tmp_path, capsys):
    """--compute-from takes another run's step time (a GPU record on a CPU machine); with no
    window measured, its graphed projection overlaps nothing."""
    sc = load_benchmark("scaling")
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"meta": {}, "results": [
        {"config": "paper", "step_ms": 1.2, "step_round_ms": [1.2], "mode": "graphed"}]}))  # fmt: skip
    args = sc.parse_args(["--compute-from", str(record), "--vocab", "50", "--hidden", "16",
                          "--batch-per-process", "4", "--bptt", "5"])  # fmt: skip
    assert args.recorded["paper"]["step_ms"] == 1.2
    with pytest.raises(SystemExit):
        sc.parse_args(["--compute-from", str(record), "--configs", "big"])
    assert "no big config in it" in capsys.readouterr().err


@pytest.mark.integration
def test_all_reduce_mode_times_the_multi_process_step_against_the_one_process_one(tmp_path):
    """eager-ar runs TrainStep(reduce=True) in a one-process gloo group: the steps are the
    eager row's, and its row gives the ratio to that row."""
    import torch.distributed as dist

    try:
        eager, reducing = runner("hornn-gated"), runner("hornn-gated", mode="eager-ar")
        assert reducing.train.reduce and reducing.train.processes == 1 and not eager.train.reduce
        for run in (eager, reducing):
            run.run(3)
        assert torch.equal(reducing.train.loss, eager.train.loss)
        for got, want in zip(reducing.model.parameters(), eager.model.parameters(), strict=True):
            assert torch.equal(got, want)
        out = tmp_path / "t.json"
        rows = tp.main([*FAST, "--variants", "hornn-fofe", "--modes", "eager,eager-ar",
                        "--json", str(out)])  # fmt: skip
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    ar = next(r for r in rows if r["mode"] == "eager-ar")
    alone = next(r for r in rows if r["mode"] == "eager")
    assert ar["ratio_to_one_process"] == pytest.approx(ar["tokens_per_s"] / alone["tokens_per_s"])
    assert "ratio_to_one_process" not in alone


def test_forced_tiles_sets_the_users_variable_for_the_block_and_restores_it(monkeypatch):
    from hornn_dist.models import triton_tiles

    common = load_benchmark("common")
    chosen = triton_tiles.choose_tiles(20, 400)
    monkeypatch.setenv(TILES_ENV, "32x32x32x4x1")  # the user's own forcing
    with common.forced_tiles((16, 16, 16, 4, 2)):
        assert os.environ[TILES_ENV] == "16x16x16x4x2"
        forced = triton_tiles.choose_tiles(20, 400)
        assert (forced["BLOCK_B"], forced["BLOCK_H"], forced["SPLIT"]) == (16, 16, 2)
    assert os.environ[TILES_ENV] == "32x32x32x4x1"
    with common.forced_tiles(None):
        assert TILES_ENV not in os.environ
        assert triton_tiles.choose_tiles(20, 400) == chosen  # the engine's own choice
    assert os.environ[TILES_ENV] == "32x32x32x4x1"


def test_output_layer_benchmark_times_each_layer_beside_its_gemms_and_each_step(tmp_path):
    """benchmarks/output_layer.py at tiny sizes: the layer part's rows (the three GEMMs, then
    each output layer) and the step part's (each model over each layer, in a process of its
    own; the HORNN's here), their ratios to the plain layer, and the JSON with its metadata."""
    bench = load_benchmark("output_layer")
    out = tmp_path / "ol.json"
    argv = ["--sizes", "60x8", "--batch", "4", "--bptt", "5", "--steps", "1", "--rounds", "1",
            "--models", "hornn", "--json", str(out)]  # fmt: skip
    rows = bench.main(argv)
    layers = [r["layer"] for r in rows if r["part"] == "layer"]
    assert layers == ["gemms", "plain", "fused", "adaptive"]
    steps = [r for r in rows if r["part"] == "step"]
    assert [(r["model"], r["layer"]) for r in steps] == [
        ("hornn", layer) for layer in ("plain", "fused", "adaptive")
    ]
    for row in steps:
        assert "error" not in row, row
        assert row["tokens_per_s"] > 0 and row["tokens_per_cpu_s"] > 0 and row["step_peak_mib"] >= 0
        assert 0 < row["loss"] < 1.2 * math.log(60)  # an untrained model's, about
        if row["layer"] == "plain":
            assert row["cpu_speed_vs_plain"] == 1.0
    data = json.loads(out.read_text())
    check_meta(data["meta"], "output_layer.py")
    assert len(data["meta"]["load_at_start"]) == 3 and len(data["results"]) == len(rows)


def test_output_layer_benchmark_cuts_the_adaptive_softmax_by_the_rule_asked(tmp_path):
    """--cutoffs coverage: the product's default rule (`coverage_cutoffs`) on the Zipf counts the
    words are drawn from, in both parts; the default keeps 5% and 20% of V."""
    from hornn_dist.models import build_model
    from hornn_dist.models.output_layer import coverage_cutoffs, default_cutoffs

    bench = load_benchmark("output_layer")
    zipf = [round(1e12 / (k + 1)) for k in range(600)]
    assert bench.cutoffs_for("coverage", 600) == coverage_cutoffs(zipf)
    assert bench.cutoffs_for("fractions", 600) == default_cutoffs(600) == [30, 120]
    assert coverage_cutoffs(zipf)[0] > 120  # Zipf's head covers 90% only past 20% of V
    for rule in ("fractions", "coverage"):
        argv = ["--sizes", "600x8", "--batch", "4", "--bptt", "5", "--steps", "1", "--rounds", "1",
                "--models", "hornn", "--layers", "adaptive", "--cutoffs", rule,
                "--json", str(tmp_path / f"{rule}.json")]  # fmt: skip
        rows = bench.main(argv)
        cfg = bench.model_config("hornn", "adaptive", 8, 600, rule)
        assert cfg.adaptive_cutoffs == bench.cutoffs_for(rule, 600)
        step = next(r for r in rows if r["part"] == "step")
        assert "error" not in step and step["params"] == build_model(cfg, 600).num_parameters()


def test_output_layer_benchmark_before_times_the_plain_step_as_it_ran_before(tmp_path):
    """--before: a plain row stepped as the trainer did before fused SGD and huge pages, in a
    process of its own, first in its group; every other row's speed against it as well."""
    bench = load_benchmark("output_layer")
    argv = ["--sizes", "60x8", "--batch", "4", "--bptt", "5", "--steps", "1", "--models", "lstm",
            "--parts", "step", "--before", "--json", str(tmp_path / "ol.json")]  # fmt: skip
    rows = bench.main(argv)
    assert [(r["layer"], r["before"]) for r in rows] == [
        ("plain", True), ("plain", False), ("fused", False), ("adaptive", False)
    ]  # fmt: skip
    old, *now = rows
    assert (old["fused_sgd"], old["huge_pages"]) == (False, False)
    pages = os.environ["THP_MEM_ALLOC_ENABLE"] == "1"  # hornn_dist's default, or the user's 0
    assert all((r["fused_sgd"], r["huge_pages"]) == (True, pages) for r in now)
    assert old["cpu_speed_vs_plain"] == 1.0 and "cpu_speed_vs_plain_before" not in old
    for r in now:
        assert r["cpu_speed_vs_plain_before"] == pytest.approx(
            r["tokens_per_cpu_s"] / old["tokens_per_cpu_s"]
        )
