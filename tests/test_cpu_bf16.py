"""bf16 on a CPU: chosen once (models/precision.py: resolve_mixed_precision), said at start-up,
really run under Accelerate's CPU autocast, and resumed bit for bit after a kill."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from hornn_dist.models.precision import (
    CPU_BF16_FLAGS,
    cpu_bf16_flags,
    resolve_mixed_precision,
)
from hornn_dist.run.checkpoint import list_checkpoints
from tests.train_helpers import (
    KILL_IN_SECOND_CHECKPOINT,
    check_ok,
    final_weights,
    run_here,
    run_patched,
    write_tiny_config,
)

HAS_BF16 = bool(cpu_bf16_flags()) and not torch.cuda.is_available()
needs_bf16_cpu = pytest.mark.skipif(not HAS_BF16, reason="needs a CPU with bf16 instructions")
CPUINFO = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 movbe\n\nprocessor\t: 1\n"


def test_cpu_flags_are_read_from_cpuinfo() -> None:
    assert cpu_bf16_flags(CPUINFO) == ("avx512_bf16",)
    assert cpu_bf16_flags(CPUINFO.replace(" avx512_bf16", " amx_bf16 avx512_bf16")) == (
        "avx512_bf16",
        "amx_bf16",
    )
    assert cpu_bf16_flags("flags\t\t: fpu sse avx2 avx512f\n") == ()
    assert cpu_bf16_flags("") == ()


@pytest.mark.parametrize("requested", ["bf16", "auto"])
def test_a_cpu_with_bf16_runs_bf16_and_one_without_runs_fp32(requested: str) -> None:
    """bf16 where the CPU has the instructions and the model measured faster, else fp32 with
    the reason; the same for "auto"."""
    chosen = resolve_mixed_precision(requested, "lstm", on_cuda=False, cpu_flags=("amx_bf16",))
    assert chosen.name == "bf16"
    assert (
        chosen.describe() == f'bf16 (train.mixed_precision = "{requested}": this CPU has amx_bf16)'
    )
    without = resolve_mixed_precision(requested, "hornn", on_cuda=False, cpu_flags=())
    assert without.name == "no"
    assert without.describe().startswith("fp32 (") and all(
        flag in without.reason for flag in CPU_BF16_FLAGS
    )
    other = resolve_mixed_precision(requested, "transformer", on_cuda=False, cpu_flags=("x",))
    assert other.name == "no" and "not measured faster for transformer" in other.reason


def test_fp16_and_no_on_a_cpu_and_cuda_as_asked() -> None:
    fp16 = resolve_mixed_precision("fp16", "hornn", on_cuda=False, cpu_flags=("avx512_bf16",))
    assert fp16.name == "no" and "CUDA only" in fp16.reason
    assert (
        resolve_mixed_precision("no", "hornn", on_cuda=False, cpu_flags=("amx_bf16",)).name == "no"
    )
    for asked in ("no", "bf16", "fp16"):
        assert resolve_mixed_precision(asked, "hornn", on_cuda=True).name == asked


@needs_bf16_cpu
def test_a_cpu_run_says_it_trains_in_bf16_and_its_weights_differ_from_fp32(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path, train={"mixed_precision": "bf16"})
    runs = {}
    for name, mixed in (("bf16", "bf16"), ("fp32", "no")):
        out = tmp_path / name
        proc = run_here(
            "hornn_dist.train",
            str(config),
            "--set", f"train.output_dir={out}",
            "--set", f"train.mixed_precision={mixed}",
            "--set", "train.max_steps=6",
        )  # fmt: skip
        check_ok(proc)
        runs[name] = (proc.stderr, final_weights(out))
    start = runs["bf16"][0]
    flags = ", ".join(cpu_bf16_flags())
    assert f'mixed precision bf16 (train.mixed_precision = "bf16": this CPU has {flags})' in start
    assert "layers in bf16" in start  # the fused HORNN recurrence in bf16 too
    assert 'mixed precision fp32 (train.mixed_precision = "no")' in runs["fp32"][0]
    bf16, fp32 = runs["bf16"][1], runs["fp32"][1]
    assert all(w.dtype == torch.float32 for w in bf16.values())  # fp32 master weights
    assert any(not torch.equal(bf16[k], fp32[k]) for k in fp32)  # autocast really ran


@pytest.mark.integration
@needs_bf16_cpu
def test_bf16_on_a_cpu_resumes_bit_for_bit_after_a_kill(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path, train={"mixed_precision": "bf16"})
    check_ok(run_here("hornn_dist.prepare", str(config)))
    steps = 30  # two epoch ends (14 steps an epoch)

    def args(name: str) -> list[str]:
        out = tmp_path / name
        return [
            str(config),
            "--set",
            f"train.output_dir={out}",
            "--set",
            f"train.max_steps={steps}",
        ]

    check_ok(run_here("hornn_dist.train", *args("straight")))
    killed = run_patched(KILL_IN_SECOND_CHECKPOINT, *args("killed"))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    complete = list_checkpoints(tmp_path / "killed")
    assert [c.name for c in complete] == ["step_00000005"]
    rerun = run_here("hornn_dist.train", *args("killed"))
    check_ok(rerun)
    assert f"resuming from {complete[0]}" in rerun.stderr and "mixed precision bf16" in rerun.stderr
    straight, resumed = final_weights(tmp_path / "straight"), final_weights(tmp_path / "killed")
    assert straight.keys() == resumed.keys()
    for key in straight:
        assert torch.equal(straight[key], resumed[key]), key
