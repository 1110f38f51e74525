"""What the trainer refuses before its first step, and how a stalled rank ends a run: one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hornn_dist.data.streams import ArrayTokens, TBPTTStream
from hornn_dist.models import ModelConfig, build_model
from hornn_dist.runtime import collective_failure
from hornn_dist.training.memory import (
    activation_elements,
    cgroup_folders,
    cgroup_free_bytes,
    check_fits,
    parameter_count,
)
from hornn_dist.util.errors import ConfigError
from tests.train_helpers import (
    REPO,
    check_ok,
    children,
    env,
    read_until,
    run_here,
    start,
    two_rank_command,
    write_tiny_config,
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("guards")
    check_ok(run_here("hornn_dist.prepare", str(write_tiny_config(folder))))
    return folder


def train(workdir: Path, *extra: str) -> subprocess.CompletedProcess:
    args = [str(workdir / "config.toml"), "--set", f"train.output_dir={workdir / 'run'}"]
    return run_here("hornn_dist.train", *args, "--no-resume", *extra)


def only_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    return line


def test_a_missing_test_split_fails_before_the_first_step(workdir: Path) -> None:
    proc = train(workdir, "--set", "data.test=[]")
    line = only_error_line(proc)
    assert "no test split" in line and "data.test" in line
    assert "step 2: loss" not in proc.stderr  # failed at start, not after training


def test_a_corpus_of_a_train_file_alone_is_refused_before_it_is_prepared(tmp_path: Path) -> None:
    """Without valid and test files, prepare and train refuse at once, naming the keys that
    give the splits, data.heldout_chars among them; what that hint says then trains."""
    config = write_tiny_config(tmp_path, data={"valid": [], "test": []})
    for command in ("hornn_dist.prepare", "hornn_dist.train"):
        line = only_error_line(run_here(command, str(config)))
        assert "no valid split and no test split" in line, line
        assert "data.valid and data.test" in line and "data.heldout_chars = N" in line
    assert not (tmp_path / "cache").exists()  # nothing was read or prepared
    held_out = ("data.heldout_chars=600", "data.valid_chars=300", "train.max_steps=2")
    check_ok(
        run_here("hornn_dist.train", str(config), *(a for kv in held_out for a in ("--set", kv)))
    )
    half = ("--set", "data.heldout_chars=600", "--set", "data.valid_chars=600")
    line = only_error_line(run_here("hornn_dist.prepare", str(config), *half))
    assert "leaves no test split" in line and "data.valid_chars between 1 and" in line


@pytest.mark.parametrize("hidden", ["200000", "99999999999999999999"])
def test_a_model_too_large_is_refused_before_allocating(workdir: Path, hidden: str) -> None:
    line = only_error_line(train(workdir, "--set", f"model.hidden_size={hidden}"))
    assert "model.hidden_size" in line
    if hidden == "200000":
        assert "parameters" in line and "GiB cpu has available" in line


def test_parameter_count_is_the_built_models() -> None:
    for cfg in (
        ModelConfig(hidden_size=24, embedding_size=16),
        ModelConfig(arch="lstm", hidden_size=8),
    ):
        assert parameter_count(cfg, 100) == build_model(cfg, 100).num_parameters()
        assert check_fits(cfg, 100, torch.device("cpu")) == parameter_count(cfg, 100)


def test_a_step_whose_activations_cannot_fit_is_refused_before_allocating(workdir: Path) -> None:
    # the scan's buffer: (order + bptt) x batch x (order + 1) x hidden floats, ~500 GB here
    big = ["model.order=4000", "model.hidden_size=200", "train.batch_size=40"]
    line = only_error_line(train(workdir, *[a for kv in big for a in ("--set", kv)]))
    assert "activations need" in line and "model.order" in line and "train.batch_size" in line


def test_the_activation_estimate_grows_with_order_squared() -> None:
    cfg = ModelConfig(order=1000, hidden_size=32, embedding_size=32)
    twice = ModelConfig(order=2000, hidden_size=32, embedding_size=32)
    ratio = activation_elements(twice, 100, 8, 16) / activation_elements(cfg, 100, 8, 16)
    assert 3.8 < ratio < 4.2


_PEAK = """
import sys, torch
from hornn_dist.models import ModelConfig, build_model
from hornn_dist.training.memory import activation_elements
cfg = ModelConfig(order=256, pooling=sys.argv[1], hidden_size=64, embedding_size=64)
model = build_model(cfg, 1000)
x, y = torch.randint(0, 1000, (8, 16)), torch.randint(0, 1000, (8, 16))
warm = build_model(ModelConfig(order=2, pooling=sys.argv[1], hidden_size=8), 1000)
torch.nn.functional.cross_entropy(warm(x[:2])[0].view(-1, 1000), y[:2].view(-1)).backward()
def status(key):  # kB of /proc/self/status's line `key`, in bytes
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))
before, files = status("VmRSS"), status("RssFile")
with open("/proc/self/clear_refs", "w") as f:  # the peak (VmHWM) restarts from here: the step's
    f.write("5")
