"""Bad configs and inputs reach the user as one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.train_helpers import (
    REPO,
    check_ok,
    env,
    launch_two_ranks,
    run_module,
    write_tiny_config,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("errors")
    write_tiny_config(folder)
    (folder / "bad_utf8.txt").write_bytes(b"good words here\n" + b"caf\xe9 au lait\n")
    return folder


def _run(module: str, *args: str, extra_env: dict[str, str] | None = None):
    child_env = env()
    child_env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=child_env,
        timeout=300,
    )


TRAIN_CASES = {
    "missing config": (["{dir}/nope.toml"], "config file {dir}/nope.toml not found"),
    "typo key": (["--set", "train.max_stepz=5"], "did you mean train.max_steps?"),
    "wrong type": (["--set", "train.bptt='x'"], "train.bptt must be of type int"),
    "out of range": (["--set", "optim.lr=0"], "optim.lr must be > 0, got 0.0"),
    "bad choice": (
        ["--set", "model.pooling=mean"],
        "model.pooling must be one of sum, max, fofe, gated",
    ),
    "malformed --set": (["--set", "train.bptt"], "must look like section.key=value"),
    "split too small": (["--set", "train.batch_size=1000"], "too few for 1000 streams"),
    "missing data file": (["--set", 'data.train=["{dir}/absent.txt"]'], "{dir}/absent.txt"),
    "invalid utf-8": (["--set", 'data.train=["{dir}/bad_utf8.txt"]'], "byte"),
    "resume path": (["--resume", "{dir}/no_such_run"], "no_such_run does not exist"),
    "non-finite loss": (
        [
            "--set",
            "optim.lr=1e30",
            "--set",
            "optim.clip_mode=norm",
            "--set",
            "optim.clip=0",
            "--set",
            "optim.max_col_norm=0",
        ],
        "training loss became NaN/inf at step",
    ),
}


@pytest.mark.parametrize("case", sorted(TRAIN_CASES))
def test_train_errors_are_one_line(tiny: Path, case: str) -> None:
    args, expected = TRAIN_CASES[case]
    args = [a.format(dir=tiny) for a in args]
    config = [] if case == "missing config" else [str(tiny / "config.toml")]
    out = ["--set", f"train.output_dir={tiny / ('run_' + case.replace(' ', '_'))}"]
    proc = _run("hornn_dist.train", *config, *args, *out)
    _assert_one_line_error(proc, expected.format(dir=tiny))
    if case == "non-finite loss":  # nothing was checkpointed after the loss went bad
        assert not (tiny / "run_non-finite_loss" / "checkpoints").exists()


def test_world_size_mismatch_is_one_line(tiny: Path) -> None:
    proc = _run(
        "hornn_dist.train",
        str(tiny / "config.toml"),
        "--set",
        f"train.output_dir={tiny / 'run_ws'}",
        extra_env={"WORLD_SIZE": "2"},
    )
    _assert_one_line_error(proc, "cannot start the distributed run")


def test_evaluate_and_generate_errors(tiny: Path) -> None:
    empty = tiny / "empty_run"
    (empty / "checkpoints").mkdir(parents=True)
    _assert_one_line_error(_run("hornn_dist.evaluate", str(empty)), "no complete checkpoint")
    _assert_one_line_error(
        _run("hornn_dist.generate", str(empty), "--temperature", "0"), "--temperature must be > 0"
    )


def test_evaluate_and_generate_from_a_trained_run(tiny: Path) -> None:
    run = tiny / "run_ok"
    check_ok(run_module("hornn_dist.train", str(tiny / "config.toml"), "--set",
                        f"train.output_dir={run}", "--set", "train.max_steps=6"))  # fmt: skip
    proc = run_module("hornn_dist.evaluate", str(run), "--split", "test")
    check_ok(proc)
    line = proc.stdout.strip().splitlines()[-1].split()
    assert line[:3] == ["split", "test:", "tokens"] and int(line[3]) == 216
    assert float(line[7]) > 1.0  # ppl
    bad = _run("hornn_dist.evaluate", str(run), "--split", "nope")
    _assert_one_line_error(bad, "split 'nope' not in the corpus")
    sample = run_module("hornn_dist.generate", str(run / "checkpoints" / "latest"), "--prompt", "w1 w2",
                        "--tokens", "12", "--seed", "3")  # fmt: skip
    check_ok(sample)
    words = sample.stdout.split()
    assert words[:2] == ["w1", "w2"] and len(words) > 2  # sampled <eos> print as line breaks
    assert all(w.startswith("w") or w == "<unk>" for w in words)
    again = run_module("hornn_dist.generate", str(run), "--prompt", "w1 w2", "--tokens", "12",
                       "--seed", "3")  # fmt: skip
    assert again.stdout == sample.stdout  # the seed makes it repeatable


def _assert_one_line_error(proc: subprocess.CompletedProcess, expected: str) -> None:
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr[-2000:]
    assert expected in errors[0], errors[0]


_EXIT_PROBE = """
import atexit, logging, sys
from hornn_dist.errors import ConfigError
from hornn_dist.runtime import run_cli, setup_logging

def main(argv):
    setup_logging(True)
    atexit.register(lambda: print("interpreter shutdown", flush=True))
    logging.getLogger("hornn_dist").info("last log line")
    print("buffered stdout line", end="")  # no newline: only a flush writes it
    if argv == ["fail"]:
        raise ConfigError("train.bptt must be >= 1; set train.bptt")
    return 0

