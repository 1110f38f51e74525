"""Tokens/s for the fair table, from a named speed record: `report --speed-record PATH`.

The runs of a sweep share their machine (`--jobs N` splits the CPU cores; a GPU sweep may
differ in load from run to run), so their own tokens/s do not compare. The fair table takes each
model's speed from a record where it ran alone instead, and names it; without one its column
says so. Two kinds of record are read:

- a `benchmarks/throughput.py --json` file (or a folder holding `throughput.json`, as
  `benchmarks/gpu_check.sh` writes it, or several `throughput*.json`, e.g. one per
  hidden size, read together): the training step of one process. A row
  serves a model of the same arch, pooling and order (HORNNs), hidden size and embedding width;
  of several (precisions, modes, engines) the fastest, named in the cell. The multi-process
  modes (`*-ar`, `*-ddp`) are left out. Files timed at different CPU thread counts (`threads`
  in their meta) are not compared: only the rows at the count that times the most models serve.
- a folder of training runs, each trained alone (a sweep's output_dir run with `--jobs 1`, or
  one run's output_dir): a run serves a model with the same `[model]` settings (those that
  change what it computes, not `engine` or `recurrence_precision`); its trainer_state.json's
  tokens/s and hardware. Its tokens/s is the whole run's, start-up included, so short runs
  read low.

A model the record has no row for gets "not in the record", never a number from another size.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hornn_dist.models import ModelConfig
from hornn_dist.run.on_resume import EXECUTION, keys_of
from hornn_dist.util.errors import ConfigError

THROUGHPUT_GLOB = "throughput*.json"  # a record folder's throughput.py JSONs, all read
MULTI_PROCESS_MODES = ("-ar", "-ddp")  # suffixes of throughput.py's modes of several processes


@dataclass(frozen=True)
class Speed:
    """One model's tokens/s in a record, and what measured it."""

    tokens_per_sec: float
    how: str  # e.g. "bf16 graphed triton", or a run's name
    threads: int | None = None  # the CPU threads that timed it (None: a GPU, or not recorded)


@dataclass
class SpeedRecord:
    """A speed record read in full: its path, its machine, and a lookup by model."""

    path: Path
    device: str
    kind: str  # "throughput" | "runs"
    rows: list[tuple[ModelConfig, Speed]]
    threads: int | None = None  # the one CPU thread count of its rows, where recorded

    def lookup(self, model: ModelConfig) -> Speed | None:
        """Return the fastest speed the record holds for `model`, or None."""
        found = [speed for cfg, speed in self.rows if _same_model(cfg, model, self.kind)]
        return max(found, key=lambda s: s.tokens_per_sec, default=None)

    def describe(self) -> str:
        """Return the record in words for the report: its path, kind and machine."""
        what = (
            "benchmarks/throughput.py, one process's training step"
            if self.kind == "throughput"
            else "training runs, each alone"
        )
        threads = f", {self.threads} thread(s)" if self.threads else ""
        return f"`{self.path}` ({what}; {self.device or 'machine not recorded'}{threads})"


def _same_model(record: ModelConfig, model: ModelConfig, kind: str) -> bool:
    def shape(cfg: ModelConfig) -> tuple:
        hornn = cfg.arch == "hornn"
        return (
            cfg.arch,
            cfg.pooling if hornn else "",
            cfg.order if hornn else 0,
            cfg.hidden_size,
            cfg.embedding_size or cfg.hidden_size,
            cfg.num_layers,
        )

    if kind == "throughput":
        return shape(record) == shape(model)
    plain = {key: "" for key in keys_of(model, EXECUTION)}
    return dataclasses.replace(record, **plain) == dataclasses.replace(model, **plain)


def read_speed_record(path: str | Path) -> SpeedRecord:
    """Return the speed record at `path`; raise ConfigError (one line) when it is none."""
    path = Path(path)
    if path.is_file():
        return _read_throughput(path)
    files = sorted(path.glob(THROUGHPUT_GLOB)) if path.is_dir() else []
    if files:  # one JSON per size, e.g. the matched models' beside H 128's
        parts = [_read_throughput(f) for f in files]
        devices = "; ".join(dict.fromkeys(p.device for p in parts if p.device))
        rows, threads = _one_thread_count([r for p in parts for r in p.rows])
        return SpeedRecord(path, devices, "throughput", rows, threads)
    if path.is_dir():
        return _read_runs(path)
    raise ConfigError(
        f"--speed-record {path} not found; pass a benchmarks/throughput.py JSON (or a record "
        "folder with throughput.json) or a folder of runs each trained alone"
    )


def _one_thread_count(
    rows: list[tuple[ModelConfig, Speed]],
) -> tuple[list[tuple[ModelConfig, Speed]], int | None]:
    """Return the rows timed at the CPU thread count that times the most distinct models (of a
    tie, the fewest threads), and that count: two threads' speed beside one's is no comparison."""
    counts = {speed.threads for _, speed in rows}
    if len(counts) < 2 or None in counts:
        return rows, next(iter(counts)) if len(counts) == 1 else None
    models = {n: {repr(cfg) for cfg, speed in rows if speed.threads == n} for n in counts}
    chosen = min(counts, key=lambda n: (-len(models[n]), n))
    return [row for row in rows if row[1].threads == chosen], chosen


def _read_throughput(path: Path) -> SpeedRecord:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        meta: dict[str, Any] = data["meta"]
        results: list[dict[str, Any]] = data["results"]
        variants: dict[str, Any] = meta.get("variants") or {}
        args: dict[str, Any] = meta.get("args") or {}
        on_cpu = str(meta.get("device", "")) == "cpu"
        threads = int(meta["threads"]) if on_cpu and meta.get("threads") else None
        rows = []
        for row in results:
            mode = str(row.get("mode", ""))
            if "tokens_per_s" not in row or mode.endswith(MULTI_PROCESS_MODES):
                continue
            variant = variants.get(row["variant"], {})
            # --order and --layers build every row; `variants` holds the templates before them
            model = ModelConfig(
                arch=str(row["arch"]),
                pooling=str(row.get("pooling") or "sum"),
                order=int(args.get("order") or variant.get("order", 1)),
                hidden_size=int(row["hidden"]),
                embedding_size=int(row.get("embedding") or 0),
                num_layers=int(args.get("layers") or variant.get("num_layers", 1)),
            )
            how = " ".join(str(row.get(k, "")) for k in ("precision", "mode", "engine")).strip()
            rows.append((model, Speed(float(row["tokens_per_s"]), how, threads)))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ConfigError(
            f"--speed-record {path} is not a benchmarks/throughput.py JSON ({type(err).__name__}: "
            f"{err})"
        ) from None
    device = str(meta.get("device_name") or meta.get("device") or "")
    return SpeedRecord(path, device, "throughput", rows, threads)


def _read_runs(path: Path) -> SpeedRecord:
    from hornn_dist.sweeps.results import read_runs

    records = [r for r in read_runs(path) if r.tokens_per_sec > 0]
    if not records:
        raise ConfigError(
            f"--speed-record {path} holds no run with a recorded tokens/s and no "
            f"{THROUGHPUT_GLOB}; pass a speed record (report --help)"
        )
    rows = [(r.config.model, Speed(r.tokens_per_sec, f"run {r.name}")) for r in records]
    devices = "; ".join(sorted({r.hardware for r in records if r.hardware}))
    return SpeedRecord(path, devices, "runs", rows)
