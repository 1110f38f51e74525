"""Process setup shared by the CLIs: the Accelerator, logging, one-line errors, and stop signals."""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import torch

from hornn_dist.util.errors import ConfigError, HornnError, first_line, os_error_line

logger = logging.getLogger("hornn_dist")
PEER_ERROR_WAIT_S = 5.0  # a rank other than the main one waits this long before printing
_TIMED_OUT = re.compile(r"time[d]?\s?out", re.IGNORECASE)
# gloo's words for a peer whose address answers no more ("Connection refused", "Connection
# reset by peer", "connectFullMesh failed")
_CONNECT_FAILED = re.compile(r"connection (refused|reset)|connectFullMesh", re.IGNORECASE)
JOIN_NOTE_S = 30.0  # a process still waiting for the others to join after this says so
# the launch that starts N processes on CPUs (`--cpu` starts one: launch/README.md)
CPU_LAUNCH = (
    "`accelerate launch --multi_gpu --num_processes N --num_machines 1 --mixed_precision no "
    "--dynamo_backend no"
)
_skip_exit_handlers = False  # set by skip_exit_handlers


def skip_exit_handlers() -> None:
    """End this CLI without the interpreter's exit handlers: a library left waiting on a
    server that does not answer (a tracker given up on) would wait there again at exit."""
    global _skip_exit_handlers
    _skip_exit_handlers = True


def build_accelerator(
    mixed_precision: str = "no",
    project_dir: str | Path | None = None,
    trackers: list[Any] | None = None,
    collective_timeout: int = 600,
    say_launch: bool = True,
) -> Any:
    """Return an Accelerator: CUDA when present, else CPU (gloo for 2+ ranks), in
    `mixed_precision` as `resolve_mixed_precision` chose it, logging to `trackers` (its
    log_with), whose collectives give up after `collective_timeout` seconds; `say_launch`:
    print `launch_warning` on stderr (the trainer logs it into train.log instead)."""
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs, ProjectConfiguration

    on_cuda = torch.cuda.is_available()
    if mixed_precision not in ("no", "bf16", "fp16"):
        raise ValueError(f"mixed_precision {mixed_precision!r}: resolve it first")
    if not on_cuda and mixed_precision == "fp16":  # resolve_mixed_precision says why
        mixed_precision = "no"
    timeout = InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=collective_timeout))
    kwargs: dict[str, Any] = {"kwargs_handlers": [timeout]}
    if project_dir is not None:
        kwargs["project_config"] = ProjectConfiguration(project_dir=str(project_dir))
    if trackers:
        kwargs["log_with"] = trackers
    expected = int(os.environ.get("WORLD_SIZE", "1"))
    note = threading.Timer(  # the group forms when every process has joined: say what we wait for
        min(JOIN_NOTE_S, collective_timeout / 2),
        print,
        [
            f"rank {os.environ.get('RANK', '0')}: waiting for all {expected} processes to join "
            f"the process group (up to train.collective_timeout = {collective_timeout} s)"
        ],
        {"file": sys.stderr, "flush": True},
    )
    note.daemon = True
    if expected > 1:
        note.start()
    started = time.monotonic()
    try:
        if expected > 1:
            join_group_of_this_attempt(collective_timeout, "nccl" if on_cuda else "gloo")
        accelerator = Accelerator(
            cpu=not on_cuda,
            mixed_precision=mixed_precision,
            step_scheduler_with_optimizer=False,
            **kwargs,
        )
    except (ValueError, RuntimeError) as err:  # e.g. WORLD_SIZE set without MASTER_ADDR
        waited = time.monotonic() - started
        raise ConfigError(
            group_start_failure(err, os.environ, collective_timeout, waited)
        ) from None
    finally:
        note.cancel()
    if accelerator.num_processes != expected:
        raise ConfigError(
            f"WORLD_SIZE={expected} but Accelerate runs {accelerator.num_processes} process(es); "
            f"on CPU launch with {CPU_LAUNCH} -m hornn_dist.train ...`"
        )
    if say_launch and launch_warning(accelerator):
        print(f"warning: {launch_warning(accelerator)}", file=sys.stderr)
    return accelerator


