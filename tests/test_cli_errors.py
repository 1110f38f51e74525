"""Bad configs and inputs reach the user as one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
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
    run_here,
    write_tiny_config,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("errors")
    write_tiny_config(folder)
    (folder / "bad_utf8.txt").write_bytes(b"good words here\n" + b"caf\xe9 au lait\n")
    return folder


def _run(module: str, *args: str, extra_env: dict[str, str] | None = None):
    """Run a command in this process (`run_here`: the same exit code and lines, seconds sooner);
    with `extra_env`, in a process of its own, the exit code and stderr exactly as a user sees
    them (test_world_size_mismatch_is_one_line keeps that contract on a real process)."""
    if not extra_env:
        return run_here(module, *args)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env() | extra_env,
        timeout=300,
    )


TRAIN_CASES = {
    "missing config": (["{dir}/nope.toml"], "config file {dir}/nope.toml not found"),
    "typo key": (["--set", "train.max_stepz=5"], "did you mean train.max_steps?"),
    "wrong type": (["--set", "train.bptt='x'"], "train.bptt must be of type int"),
    "out of range": (["--set", "optim.lr=0"], "optim.lr must be > 0, got 0.0"),
    "above its bound": (["--set", "optim.lr=1e300"], "optim.lr must be <= 1000"),
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
            "optim.lr=1000",
            "--set",
            "optim.clip_mode=norm",
            "--set",
            "optim.clip=0",
            "--set",
            "optim.max_col_norm=0",
            "--set",
            "model.activation=relu",
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


LONG = "x" * 300  # past the 255 bytes a file system allows a name
# name: (what stands in the way, --set overrides, expected in the error line); {dir} = the
# case's folder, {readonly} / {full} = the mounts
PATH_CASES = {
    "output_dir a file": ("file:run", ["train.output_dir={dir}/run"], "{dir}/run (train.output_dir): file exists"),
    "output_dir a symlink loop": ("loop:run", ["train.output_dir={dir}/run/x"], "(train.output_dir): too many levels of symbolic links"),
    "output_dir too long": ("", [f"train.output_dir={{dir}}/{LONG}"], "(train.output_dir): file name too long"),
    "lock a folder": ("dir:run/.lock", ["train.output_dir={dir}/run"], "{dir}/run/.lock (train.output_dir): is a directory"),
    "checkpoints a file": ("file:run/checkpoints", ["train.output_dir={dir}/run"], "{dir}/run/checkpoints (train.output_dir): file exists"),
    "tensorboard a file": ("file:run/tensorboard", ["train.output_dir={dir}/run"], "{dir}/run/tensorboard (train.output_dir): file exists"),
    "cache_dir a file": ("file:cache", ["data.cache_dir={dir}/cache"], "{dir}/cache (data.cache_dir): file exists"),
    "data.name too long": ("", [f"data.name={LONG}"], "data.name must be at most 100 characters"),
    "output_dir read-only": ("", ["train.output_dir={readonly}/run"], "{readonly}/run (train.output_dir): read-only file system"),
    "cache_dir read-only": ("", ["data.cache_dir={readonly}/cache"], "{readonly}/cache (data.cache_dir): read-only file system"),
    "output_dir on a full disk": ("", ["train.output_dir={full}/run"], "(train.output_dir): no space left on device"),
    "cache_dir on a full disk": ("", ["data.cache_dir={full}/cache"], "(data.cache_dir): no space left on device"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(PATH_CASES))
def test_unwritable_paths_stop_before_training_in_one_line(
    tiny: Path, disks: dict[str, Path] | None, case: str, tmp_path: Path
) -> None:
    """A folder the run cannot write (a file or a folder in the way, a symlink loop, a name
    too long, a read-only or full file system) stops the run before its first step."""
    in_the_way, overrides, expected = PATH_CASES[case]
    if ("{readonly}" in str(overrides) or "{full}" in str(overrides)) and disks is None:
        pytest.skip("cannot mount a file system here")
    kind, _, name = in_the_way.partition(":")
    if kind:
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            target.write_text("not a folder")
        elif kind == "dir":
            target.mkdir()
        else:  # a loop of two symbolic links
            (tmp_path / "other").symlink_to(target)
            target.symlink_to(tmp_path / "other")
    places = {"dir": tmp_path, **(disks or {})}
    args = ["--set", f"train.output_dir={tmp_path / 'run'}"]
    for item in overrides:
        args += ["--set", item.format(**places)]
    proc = _run("hornn_dist.train", str(tiny / "config.toml"), *args)
    _assert_one_line_error(proc, expected.format(**places))
    assert "step 2: loss" not in proc.stderr  # nothing trained
    held = [path for path in _open_files() if any(path.startswith(str(p)) for p in places.values())]
    assert not held, f"the failed run left files open: {held}"  # the run lock on a full disk did


def _open_files() -> list[str]:
    """Return the paths this process holds open."""
    paths = []
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            paths.append(os.readlink(fd))
    return paths


@pytest.fixture(scope="module")
def trained(tiny: Path) -> Path:
    """A finished two-step run of the tiny config."""
    run = tiny / "trained"
    check_ok(run_here("hornn_dist.train", str(tiny / "config.toml"), "--set",
                        f"train.output_dir={run}", "--set", "train.max_steps=2"))  # fmt: skip
    return run


def _sweep_file(folder: Path, base: Path, output_dir: Path, runs: str) -> Path:
    path = folder / "sweep.toml"
    path.write_text(f'base = "{base}"\noutput_dir = "{output_dir}"\n{runs}')
    return path


def _sweep_json(folder: Path, entry: object) -> Path:
    runs = folder / "runs"
    runs.mkdir()
    (runs / "sweep.json").write_text(json.dumps({"runs": [entry]}))
    return runs


# name: (command line, expected in the error line); {run} = a finished run, {dir} = the case's
# folder, {tiny} = the tiny config's folder, {readonly} / {full} = the mounted file systems
COMMAND_CASES = {
    "generate --temperature nan": (["hornn_dist.generate", "{run}", "--temperature", "nan"], "--temperature must be 0 (greedy) or between 0.001"),
    "generate --temperature 1e-45": (["hornn_dist.generate", "{run}", "--temperature", "1e-45"], "--temperature must be 0 (greedy) or between 0.001"),
    "generate --seed 2**64": (["hornn_dist.generate", "{run}", "--seed", str(2**64)], "--seed must be between 0 and 2**64 - 1"),
    "export onto a dangling symlink": (["hornn_dist.export", "{run}", "{dir}/link"], "{dir}/link is a symbolic link (to {dir}/nowhere)"),
    "export onto a symlink to an empty folder": (["hornn_dist.export", "{run}", "{dir}/link"], "{dir}/link is a symbolic link (to {dir}/empty)"),
    "export into a read-only parent": (["hornn_dist.export", "{run}", "{readonly}/model"], "{readonly} (OUT_DIR): read-only file system"),
    "export on a full disk": (["hornn_dist.export", "{run}", "{full}/model"], "(OUT_DIR): no space left on device"),
    "sweep grid value a table": (["hornn_dist.sweep", "{dir}/sweep.toml", "--dry-run"], "grid value of 'model.order' must be a number, string, boolean or list of strings"),
    "sweep run named ..": (["hornn_dist.sweep", "{dir}/sweep.toml", "--dry-run"], "run name '..' must name a folder of its own, not . or .."),
    "sweep output_dir a file": (["hornn_dist.sweep", "{dir}/sweep.toml"], "{dir}/file (output_dir of {dir}/sweep.toml): file exists"),
    "report of a run named ../x": (["hornn_dist.report", "{dir}/runs"], "run 0's name '../trained' must be letters"),
    "report of an absolute run name": (["hornn_dist.report", "{dir}/runs"], "run 0's name '/"),
    "report of a run without a name": (["hornn_dist.report", "{dir}/runs"], "run 0 ({{'model': 'x'}}) is not a table with a name"),
    "report of a bare string run": (["hornn_dist.report", "{dir}/runs"], "run 0 ('trained') is not a table with a name"),
    "report --out a file": (["hornn_dist.report", "{dir}/runs", "--out", "{dir}/file", "--no-plots"], "{dir}/file (--out): file exists"),
    "report --out read-only": (["hornn_dist.report", "{dir}/runs", "--out", "{readonly}/report", "--no-plots"], "{readonly}/report (--out): read-only file system"),
}  # fmt: skip


def _set_up(case: str, folder: Path, tiny: Path, run: Path) -> None:
    """Put in `folder` what stands in the way in `case`."""
    base = tiny / "config.toml"
    if case == "export onto a dangling symlink":
        (folder / "link").symlink_to(folder / "nowhere")
    elif case == "export onto a symlink to an empty folder":
        (folder / "empty").mkdir()
        (folder / "link").symlink_to(folder / "empty")
    elif case == "sweep grid value a table":
        runs = '[[runs]]\nname = "a{model.order}"\ngrid = { "model.order" = [{ x = 1 }] }\n'
        _sweep_file(folder, base, folder / "out", runs)
    elif case == "sweep run named ..":
        _sweep_file(folder, base, folder / "out", '[[runs]]\nname = ".."\n')
    elif case == "sweep output_dir a file":
        (folder / "file").write_text("not a folder")
        _sweep_file(folder, base, folder / "file", '[[runs]]\nname = "a"\n')
    elif case == "report of a run named ../x":
        shutil.copytree(run, folder / "trained")
        _sweep_json(folder, {"name": "../trained"})
    elif case == "report of an absolute run name":
        _sweep_json(folder, {"name": str(run)})
    elif case == "report of a run without a name":
        _sweep_json(folder, {"model": "x"})
    elif case == "report of a bare string run":
        _sweep_json(folder, "trained")
    elif case.startswith("report --out"):
        shutil.copytree(run, folder / "runs" / "trained")
        (folder / "file").write_text("not a folder")


@pytest.mark.parametrize("case", sorted(COMMAND_CASES))
def test_generate_export_sweep_and_report_errors_are_one_line(
    tiny: Path, trained: Path, disks: dict[str, Path] | None, case: str, tmp_path: Path
) -> None:
    """Bad values, links, files in the way, read-only and full disks, and sweep files and
    sweep.json entries that would write or read outside their folder: one line each."""
    command, expected = COMMAND_CASES[case]
    if ("{readonly}" in str(command) or "{full}" in str(command)) and disks is None:
        pytest.skip("cannot mount a file system here")
    _set_up(case, tmp_path, tiny, trained)
    places = {"run": trained, "dir": tmp_path, "tiny": tiny, **(disks or {})}
    proc = _run(*[part.format(**places) for part in command])
    _assert_one_line_error(proc, expected.format(**places))
    assert not (tmp_path / "out").exists() and not (tmp_path.parent / "trained").exists()


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
        _run("hornn_dist.generate", str(empty), "--temperature", "-1"),
        "--temperature must be 0 (greedy) or between",
    )


@pytest.mark.parametrize("relative", [False, True])
def test_a_run_whose_corpus_is_gone_says_how_to_prepare_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, relative: bool
) -> None:
    """evaluate, generate and export have no --set: the fix is to prepare the corpus where the
    run's config puts it, or to run from where the run's relative cache_dir lies."""
    from hornn_dist.data.config import DataConfig
    from hornn_dist.run.loading import open_prepared_corpus
    from hornn_dist.util.errors import DataError

    monkeypatch.chdir(tmp_path)
    cache = "cache" if relative else str(tmp_path / "cache")
    cfg = DataConfig(train=["a.txt"], valid=["b.txt"], test=["c.txt"], cache_dir=cache)
    with pytest.raises(DataError) as err:
        open_prepared_corpus(cfg, accelerator=None, prepare=False)
    message = str(err.value)
    assert "prepare it there from the run's own config" in message and "--set" not in message
    assert "set data.cache_dir there" not in message
    assert ("run this command from the folder the run was trained in" in message) == relative


def test_evaluate_and_generate_from_a_trained_run(tiny: Path) -> None:
    run = tiny / "run_ok"
    check_ok(run_here("hornn_dist.train", str(tiny / "config.toml"), "--set",
                        f"train.output_dir={run}", "--set", "train.max_steps=6"))  # fmt: skip
    proc = run_here("hornn_dist.evaluate", str(run), "--split", "test")
    check_ok(proc)
    line = proc.stdout.strip().splitlines()[-1].split()
    assert line[:3] == ["split", "test:", "tokens"] and int(line[3]) == 216
    assert float(line[7]) > 1.0  # ppl
    bad = _run("hornn_dist.evaluate", str(run), "--split", "nope")
    _assert_one_line_error(bad, "split 'nope' not in the corpus")
    sample = run_here("hornn_dist.generate", str(run / "checkpoints" / "latest"), "--prompt", "w1 w2",
                        "--tokens", "12", "--seed", "3")  # fmt: skip
    check_ok(sample)
    words = sample.stdout.split()
    assert words[:2] == ["w1", "w2"] and len(words) > 2  # sampled <eos> print as line breaks
    assert all(w.startswith("w") or w == "<unk>" for w in words)
    again = run_here("hornn_dist.generate", str(run), "--prompt", "w1 w2", "--tokens", "12",
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
from hornn_dist.util.errors import ConfigError
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
    check_ok(run_here("hornn_dist.train", str(config), "--set", f"train.output_dir={run}",
                        "--set", "train.max_steps=2"))  # fmt: skip
    test_shard = folder / "test_000000.bin"
    _set_ids(test_shard, 3, [5, 5, 5])
    proc = _run("hornn_dist.evaluate", str(run), "--split", "test")
    _assert_one_line_error(proc, f"{test_shard}: sha256 checksum mismatch")
    assert proc.returncode == 2 and "ppl" not in proc.stdout
    check_ok(run_here("hornn_dist.evaluate", str(run), "--split", "valid"))  # only test is hit
    (folder / "tokenizer.json").write_text("{not json")
    proc = _run("hornn_dist.generate", str(run), "--prompt", "w1")
    _assert_one_line_error(proc, f"{folder / 'tokenizer.json'}: cannot read the vocabulary (")
    assert proc.returncode == 2 and proc.stdout == ""


@pytest.mark.integration
def test_two_ranks_stop_on_a_damaged_shard_with_the_same_line(tmp_path: Path) -> None:
    """The first rank of the machine checks first; its error is raised past the barrier, so
    the other rank finds the damage itself instead of losing its peer inside the barrier."""
    config, folder = _prepare(tmp_path)
    shard = folder / "valid_000000.bin"
    vocab_size = json.loads((folder / "manifest.json").read_text())["vocab_size"]
    _set_ids(shard, 0, [(int(np.fromfile(shard, dtype=np.uint16, offset=64)[0]) + 1) % vocab_size])
    run = tmp_path / "run"
    proc = launch_two_ranks("hornn_dist.train", str(config), "--set", f"train.output_dir={run}",
                            timeout=240)  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode != 0 and errors, proc.stderr[-3000:]
    assert all(e.startswith(f"error: {shard}: sha256 checksum mismatch") for e in errors), errors
    assert "[rank" not in proc.stderr and "Connection reset" not in proc.stderr, proc.stderr[-3000:]
    assert not (run / "checkpoints").exists()


def test_prepare_workers_below_one_names_the_flag(tiny: Path) -> None:
    proc = run_here("hornn_dist.prepare", str(tiny / "config.toml"), "--workers", "0")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --workers must be >= 1 (default: the cores here), got 0"


@pytest.mark.parametrize("option", ["--bptt", "--batch-size"])
@pytest.mark.parametrize("value", ["0", "-5"])
def test_evaluate_refuses_a_window_or_batch_below_one_before_loading(
    option: str, value: str, tmp_path: Path
) -> None:
    """`evaluate --bptt 0` once scored silently with the run's own value; now 0 and -5 are
    refused alike, by argparse, naming the option (exit 2, nothing loaded)."""
    proc = run_here("hornn_dist.evaluate", str(tmp_path / "no_run"), option, value)
    assert proc.returncode == 2
    assert f"argument {option}: {value} is below 1 (leave it out for the run's own)" in proc.stderr