logits, _ = model(x)
torch.nn.functional.cross_entropy(logits.view(-1, 1000), y.view(-1)).backward()
# the step's peak growth, less library pages read in meanwhile (a busy machine evicts them)
grown = status("VmHWM") - before - max(status("RssFile") - files, 0)
print(grown / (activation_elements(cfg, 1000, 16, 8) * 4))
"""


@pytest.mark.parametrize("pooling", ["fofe", "gated"])
def test_the_activation_estimate_is_near_a_measured_step(pooling: str) -> None:
    """The step's peak resident memory (VmHWM of a fresh process, reset just before the step
    through /proc/self/clear_refs, after a tiny warm-up step that loads what a first step loads
    lazily, less its resident memory before the step) is near the estimate, rather above it: a
    refused step surely does not fit, one that passes is not far off."""
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux's /proc/self/clear_refs to restart the peak")
    proc = subprocess.run([sys.executable, "-c", _PEAK, pooling], capture_output=True, text=True,
                          cwd=REPO, env=env(), timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    # 1.05-1.09 measured alone and beside six busy processes: a 2x underestimate fails this
    assert 0.95 <= float(proc.stdout) <= 1.5


def test_a_cgroup_limit_is_honoured(tmp_path: Path) -> None:
    """A 1.5 GB container (v2 or v1 files) refuses hidden_size=6000, which the host would fit."""
    cfg = ModelConfig(hidden_size=6000, embedding_size=128)
    v2, v1 = tmp_path / "v2", tmp_path / "v1"
    v2.mkdir(), v1.mkdir()
    (v2 / "memory.max").write_text(f"{3 * 2**29}\n")
    (v2 / "memory.current").write_text(f"{2**28}\n")
    (v2 / "memory.stat").write_text(f"anon 0\ninactive_file {2**28}\n")  # reclaimable
    (v1 / "memory.limit_in_bytes").write_text(f"{3 * 2**29}\n")
    (v1 / "memory.usage_in_bytes").write_text("0\n")
    assert cgroup_free_bytes([v2]) == cgroup_free_bytes([v1]) == 3 * 2**29
    for folder in (v2, v1):
        with pytest.raises(ConfigError, match=r"1\.50 GiB cpu has available.*lower model\.hid"):
            check_fits(cfg, 5053, torch.device("cpu"), 20, 30, cgroups=[folder])
    (v2 / "memory.max").write_text("max\n")  # no limit: the host's memory decides
    assert cgroup_free_bytes([v2]) is None
    assert check_fits(cfg, 5053, torch.device("cpu"), 20, 30, cgroups=[v2])


def test_the_refusals_numbers_add_up_to_more_than_is_available(tmp_path: Path) -> None:
    """A refusal names every part of the need (the runtime's share too), so that the parts it
    says add up to more than is available."""
    cfg = ModelConfig(hidden_size=1400, embedding_size=128)
    limit = tmp_path / "v2"
    limit.mkdir()
    (limit / "memory.max").write_text(f"{int(0.4 * 2**30)}\n")
    (limit / "memory.current").write_text("0\n")
    with pytest.raises(ConfigError) as raised:
        check_fits(cfg, 5053, torch.device("cpu"), 20, 30, cgroups=[limit])
    line = str(raised.value)
    numbers = [float(x) for x in re.findall(r"(\d+\.\d+) GiB", line)]
    part, runtime, total, free = numbers[0], numbers[-3], numbers[-2], numbers[-1]
    assert part < free < total and abs(total - part - runtime) < 0.2, line
    assert f"{free:.2f} GiB cpu has available" in line


@pytest.mark.parametrize(
    ("hidden", "embedding", "fix"),
    [(8, 100_000, "lower model.embedding_size or model.hidden_size"),
     (20_000, 8, "lower model.hidden_size or model.embedding_size")],
)  # fmt: skip
def test_the_message_names_the_larger_size_first(
    tmp_path: Path, hidden: int, embedding: int, fix: str
) -> None:
    (tmp_path / "memory.max").write_text(f"{2**30}\n")  # a 1 GiB container
    cfg = ModelConfig(hidden_size=hidden, embedding_size=embedding)
    with pytest.raises(ConfigError, match=f"parameters.*; {fix}, or the vocabulary"):
        check_fits(cfg, 5000, torch.device("cpu"), 4, 8, cgroups=[tmp_path])


def test_the_cgroup_folders_are_the_process_own_and_its_parents(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/job/step\n1:cpu:/x\n0::/user/app\n")
    root = tmp_path / "fs"
    folders = cgroup_folders(proc, root)
    for want in ("memory/job/step", "memory/job", "memory", "user/app", "user", "."):
        assert (root / want).resolve() in [f.resolve() for f in folders], want
    assert root / "cpu" / "x" not in folders


def test_more_processes_than_streams_is_one_line() -> None:
    tokens = ArrayTokens(np.arange(1000, dtype=np.int64))
    with pytest.raises(ConfigError, match=r"train.batch_size=1 streams cannot feed 2 processes"):
        TBPTTStream(tokens, 1, 5, rank=0, world_size=2)


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_stalled_rank_ends_the_run_with_one_line(workdir: Path) -> None:
    args = [str(workdir / "config.toml"), "--set", f"train.output_dir={workdir / 'stalled'}"]
    args += ["--set", "train.epochs=1000", "--set", "train.collective_timeout=10"]
    cmd = two_rank_command("hornn_dist.train", *args)
    proc = start(cmd, TORCH_ELASTIC_SHUTDOWN_TIMEOUT="2")
    lines = read_until(proc, "step 10: loss")
    pids = children(proc)
    assert len(pids) == 2, pids
    stalled = pids[-1]
    subprocess.run(["kill", "-STOP", str(stalled)], check=True)
    try:
        lines += read_until(proc, "error:", timeout=120)  # bounded by the timeout it names
    finally:  # torch's agent would wait 30 s for the stopped rank to take its SIGTERM
        subprocess.run(["kill", "-KILL", str(stalled)], check=False)
    _, rest = proc.communicate(timeout=120)
    log = "".join(lines) + rest
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, log[-3000:]
    assert "the other processes did not answer while" in errors[0]
    assert "train.collective_timeout = 10 s" in errors[0]
    assert proc.returncode != 0


@pytest.mark.parametrize(
    "message",
    [
        "[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms for recv operation",
        "Application timeout caused pair closure",  # gloo's, when the peer is stopped mid-wait
        "[gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:29500",
        "NCCL communicator was aborted on rank 1",
    ],
)
def test_each_way_a_collective_says_its_peer_is_gone_becomes_the_one_line(message: str) -> None:
    """Every wording gloo and NCCL give a stalled or dead peer is told as the one line; an
    error of this process's own (out of memory, a bug) is left to say itself."""
    failure = collective_failure(RuntimeError(message), "exchanging gradients", 10)
    assert failure is not None, message
    line = str(failure)
    assert "the other processes did not answer while exchanging gradients" in line
    assert "train.collective_timeout = 10 s" in line and "\n" not in line
    assert (
        collective_failure(RuntimeError("CUDA out of memory. Tried to allocate"), "x", 10) is None
    )
    assert collective_failure(ValueError(message), "x", 10) is None


def test_two_prepares_into_one_cache_dir_agree(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path, train_words=20000)
    cmd = [sys.executable, "-m", "hornn_dist.prepare", str(config), "--quiet"]
    procs = [
        subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    folders = [out.decode().splitlines()[0] for out, _ in outs]
    assert folders[0] == folders[1]
    cache = tmp_path / "cache"
    assert [p.name for p in cache.iterdir()] == [Path(folders[0]).name]  # no temp folder left
    from hornn_dist.data.shards import open_corpus

    open_corpus(folders[0], verify=True)
