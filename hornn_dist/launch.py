"""`accelerate launch` with torchrun's failure report as one line: `python -m hornn_dist.launch [accelerate launch options] -m hornn_dist.train CONFIG ...`.

Runs Accelerate's launch command in this process, so torchrun's agent runs here and hands its
failures over as the exceptions it raises: a `ChildFailedError` holding each failed rank's exit
code, a `SignalException` holding the signal it got and passed on to the ranks. Each becomes one
`launch:` line in place of torchrun's traceback and failure summary (about 40 lines), and the
agent's own log records (closing signals, the failure it saw) stop at their logger. The ranks
write to this process's stdout and stderr, as under `accelerate launch`, errors included; the
exit code is 1 after a failure, as `accelerate launch`'s. One process (Accelerate's simple
launcher, whose `CalledProcessError` traceback `accelerate launch` prints unless given `-q`)
ends with one `launch:` line too; a DeepSpeed or TPU launch fails as under `accelerate launch`.

Why not the routes torchrun offers for this (read in torch 2.13's torch/distributed/run.py and
elastic/multiprocessing/errors/): `--redirects`/`--tee` with `--log-dir` move the ranks' output
into files, but the agent's own report still goes to its stderr, to be told apart by its text;
the error file (`@record`, TORCHELASTIC_ERROR_FILE) holds the first failure's message only,
without its rank, and Accelerate calls `torch.distributed.run.run`, not the `@record`-wrapped
`main` that would write it.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from collections.abc import Mapping

from accelerate.commands.launch import launch_command, launch_command_parser
from torch.distributed.elastic.multiprocessing import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from hornn_dist.util.errors import described

ELASTIC_LOGGER = "torch.distributed.elastic"  # the parent of every logger of torchrun's agent
LAUNCH_LOGGER = "accelerate.commands.launch"
# Accelerate's 6-line warning when no launch config names them: every value it lists is a
# default a user expects (all GPUs, one machine, no dynamo) or one the run's config decides
# (train.mixed_precision, passed to the Accelerator), and the run's start lines say each
DEFAULTS_WARNING = "The following values were not passed to `accelerate launch`"


def failure_line(failures: Mapping[int, ProcessFailure]) -> str:
    """Return the one line that stands for torchrun's report of failed ranks: each rank (global,
    in order) with its exit code or the signal that ended it (`ProcessFailure.exitcode` < 0)."""
    parts = []
    for rank, failure in sorted(failures.items()):
        code = failure.exitcode
        how = f"ended by {_signal_name(-code)}" if code < 0 else f"exit {code}"
        parts.append(f"rank {rank} {how}")
    return f"launch: failed ({', '.join(parts)})"


def signal_line(signum: int) -> str:
    """Return the one line that stands for torchrun's report of a signal it passed on."""
    return f"launch: the launcher got {_signal_name(signum)} and passed it on to the ranks"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # a number with no name on this platform
        return f"signal {signum}"


def quiet_agent_logs() -> None:
    """Keep the log records of torchrun's agent off the console: the `launch:` line says what
    failed. Its loggers each set their own level, so the records stop at their common parent
    (a handler there, so that Python's last-resort handler does not print them instead)."""
    elastic = logging.getLogger(ELASTIC_LOGGER)
    elastic.addHandler(logging.NullHandler())
    elastic.propagate = False


def quiet_launch_defaults() -> None:
    """Keep Accelerate's warning of the launch defaults it filled in off the console."""

    def keep(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(DEFAULTS_WARNING)

    logging.getLogger(LAUNCH_LOGGER).addFilter(keep)


def main(argv: list[str] | None = None) -> int:
    """Run `accelerate launch ARGS` in this process; return its exit code (1 after a failure of
    the ranks or a signal, with one `launch:` line)."""
    args = launch_command_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    quiet_agent_logs()
    quiet_launch_defaults()
    try:
        launch_command(args)
    except ChildFailedError as err:
        line = failure_line(err.failures)
    except SignalException as err:  # the agent has stopped the ranks with the same signal
        line = signal_line(err.sigval)
    except subprocess.CalledProcessError as err:  # one process: Accelerate's simple launcher
        how = f"ended by {_signal_name(-err.returncode)}" if err.returncode < 0 else None
        line = f"launch: failed ({how or f'exit {err.returncode}'})"
    except Exception as err:  # the agent's own failure (a port taken, a rendezvous): one line too
        line = f"launch: failed ({described(err)})"
    else:
        return 0
    print(line, file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