def join_group_of_this_attempt(collective_timeout: int, backend: str) -> None:
    """Form the process group of a restart under torchrun (`--max_restarts`) through keys of
    its own attempt; a first attempt is left to Accelerate.

    torchrun's agent keeps one store for all the attempts of its workers (the static
    rendezvous of `accelerate launch` creates it once), and torch's env:// rendezvous no longer
    gives each attempt a prefix of its own (torch/distributed/rendezvous.py, "We create a new
    TCPStore for every retry"): the restarted processes read the dead ones' gloo addresses,
    and fail with "Connection refused" or wait for a peer that never answers. Each attempt's
    keys under `/worker/attempt_<TORCHELASTIC_RESTART_COUNT>`, as torch once wrote them, form
    the new group as the first one formed."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    shared = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    if not shared or attempt in ("", "0") or torch.distributed.is_initialized():
        return
    timeout = datetime.timedelta(seconds=collective_timeout)
    world = int(os.environ["WORLD_SIZE"])
    store = torch.distributed.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False, timeout
    )
    torch.distributed.init_process_group(
        backend=backend,
        store=torch.distributed.PrefixStore(f"/worker/attempt_{attempt}", store),
        rank=int(os.environ["RANK"]),
        world_size=world,
        timeout=timeout,
    )


def launch_warning(accelerator: Any) -> str:
    """Return the warning for a launch that asked for more processes than Accelerate started
    (`accelerate launch --cpu --num_processes 2` starts one), else ""."""
    if int(os.environ.get("WORLD_SIZE", "1")) != 1:
        return ""
    asked = launch_asked_processes(_parent_command())
    if asked is None or asked <= accelerator.num_processes:
        return ""
    return (
        f"the launch asked for {asked} processes but Accelerate started "
        f"{accelerator.num_processes} (it does so under --cpu or distributed_type NO); for N "
        f"processes on CPUs launch with {CPU_LAUNCH}` (launch/README.md)"
    )


def group_start_failure(
    err: BaseException, environ: Mapping[str, str], timeout: int, waited: float | None = None
) -> str:
    """Return the one line for an Accelerator that could not start its process group: under a
    launcher's settings, which processes did not join in time, or, `waited` seconds into
    train.collective_timeout, which connection failed; without them, how to launch."""
    world, address = environ.get("WORLD_SIZE", "1"), environ.get("MASTER_ADDR")
    if not (world.isdigit() and int(world) > 1 and address):
        return (
            f"cannot start the distributed run: {first_line(err)}; start multi-process runs "
            "with `accelerate launch` (see launch/README.md)"
        )
    where = f"{address}:{environ.get('MASTER_PORT', '?')}"
    rank, text = environ.get("RANK", "0"), first_line(err)[:200]
    attempt = environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if attempt not in ("", "0"):  # torchrun's --max_restarts: its restart `attempt`
        where += (
            f" (torchrun's restart {attempt} of {environ.get('TORCHELASTIC_MAX_RESTARTS', '?')})"
        )
    timed_out = bool(_TIMED_OUT.search(str(err)))  # "Timed out after 11 s", "wait timeout ..."
    if timed_out and (waited is None or waited >= 0.9 * timeout):
        return (
            f"rank {rank}: the {world} processes did not all join the process group at {where} "
            f"within train.collective_timeout = {timeout} s ({text}); a process stopped or "
            "failed before it joined (see its log), or started later than that"
        )
    if timed_out or _CONNECT_FAILED.search(str(err)):
        return (
            f"rank {rank}: the {world} processes could not form the process group at {where}: "
            f"after {waited or 0:.0f} s, within train.collective_timeout = {timeout} s, a "
            f"connection between them failed ({text}); a process stopped or failed before it "
            "joined (see its log)"
        )
    return (
        f"rank {rank}: the process group at {where} did not start ({text}); check the "
        "launch's MASTER_ADDR, MASTER_PORT and WORLD_SIZE"
    )


def launch_asked_processes(command: list[str]) -> int | None:
    """Return the process count an `accelerate launch` command line asks for (its
    --num_processes, else its config file's), or None when `command` is no such launch."""
    for i, word in enumerate(command):
        if Path(word).name == "accelerate" and command[i + 1 : i + 2] == ["launch"]:
            rest = command[i + 2 :]
            break
        if word == "accelerate.commands.launch" and i and command[i - 1] == "-m":
            rest = command[i + 1 :]
            break
    else:
        return None
    from accelerate.commands.config import default_config_file
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage lines
            args = launch_command_parser().parse_args(rest)
        if args.num_processes is not None:
            return int(args.num_processes)
        path = args.config_file or default_config_file
        if not os.path.isfile(path):
            return None
        asked = load_config_from_file(path).num_processes
        return int(asked) if asked is not None else None
    except (SystemExit, Exception):  # a command this reading does not understand: no warning
        return None


def _parent_command() -> list[str]:
    """Return the command line of this process's parent (a launcher), [] where unknown."""
    try:
        raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        return []
    return [os.fsdecode(part) for part in raw.split(b"\0") if part]


def setup_logging(is_main: bool) -> None:
    """Log INFO lines to stderr from the main process, warnings only from the others."""
    logging.basicConfig(
        level=logging.INFO if is_main else logging.WARNING,
        format="%(asctime)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
        force=True,
    )
    for noisy in ("accelerate", "torch", "datasets", "filelock", "fsspec", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # its retries' warnings: the caller that gives up says so in one line (trackers.py)
    logging.getLogger("urllib3").setLevel(logging.ERROR)


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
    except KeyboardInterrupt as err:  # the trainer's says which checkpoint a rerun resumes
        report_error(f"interrupted: {err}" if str(err) else "interrupted", own=False)
        code = 130
    # Accelerate's end_training may have torn torch.distributed down already: WORLD_SIZE (set
    # by the launcher) still says whether the process had a process group and its threads.
    had_group = _shutdown_process_group() or int(os.environ.get("WORLD_SIZE", "1")) > 1
    if had_group or _skip_exit_handlers:
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


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # what a user or a scheduler stops a command with


class CollectiveError(HornnError):
    """A collective with the other processes failed or timed out."""


def collective_failure(err: BaseException, doing: str, timeout: int) -> CollectiveError | None:
    """Return the one-line error for a failed collective (a stalled or dead peer), else None."""
    text = str(err)
    # gloo words its timeouts several ways ("Timed out", "Application timeout caused pair closure")
    known = ("gloo", "NCCL", "Connection reset", "Connection closed")
    peer = any(word in text for word in known) or _TIMED_OUT.search(text)
    if not isinstance(err, RuntimeError) or not peer:
        return None
    rank = os.environ.get("RANK", "0")
    return CollectiveError(
        f"rank {rank}: the other processes did not answer while {doing} ({first_line(err)[:200]}); one "
        f"stalled or died (see its log), or train.collective_timeout = {timeout} s is too short"
    )


class StoppedError(HornnError):
    """A stop signal ended a command that has nothing to checkpoint (export)."""


@contextlib.contextmanager
def stop_signals_end(what: str) -> Iterator[None]:
    """Make SIGTERM and SIGINT inside the block raise StoppedError ("stopped by SIGTERM while
    `what`"): the block's clean-up runs and the command ends with one line, not a bare 143."""

    def handle(signum: int, frame: FrameType | None) -> None:
        raise StoppedError(f"stopped by {signal.Signals(signum).name} while {what}")

    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, handle)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class StopFlag:
    """Set by SIGTERM/SIGINT so the loop can finish its step, checkpoint and exit cleanly."""

    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""
        self.saving = 0  # > 0: a checkpoint is being written (nested blocks count)
        self.event = threading.Event()  # set with `requested`: what a waiting thread watches
        self.installed = False
        self.ended = False  # training is over (`training_ended`): a signal ends waits only

    def install(self) -> None:
        """Route SIGTERM and SIGINT to this flag: the first asks for a stop at the end of the
        current step, with a checkpoint of it; later ones only say so (SIGQUIT or SIGKILL
        abort without that checkpoint, the one before stays loadable)."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._handle)
        self.installed = True

    def training_ended(self) -> None:
        """Mark training as over, its last checkpoint written: a signal from now on only ends
        a wait (a tracker's last flush) and says that the run is exiting."""
        self.ended = True

    def ignore(self) -> None:
        """Ignore SIGTERM and SIGINT from now on, where `install` routed them here: call once
        the command's work is done. The interpreter's shutdown (a second or two after a run)
        puts Python handlers back to the default, which would end a finished run with 130 or
        143; an ignored signal stays ignored, and the exit code stays the command's."""
        if self.installed:
            for signum in STOP_SIGNALS:
                signal.signal(signum, signal.SIG_IGN)

    @contextlib.contextmanager
    def saving_checkpoint(self) -> Iterator[None]:
        """Mark the block as writing the stop's checkpoint (what a further signal is told)."""
        self.saving += 1
        try:
            yield
        finally:
            self.saving -= 1

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.ended:  # nothing left to stop: a tracker's last flush waits no longer
            self.event.set()
            _say_from_handler(f"{name} received: training has ended; the run exits")
            return
        if self.requested:  # never an exception here: it would lose the steps since the last save
            doing = (
                "the checkpoint is being written"
                if self.saving
                else "the current step finishes, then its checkpoint is written"
            )
            _say_from_handler(
                f"{name} received again: {doing} and the run exits; to abort without that "
                "checkpoint press Ctrl-\\ (SIGQUIT) or send SIGKILL (the checkpoint before "
                "stays loadable)"
            )
            return
        self.requested = True
        self.signal_name = name
        self.event.set()
        processes = int(os.environ.get("WORLD_SIZE", "1") or 1)  # the launcher's count
        agreed = (  # one process reads its flag every step (training/cadence.py)
            f" ({processes} processes: within about 5 s plus one step)" if processes > 1 else ""
        )
        _say_from_handler(
            f"{name} received: the run checkpoints and exits after its current step{agreed}; "
            "pressing again is safe"
        )


def _say_from_handler(line: str) -> None:
    """Print `line` to stderr from a signal handler, from the main process only."""
    if os.environ.get("RANK", "0") != "0":  # the main process speaks for the run
        return
    with contextlib.suppress(OSError):  # os.write: print() here can raise "reentrant call"
        os.write(2, (line + "\n").encode())


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


def set_cpu_threads(setting: int | str, device: torch.device) -> str:
    """Set torch's CPU threads from `train.cpu_threads` (the one place that does) on a CPU run;
    return what the start line says of them, e.g. "1 (train.cpu_threads auto)"."""
    if device.type != "cpu":  # the GPU does the work: torch's default stays
        return f"{torch.get_num_threads()} (torch's default on {device.type})"
    if setting != "auto":
        threads, why = int(setting), f"train.cpu_threads {setting}"
    else:
        given = os.environ.get("OMP_NUM_THREADS", "").strip()
        # a launcher or a sweep chose per process; else 1 (config.py says why)
        threads = int(given) if given.isdigit() and int(given) > 0 else 1
        why = "train.cpu_threads auto" + (f", OMP_NUM_THREADS={given}" if given else "")
    torch.set_num_threads(threads)
    return f"{threads} ({why})"


def describe_hardware(device: torch.device, processes: int) -> str:
    """Return what a run trains on, e.g. "1 x NVIDIA H100 80GB HBM3" or "AMD EPYC 7B13 (2 threads)"."""
    if device.type == "cuda":
        return f"{processes} x {torch.cuda.get_device_name(device)}"
    name = cpu_name()
    threads = torch.get_num_threads()
    per = f"{threads} thread{'s' if threads > 1 else ''}"
    per = f"{processes} processes x {per}" if processes > 1 else per
    return f"{name} ({per})"
