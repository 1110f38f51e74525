"""Helpers every benchmark script shares: its JSON's metadata (one builder), option parsing,
error rows, ports and the JSON file itself.

The scripts run as `python benchmarks/X.py`, so Python puts this folder on sys.path and
`import common` finds this file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import socket
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import torch

from hornn_dist.models.triton_tiles import TILES_ENV
from hornn_dist.runtime import cpu_name
from hornn_dist.util.errors import described
from hornn_dist.util.provenance import code_commit, machine

REPO = Path(__file__).resolve().parents[1]


def comma_list(p: argparse.ArgumentParser, flag: str, value: str, allowed) -> list[str]:
    """Return the items of a comma list; exit with a usage error naming an unknown one."""
    items = [v for v in value.split(",") if v]
    for item in items:
        if item not in allowed:
            p.error(f"{flag}: unknown {item!r}; choose from {', '.join(allowed)}")
    return items


def error_line(exc: BaseException) -> str:
    """Return the first line of an exception, prefixed by its type (a table row's error)."""
    return described(exc)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def device_name(device: torch.device) -> str:
    """Return a human name of the device: the GPU's, or the CPU's with its core count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_name()}, {os.cpu_count()} cores"


def _jsonable(value):
    """Return an option's value as JSON can hold it (paths and other objects as text)."""
    if value is None or isinstance(value, (str, int, float, bool, list, tuple, dict)):
        return value
    return str(value)


def run_meta(
    script: str,
    argv: list[str] | None,
    device: torch.device,
    args: argparse.Namespace | None = None,
    **extra,
) -> dict:
    """Return the metadata of a benchmark run (the one builder of every script's JSON): its
    command, date (UTC), commit and dirty flag, machine, device, torch, threads and options,
    then `extra`."""
    given = sys.argv[1:] if argv is None else argv
    meta = {
        "command": shlex.join(["python", f"benchmarks/{script}", *given]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **code_commit(),
        "machine": machine(),
        "device": str(device),
        "device_name": device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "threads": torch.get_num_threads(),
    }
    if args is not None:
        meta["args"] = {k: _jsonable(v) for k, v in vars(args).items()}
    return {**meta, **extra}


def meta_line(meta: dict) -> str:
    """Return the run's header to print: date, device, torch, threads, commit, then the command."""
    dirty = "-dirty" if meta.get("dirty") else ""
    return (
        f"{meta['date']} {meta['device_name']} torch {meta['torch']} threads {meta['threads']} "
        f"commit {meta['commit']}{dirty}\n{meta['command']}"
    )


def write_json(path: Path, meta: dict, rows: list[dict]) -> None:
    """Write the metadata and the rows so far to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n")


@contextlib.contextmanager
def forced_tiles(tiles: tuple[int, ...] | list[int] | None) -> Iterator[None]:
    """Run the block with the Triton engine's tiles forced to `tiles` through
    $HORNN_TRITON_TILES, as a user forces them (None: the engine chooses); restore it after."""
    before = os.environ.pop(TILES_ENV, None)
    if tiles is not None:
        os.environ[TILES_ENV] = "x".join(map(str, tiles))
    try:
        yield
    finally:
        os.environ.pop(TILES_ENV, None)
        if before is not None:
            os.environ[TILES_ENV] = before
