"""Helpers for the trainer tests: a tiny real corpus on disk and real CLI/accelerate launches."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[1]
WORDS = [f"w{i}" for i in range(40)]


# `python -c KILL_IN_SECOND_CHECKPOINT CONFIG ...` trains, then SIGKILLs itself inside its 2nd
# checkpoint (step 10 of the tiny configs): its files are written, its DONE marker is not
KILL_IN_SECOND_CHECKPOINT = """
import os, signal, sys
import hornn_dist.util.files as files
from hornn_dist import train
from hornn_dist.runtime import run_cli

real_fsync_folder = files.fsync_folder
def fsync_then_die(folder):
    if folder.name == ".tmp_step_00000010":
        os.kill(os.getpid(), signal.SIGKILL)
    real_fsync_folder(folder)
files.fsync_folder = fsync_then_die
run_cli(train.main, sys.argv[1:])
"""


def run_patched(
    script: str, *args: str, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run `python -c script ARGS...` (a command with one function patched to inject a fault:
    a kill, a signal) from the repo root in the test environment; return the finished process."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**env(), **(extra_env or {})},
    )


def reset_accelerate_state() -> None:
    """Forget Accelerate's process-wide singleton, so the next Accelerator in this process is new."""
    from accelerate.state import AcceleratorState

    # Accelerate has no public reset: its own tests use this private method (the one use here;
    # test_pytest_config checks it still exists and says so plainly if a release drops it)
    AcceleratorState._reset_state(True)