run_cli(main, sys.argv[1:])
"""


@pytest.mark.parametrize("world_size", [None, "2"])
@pytest.mark.parametrize("fail", [False, True])
def test_cli_exit_of_a_process_with_peers_skips_interpreter_shutdown(world_size, fail) -> None:
    """Under a multi-process launch the CLI ends with os._exit (a gloo worker thread can abort a
    finalising interpreter), after flushing the logs; alone it exits normally."""
    child_env = env()
    if world_size is not None:
        child_env["WORLD_SIZE"] = world_size
    proc = subprocess.run(
        [sys.executable, "-c", _EXIT_PROBE, *(["fail"] if fail else [])],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=child_env,
        timeout=120,
    )
    assert proc.returncode == (2 if fail else 0), proc.stderr
    assert "last log line" in proc.stderr
    assert proc.stdout.startswith("buffered stdout line")
    assert ("interpreter shutdown" in proc.stdout) == (world_size is None)
    if fail:
        assert proc.stderr.strip().splitlines()[-1] == (
            "error: train.bptt must be >= 1; set train.bptt"
        )


# --- damaged prepared data: found before anything trains on it or scores it ------------------


def _prepare(folder: Path) -> tuple[Path, Path]:
    """Write the tiny config and corpus and prepare it; return the config and the shard folder."""
    from hornn_dist.config import load_config
    from hornn_dist.data.pipeline import prepare_corpus

    config = write_tiny_config(folder)
    return config, prepare_corpus(load_config(str(config)).data, progress=False)


def _set_ids(shard: Path, first: int, values: list[int]) -> bytes:
    """Overwrite ids of a uint16 shard from token `first` on; return the old bytes."""
    old = shard.read_bytes()
    ids = np.frombuffer(old[64:], dtype=np.uint16).copy()
    ids[first : first + len(values)] = values
    shard.write_bytes(old[:64] + ids.tobytes())
    return old


def test_train_refuses_damaged_shards_in_one_line(tmp_path: Path) -> None:
    config, folder = _prepare(tmp_path)
    shard = folder / "train_000000.bin"
    vocab_size = json.loads((folder / "manifest.json").read_text())["vocab_size"]
    ids = np.fromfile(shard, dtype=np.uint16, offset=64)
    good = _set_ids(shard, 100, [(int(i) + 1) % vocab_size for i in ids[100:120]])  # 20 valid ids
    run = tmp_path / "run"
    train = ["hornn_dist.train", str(config), "--set", f"train.output_dir={run}"]
    proc = _run(*train)
    _assert_one_line_error(proc, f"{shard}: sha256 checksum mismatch")
    assert proc.returncode == 2 and not (run / "checkpoints").exists()
    shard.write_bytes(good)
    _set_ids(shard, 57, [0xFFFF])
    proc = _run(*train)
    _assert_one_line_error(
        proc, f"{shard}: token 57 (byte {64 + 57 * 2}) has id 65535, outside the vocabulary of "
    )
    assert proc.returncode == 2 and not (run / "checkpoints").exists()
    shard.write_bytes(good)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["vocab_size"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    proc = _run(*train)
    _assert_one_line_error(
        proc, f"{folder / 'manifest.json'}: key 'vocab_size' is missing or not an int; HINT: delete"
    )
    assert proc.returncode == 2


def test_evaluate_and_generate_refuse_damaged_data_in_one_line(tmp_path: Path) -> None:
    config, folder = _prepare(tmp_path)
    run = tmp_path / "run"
    check_ok(run_module("hornn_dist.train", str(config), "--set", f"train.output_dir={run}",
                        "--set", "train.max_steps=2"))  # fmt: skip
    test_shard = folder / "test_000000.bin"
    _set_ids(test_shard, 3, [5, 5, 5])
    proc = _run("hornn_dist.evaluate", str(run), "--split", "test")
    _assert_one_line_error(proc, f"{test_shard}: sha256 checksum mismatch")
    assert proc.returncode == 2 and "ppl" not in proc.stdout
    check_ok(run_module("hornn_dist.evaluate", str(run), "--split", "valid"))  # only test is hit
    (folder / "tokenizer.json").write_text("{not json")
    proc = _run("hornn_dist.generate", str(run), "--prompt", "w1")
    _assert_one_line_error(proc, f"{folder / 'tokenizer.json'}: unreadable tokenizer (")
    assert proc.returncode == 2 and proc.stdout == ""


def test_two_ranks_stop_on_a_damaged_shard_with_the_same_line(tmp_path: Path) -> None:
    """The first rank of the machine checks first; its error is raised past the barrier, so
    the other rank finds the damage itself instead of losing its peer inside the barrier."""
    config, folder = _prepare(tmp_path)
    shard = folder / "valid_000000.bin"
    vocab_size = json.loads((folder / "manifest.json").read_text())["vocab_size"]
    _set_ids(shard, 0, [(int(np.fromfile(shard, dtype=np.uint16, offset=64)[0]) + 1) % vocab_size])
    run = tmp_path / "run"
    proc = launch_two_ranks("hornn_dist.train", str(config), "--set", f"train.output_dir={run}",
                            port=29681, timeout=240)  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode != 0 and errors, proc.stderr[-3000:]
    assert all(e.startswith(f"error: {shard}: sha256 checksum mismatch") for e in errors), errors
    assert "[rank" not in proc.stderr and "Connection reset" not in proc.stderr, proc.stderr[-3000:]
    assert not (run / "checkpoints").exists()


def test_prepare_workers_below_one_names_the_flag(tiny: Path) -> None:
    proc = run_module("hornn_dist.prepare", str(tiny / "config.toml"), "--workers", "0")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --workers must be >= 1 (default: the cores here), got 0"
