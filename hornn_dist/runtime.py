"""Process setup shared by the CLIs: the Accelerator, logging, one-line errors, and stop signals."""

from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import torch

from hornn_dist.errors import ConfigError, HornnError, first_line, os_error_line

logger = logging.getLogger("hornn_dist")
PEER_ERROR_WAIT_S = 5.0  # a rank other than the main one waits this long before printing


def build_accelerator(
    mixed_precision: str = "no",
    project_dir: str | Path | None = None,
    trackers: list[Any] | None = None,
    collective_timeout: int = 600,
) -> Any:
    """Return an Accelerator: CUDA when present (with mixed precision), else CPU fp32 (gloo for
    2+ ranks), logging to `trackers` (its log_with), whose collectives give up after
    `collective_timeout` seconds."""
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs, ProjectConfiguration

    on_cuda = torch.cuda.is_available()
    if not on_cuda and mixed_precision != "no":
        print(
            f"note: train.mixed_precision={mixed_precision} applies on CUDA only; this CPU run uses fp32",
            file=sys.stderr,
        )
        mixed_precision = "no"
    timeout = InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=collective_timeout))
    kwargs: dict[str, Any] = {"kwargs_handlers": [timeout]}
    if project_dir is not None:
        kwargs["project_config"] = ProjectConfiguration(project_dir=str(project_dir))
    if trackers:
        kwargs["log_with"] = trackers
    try:
        accelerator = Accelerator(
            cpu=not on_cuda,
            mixed_precision=mixed_precision,
            step_scheduler_with_optimizer=False,
            **kwargs,
        )
    except (ValueError, RuntimeError) as err:  # e.g. WORLD_SIZE set without MASTER_ADDR
        raise ConfigError(
            f"cannot start the distributed run: {first_line(err)}; start multi-process runs with "
            "`accelerate launch` (see launch/README.md)"
        ) from None
    expected = int(os.environ.get("WORLD_SIZE", "1"))
    if accelerator.num_processes != expected:
        raise ConfigError(
            f"WORLD_SIZE={expected} but Accelerate runs {accelerator.num_processes} process(es); "
            "on CPU launch with `accelerate launch --multi_gpu --num_processes N --num_machines 1 "
            "--mixed_precision no --dynamo_backend no -m hornn_dist.train ...`"
        )
    return accelerator


def setup_logging(is_main: bool) -> None:
    """Log INFO lines to stderr from the main process, warnings only from the others."""
    logging.basicConfig(
        level=logging.INFO if is_main else logging.WARNING,
        format="%(asctime)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
        force=True,
    )
    for noisy in ("accelerate", "torch", "datasets", "filelock", "fsspec", "urllib3", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> None:
    """Run a CLI entry point, turning user-facing errors and failed file operations (OSError)
    into one line on stderr and exit code 2."""
    threading.excepthook = _thread_failed
    try:
        code = main(argv)
    except HornnError as err:
        report_error(f"error: {err}", own=isinstance(err, CollectiveError))
        code = 2
    except OSError as err:  # a full disk, a read-only folder, a file in the way: one line too
        print(f"error: {os_error_line(err)}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        report_error("interrupted", own=False)
        code = 130
    # Accelerate's end_training may have torn torch.distributed down already: WORLD_SIZE (set
    # by the launcher) still says whether the process had a process group and its threads.
    had_group = _shutdown_process_group() or int(os.environ.get("WORLD_SIZE", "1")) > 1
    if had_group:
        _exit_now(code)
    sys.exit(code)


def report_error(line: str, own: bool) -> None:
    """Print a CLI's error line once: from the main process, or from a rank whose error is its
    `own` (a collective that failed there). Every rank also puts it in its torchrun error file,
    which torchrun's failure summary shows. Another rank gives the main process, which raised
    the same error, time to print it and torchrun time to end this one, and prints it itself
    only when still running then (the main process did not fail this way)."""
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:  # the format of torch.distributed.elastic's ErrorHandler, message as text
        try:
            Path(error_file).write_text(
                json.dumps({"message": line, "timestamp": int(time.time())}), encoding="utf-8"
            )
        except OSError:
            pass  # the line is printed below all the same
    if not own and os.environ.get("RANK", "0") != "0":
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # torchrun's stop ends the wait at once
        time.sleep(PEER_ERROR_WAIT_S)
    isatty = getattr(sys.stderr, "isatty", None)
    # in a terminal, a progress bar may still hold the line: clear it, start at its left
    start = "\r\x1b[K" if isatty and isatty() else ""
    print(start + line, file=sys.stderr, flush=True)


def _thread_failed(args: threading.ExceptHookArgs) -> None:
    """Say in one line that a library's background thread failed on a file (TensorBoard's
    writer on a full disk; its owner raises the error again in the main thread), else as usual."""
    if isinstance(args.exc_value, OSError):
        name = args.thread.name if args.thread is not None else "?"
        line = os_error_line(args.exc_value)
        print(f"warning: background thread {name} failed: {line}", file=sys.stderr)
    else:
        threading.__excepthook__(args)


def _shutdown_process_group() -> bool:
    """Tear down torch.distributed if it was set up; return whether it was."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
        return True
    return False


def _exit_now(code: int) -> None:
    """Flush the logs and end the process without the interpreter's shutdown.

    After a gloo collective, a worker thread of the process group may still be releasing the
    collective's tensors, which takes the GIL; if the interpreter is finalising by then, that
    thread aborts the process ("terminate called without an active exception"; why:
    docs/performance.md, "Numbers behind the code's choices"). Nothing is left to do once main
    has returned (checkpoints are fsynced, trackers closed), so the process ends here.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class CollectiveError(HornnError):
    """A collective with the other processes failed or timed out."""


def collective_failure(err: BaseException, doing: str, timeout: int) -> CollectiveError | None:
    """Return the one-line error for a failed collective (a stalled or dead peer), else None."""
    text = str(err)
    known = ("gloo", "NCCL", "Timed out", "timed out", "Connection reset", "Connection closed")
    if not isinstance(err, RuntimeError) or not any(word in text for word in known):
        return None
    rank = os.environ.get("RANK", "0")
    return CollectiveError(
        f"rank {rank}: the other processes did not answer while {doing} ({first_line(err)[:200]}); one "
        f"stalled or died (see its log), or train.collective_timeout = {timeout} s is too short"
    )


class StopFlag:
    """Set by SIGTERM/SIGINT so the loop can finish its step, checkpoint and exit cleanly."""

    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""

    def install(self) -> None:
        """Route SIGTERM and SIGINT to this flag (a second SIGINT still interrupts at once)."""
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True
        self.signal_name = signal.Signals(signum).name


def cpu_name() -> str:
    """Return the CPU's model name (from /proc/cpuinfo where there is one), e.g. "AMD EPYC 7B13"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "CPU"


def describe_hardware(device: torch.device, processes: int) -> str:
    """Return what a run trains on, e.g. "1 x NVIDIA H100 80GB HBM3" or "AMD EPYC 7B13 (2 threads)"."""
    if device.type == "cuda":
        return f"{processes} x {torch.cuda.get_device_name(device)}"
    name = cpu_name()
    threads = torch.get_num_threads()
    per = f"{threads} thread{'s' if threads > 1 else ''}"
    per = f"{processes} processes x {per}" if processes > 1 else per
    return f"{name} ({per})"