def write_markov_text(path: Path, n_words: int, seed: int) -> None:
    """Write a learnable pseudo-language: each word mostly follows from the previous one."""
    rng = random.Random(seed)
    table = {w: rng.sample(WORDS, 3) for w in WORDS}
    word, lines, line = WORDS[0], [], []
    for _ in range(n_words):
        word = rng.choice(table[word]) if rng.random() < 0.9 else rng.choice(WORDS)
        line.append(word)
        if len(line) == 12:
            lines.append(" ".join(line))
            line = []
    lines.append(" ".join(line))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_tiny_config(folder: Path, train_words: int = 420, **sections: dict) -> Path:
    """Write a tiny corpus and a run config using it; return the config path."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, n, seed in (("train", train_words, 1), ("valid", 200, 2), ("test", 200, 3)):
        write_markov_text(folder / f"{split}.txt", n, seed)
    base = {
        "data": {
            "source": "files",
            "name": "tiny",
            "train": [str(folder / "train.txt")],
            "valid": [str(folder / "valid.txt")],
            "test": [str(folder / "test.txt")],
            "add_eos": True,
            "cache_dir": str(folder / "cache"),
        },
        "model": {"pooling": "gated", "order": 3, "hidden_size": 12, "embedding_size": 10},
        # no stopping rule: a test's run trains the epochs or steps it asks for
        "optim": {
            "lr": 0.3,
            "momentum": 0.5,
            "weight_decay": 1e-5,
            "max_col_norm": 3.0,
            "stop_improvement": 0.0,
        },
        "train": {
            "batch_size": 4,
            "bptt": 8,
            "epochs": 3,
            "eval_batch_size": 4,
            "checkpoint_every": 5,
            "keep_checkpoints": 2,
            "output_dir": str(folder / "run"),
        },
        "log": {"every": 2, "progress": False},
    }
    for name, values in sections.items():
        base[name].update(values)
    from hornn_dist.config import to_toml

    path = folder / "config.toml"
    path.write_text(to_toml(base))
    return path


def write_sweep(folder: Path, text: str, **model: object) -> Path:
    """Write a sweep file over the tiny corpus's config (`base = "tiny.toml"`, its [model]
    updated by `model`), its runs in folder/runs; return its path."""
    config = write_tiny_config(folder / "data", model=dict(model))
    (folder / "tiny.toml").write_text(config.read_text())
    path = folder / "sweep.toml"
    path.write_text(f'base = "tiny.toml"\noutput_dir = "{folder / "runs"}"\n{text}')
    return path


def prepared_tiny(folder: Path, **sections: dict) -> Path:
    """Write the tiny corpus and config into `folder` (`write_tiny_config`), prepare it; return
    `folder`."""
    config = write_tiny_config(folder, **sections)
    check_ok(run_here("hornn_dist.prepare", str(config)))
    return folder


def env() -> dict[str, str]:
    """Return the environment for child processes (quiet, deterministic, 1 thread per rank)."""
    out = dict(os.environ)
    out.update(
        {
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
            "PYTHONWARNINGS": "ignore",
        }
    )
    out.pop("WORLD_SIZE", None)
    return out


def run_module(module: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run `python -m module args` as one process and return its completed process."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env(),
        timeout=timeout,
    )


def run_here(
    module: str, *args: str, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run `python -m module args` inside this process, through the same `run_cli` as the
    console script, and return its exit code, stdout and stderr as `run_module` does, without
    a new interpreter's seconds of imports. For commands that end without a process group
    (`run_cli` ends a multi-process run with os._exit); signal handlers, the thread excepthook,
    the environment and the working folder are restored afterwards."""
    import contextlib
    import gc
    import importlib
    import io
    import logging
    import signal
    import threading
    import warnings

    from hornn_dist.runtime import run_cli

    main = importlib.import_module(module).main
    stdout, stderr = io.StringIO(), io.StringIO()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    hook, saved_env, cwd = threading.excepthook, dict(os.environ), os.getcwd()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as OMP_NUM_THREADS=1 gives a child: the same sums, bit for bit
    root = logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    child = env() | (extra_env or {})  # what a child of run_module would see
    os.environ.clear()
    os.environ.update(child)
    os.chdir(REPO)
    try:
        with (
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")  # as PYTHONWARNINGS=ignore does for a child
            try:
                run_cli(main, list(args))
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        reset_accelerate_state()  # a trained run leaves Accelerate's singleton set
        gc.collect()  # files a failed save left open in its traceback's frames, as an exit would
        torch.set_num_threads(threads)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        root.handlers[:] = root_handlers
        root.setLevel(root_level)
        threading.excepthook = hook
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess([module, *args], code, stdout.getvalue(), stderr.getvalue())


def train_into(folder: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """Run the trainer on `folder`'s config.toml (as `write_tiny_config` wrote it) into `out`,
    in this process (`run_here`)."""
    args = [str(folder / "config.toml"), "--set", f"train.output_dir={out}", *extra]
    return run_here("hornn_dist.train", *args)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that the OS reports free, so that suites never collide."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def two_rank_command(module: str, *args: str, port: int | None = None) -> list[str]:
    """Return the command of a real 2-process `accelerate launch` of `module` on CPU (gloo), on
    `port` or a free one."""
    port = free_port() if port is None else port
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(port),
        "-m", module, *args,
    ]  # fmt: skip


def launch_two_ranks(module: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run `module` under a real 2-process `accelerate launch` on CPU (gloo)."""
    cmd = two_rank_command(module, *args)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env(), timeout=timeout)


def start(cmd: list[str], **extra_env: str) -> subprocess.Popen:
    """Start `cmd` in the repo with the test environment, its stderr readable as text."""
    return subprocess.Popen(cmd, cwd=REPO, env=env() | extra_env, stderr=subprocess.PIPE, text=True)


def read_until(proc: subprocess.Popen, text: str, timeout: float = 120) -> list[str]:
    """Return the stderr lines of `proc` up to the first holding `text` (or the timeout)."""
    lines: list[str] = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if text in line or not line:
            break
    return lines


def children(proc: subprocess.Popen) -> list[int]:
    """Return the PIDs of the processes `proc` started (a launcher's ranks), in PID order."""
    found = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
    return sorted(int(pid) for pid in found.stdout.split())


def run_events(run_dir: Path, kind: str = "") -> list[dict]:
    """Return the run's events of one kind ("train", "valid", "stop", ...; "" every kind) from
    its metrics.jsonl, in order ([] before the file exists): a test's data, never log text."""
    from hornn_dist.run.run_layout import EVENTS_FILE
    from hornn_dist.training.events import read_events

    path = run_dir / EVENTS_FILE
    events = read_events(path) if path.is_file() else []
    return [e for e in events if e["event"] == kind or not kind]


def wait_for_step(run_dir: Path, step: int, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Wait until the run has a train event at `step` or later (fail if `proc` ends first)."""
    deadline = time.monotonic() + timeout
    while not any(e["step"] >= step for e in run_events(run_dir, "train")):
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before step {step}"
        assert time.monotonic() < deadline, f"no train event at step {step} in {timeout:g} s"
        time.sleep(0.2)


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    """Return the tensors of the newest complete checkpoint of a run."""
    from hornn_dist.run.checkpoint import list_checkpoints

    newest = list_checkpoints(run_dir)[-1]
    return load_file(str(newest / "model.safetensors"))


def event_folder(run_dir: Path) -> Path:
    """Return the TensorBoard event folder of a run's newest start (tensorboard/<start>/)."""
    from hornn_dist.training.dashboard import event_folders

    return event_folders(run_dir / "tensorboard")[-1]


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Return every TensorBoard scalar of a run (its newest start's event folder, resumes
    included) as tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(event_folder(run_dir))).Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def check_ok(proc: subprocess.CompletedProcess) -> None:
    """Fail with the child's output when it did not exit 0."""
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nSTDOUT:\n{proc.stdout}\nSTDERR:\n{proc.stderr[-6000:]}"
    )


def load_benchmark(name: str):
    """Return benchmarks/<name>.py loaded as a module, its folder on sys.path as when run as
    `python benchmarks/<name>.py` (the scripts import their sibling `common`)."""
    import importlib.util

    folder = str(REPO / "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(
        f"bench_{name}", REPO / "benchmarks" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def markdown_table(markdown: str, heading: str) -> list[dict[str, str]]:
    """Return the rows of the first Markdown table after `heading` as {header: cell}."""
    lines = markdown[markdown.index(heading) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip("|").split(" | ")])
    headers = table[0]
    assert set(table[1]) <= {"---", "---:"}
    return [dict(zip(headers, row, strict=True)) for row in table[2:]]


def mount_tmpfs(folder: Path, *options: str) -> bool:
    """Mount a tmpfs at `folder` (e.g. "ro", "size=64k"); return False where this user may not
    mount (not root, no CAP_SYS_ADMIN), for a test to skip. Unmount with `unmount`."""
    folder.mkdir(parents=True, exist_ok=True)
    cmd = ["mount", "-t", "tmpfs", "-o", ",".join(options or ("rw",)), "tmpfs", str(folder)]
    try:
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def unmount(folder: Path) -> None:
    """Unmount what `mount_tmpfs` mounted at `folder`."""
    subprocess.run(["umount", str(folder)], capture_output=True, timeout=30)


def fill_disk(folder: Path) -> None:
    """Write into `folder` until its file system is full."""
    try:
        with open(folder / "filler", "wb", buffering=0) as f:
            while True:
                f.write(b"\0" * 4096)
    except OSError:
        pass
