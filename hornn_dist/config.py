"""Run configuration: typed dataclasses read from TOML plus `--set section.key=value` overrides, and written back as TOML."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
import stat
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hornn_dist.data.config import DataConfig
from hornn_dist.models.config import ModelConfig
from hornn_dist.run.on_resume import LR, MATCH, OPTIMIZER, SCHEDULE, START, STEP, on_resume
from hornn_dist.run.run_layout import CONFIG_FILE
from hornn_dist.util.checks import (
    check_at_least,
    check_at_most,
    check_choice,
    check_in_range,
    check_positive,
)
from hornn_dist.util.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CLIP_MODES = ("auto", "value", "norm")
SCHEDULES = ("plateau", "fixed_then_halve", "newbob")
MIXED_PRECISIONS = ("no", "bf16", "fp16", "auto")
REDUCE_DTYPES = ("fp32", "bf16")  # train.reduce_dtype (training/exchange.py maps them to dtypes)
# Accelerate's trackers (accelerate.tracking.LOGGER_TYPE_TO_CLASS), each with the module it
# imports; the pyproject extra of the same name installs it
TRACKER_MODULES = {
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "mlflow": "mlflow",
    "aim": "aim",
    "comet_ml": "comet_ml",
    "clearml": "clearml",
    "dvclive": "dvclive",
    "swanlab": "swanlab",
    "trackio": "trackio",
}
# Upper bounds of values that pass as numbers but would crash or hang the run later: the
# optimiser's settings become float32 tensors, the timeout a C int of milliseconds.
MAX_LR = 1000.0  # SGD trains these models at 0.1 to 30
MAX_CLIP = 1e6  # the clip and column norm thresholds (0 = off)
MAX_COLLECTIVE_TIMEOUT = 7 * 24 * 3600  # one week, in seconds
MAX_STREAMS = 1 << 20  # train.batch_size, train.eval_batch_size
MAX_BPTT = 1 << 20
MAX_CPU_THREADS = 4096  # train.cpu_threads
MAX_WARMUP_STEPS = 1 << 30  # optim.warmup_steps


@dataclass
class OptimConfig:
    """SGD with momentum, weight decay, gradient clipping, column norm and the lr schedules (§4)."""

    # initial learning rate for the per-token mean loss (§4: 0.5); a loss summed over a window's
    # T steps (Zaremba et al.'s lr 1) is lr T here (docs/training.md, "The lr scale")
    lr: float = on_resume(LR, 0.5)
    momentum: float = on_resume(OPTIMIZER, 0.5)  # SGD momentum
    weight_decay: float = on_resume(OPTIMIZER, 1e-6)  # L2 weight decay
    # the threshold of `clip_mode` `norm` or `value` (0 = no clipping); under `auto` leave it
    # unset
    clip: float = on_resume(STEP, 1.0)
    # `auto`: the recipe's clip, the global norm at 1, at 0.5 for `sum` pooling of order >= 2
    # (logged at start-up; training/optim.py resolve_clip); `norm`: the gradients' global L2 norm is clipped at
    # `clip`; `value`: element-wise hard clipping at `clip` (§4). Why: docs/training.md, "The
    # default recipe"
    clip_mode: str = on_resume(STEP, "auto")
    max_col_norm: float = on_resume(STEP, 4.0)  # column normalisation threshold (0 = off)
    # plateau (PTB recipe) | fixed_then_halve (text8 recipe) | newbob (rnnlm's: plateau until the
    # first halving, then halve every epoch)
    schedule: str = on_resume(SCHEDULE, "plateau")
    # fixed_then_halve: epochs at the initial lr before halving every epoch
    halve_after: int = on_resume(SCHEDULE, 5)
    min_lr: float = on_resume(SCHEDULE, 1e-4)  # the lr is never halved below this floor
    # plateau and newbob: halve the lr when an epoch lowers the validation loss by less than this
    # fraction (0: only when it does not decrease, §4's rule; 0.003 is rnnlm's); refused under
    # fixed_then_halve, which never reads it
    halve_below: float = on_resume(SCHEDULE, 0.0)
    # plateau and newbob: epochs in a row that each fail that test before the lr halves (1: the
    # first one, §4's and rnnlm's rule); 2 keeps one noisy epoch at a long step from ending
    # newbob's fixed phase (docs/training.md, "Plateau halving"); refused
    # under fixed_then_halve
    halve_patience: int = on_resume(SCHEDULE, 1)
    # convergence: once the lr has been halved, stop when `stop_patience` epochs in a row each
    # lower the validation loss by less than this fraction, or when a halving is due at `min_lr`
    # (0 = run all `train.epochs`)
    stop_improvement: float = on_resume(SCHEDULE, 0.003)
    # epochs in a row under `stop_improvement` that end a run (1: the first one, rnnlm's rule);
    # 2 keeps one noisy epoch from ending a run still improving (docs/training.md, "The default recipe")
    stop_patience: int = on_resume(SCHEDULE, 2)
    # true: a streak of `stop_patience` small epochs all at one lr halves the lr instead of
    # ending the run, which stops only once a lower lr no longer helps; it trained every model
    # of the bundled corpus to a better or equal validation (docs/training.md, "When a run stops")
    halve_before_stop: bool = on_resume(SCHEDULE, True)
    # steps over which the lr rises linearly from lr / warmup_steps to lr at the run's start (0:
    # none); without it a large lr throws an untrained tied output layer far from a uniform guess
    # for the first hundred steps (docs/training.md, "Warmup")
    warmup_steps: int = on_resume(STEP, 0)

    def validate(self) -> None:
        """Raise ConfigError naming the first key whose value is out of range."""
        check_positive("optim.lr", self.lr)
        check_at_most("optim.lr", self.lr, MAX_LR)
        check_in_range("optim.momentum", self.momentum, 0.0, 1.0, hi_open=True)
        check_at_least("optim.weight_decay", self.weight_decay, 0)
        check_at_most("optim.weight_decay", self.weight_decay, 1.0)
        check_at_least("optim.clip", self.clip, 0)
        check_at_most("optim.clip", self.clip, MAX_CLIP)
        check_choice("optim.clip_mode", self.clip_mode, CLIP_MODES)
        if self.clip_mode == "auto" and self.clip != OptimConfig.clip:
            raise ConfigError(
                f'optim.clip = {self.clip:g} needs optim.clip_mode "value" or "norm": under '
                f'"auto" the clip is chosen per model (docs/training.md, "The default recipe")'
            )
        check_at_least("optim.max_col_norm", self.max_col_norm, 0)
        check_at_most("optim.max_col_norm", self.max_col_norm, MAX_CLIP)
        check_choice("optim.schedule", self.schedule, SCHEDULES)
        check_at_least("optim.halve_after", self.halve_after, 0)
        check_at_least("optim.min_lr", self.min_lr, 0)
        check_at_most("optim.min_lr", self.min_lr, MAX_LR)
        check_in_range("optim.halve_below", self.halve_below, 0.0, 1.0, hi_open=True)
        if self.halve_below and self.schedule == "fixed_then_halve":  # ignored: refused instead
            raise ConfigError(
                f'optim.halve_below = {self.halve_below:g} applies to optim.schedule = "plateau" '
                f'or "newbob" only; "{self.schedule}" halves the lr every epoch after '
                'optim.halve_after: set optim.halve_below = 0 or optim.schedule = "plateau"'
            )
        check_at_least("optim.halve_patience", self.halve_patience, 1)
        if self.halve_patience != 1 and self.schedule == "fixed_then_halve":
            raise ConfigError(
                f"optim.halve_patience = {self.halve_patience} applies to optim.schedule = "
                f'"plateau" or "newbob" only; "{self.schedule}" halves the lr every epoch after '
                'optim.halve_after: set optim.halve_patience = 1 or optim.schedule = "newbob"'
            )
        check_in_range("optim.stop_improvement", self.stop_improvement, 0.0, 1.0, hi_open=True)
        check_at_least("optim.stop_patience", self.stop_patience, 1)
        check_in_range("optim.warmup_steps", self.warmup_steps, 0, MAX_WARMUP_STEPS)


@dataclass
class TrainConfig:
    """Batching, length and bookkeeping of a training run."""

    batch_size: int = on_resume(MATCH, 20)  # global number of TBPTT streams, split across processes
    bptt: int = on_resume(MATCH, 30)  # T, steps per truncated back-propagation window
    epochs: int = 10  # passes over the training split
    max_steps: int = 0  # stop after this many optimizer steps in total (0 = no limit)
    eval_batch_size: int = 10  # global number of evaluation streams
    eval_every: int = 0  # also validate every N steps (0 = only at the end of each epoch)
    # no | bf16 | fp16 | auto: fp16 on CUDA only; bf16 also on a CPU with bf16 instructions
    # (else fp32, said at start-up); auto: bf16 where the GPU or CPU has it and it measured
    # faster for the model (models/precision.py: resolve_mixed_precision)
    mixed_precision: str = "no"
    # replay the whole training step from CUDA graphs on a CUDA device, under every
    # `mixed_precision` and with any number of processes (then two graphs, the gradient
    # all-reduce between them; training/step.py); `false` = always eager
    cuda_graph: bool = True
    # several processes: the dtype the dense gradients travel in, fp32 | bf16 (half the bytes:
    # all-reduced in bf16, cast back into the fp32 gradients; clip, momentum and update stay
    # fp32). The embedding's touched rows always travel in fp32 (training/exchange.py;
    # docs/scaling.md)
    reduce_dtype: str = "fp32"
    seed: int = on_resume(START, 1234)  # random seed (weights init)
    output_dir: str = "runs/demo"  # run directory: checkpoints, TensorBoard, resolved config
    checkpoint_every: int = 1000  # steps (0 = only at epoch ends and at the end)
    keep_checkpoints: int = 3  # newest checkpoints kept, plus the best by validation loss
    # seconds a process waits for the others in a collective (all-reduce, barrier) before the
    # run stops with one error line naming the rank and what it waited for (several
    # processes only)
    collective_timeout: int = 600
    # resume a checkpoint on another prepared corpus than it was trained on (same vocabulary,
    # other text: a warning in the log names both); `false` refuses such a resume with one line
    allow_corpus_change: bool = False
    # torch's CPU threads in each process: "auto" = OMP_NUM_THREADS where set (accelerate
    # launch and sweep set it per process), else 1: a small model's GEMMs gain little from a
    # second thread, and on a busy machine each step waits for the slower one (the demo ran
    # 4x slower on 2 threads under load; docs/training.md, "CPU threads");
    # a number N = exactly N. CPU runs only: a CUDA run keeps torch's default
    cpu_threads: int | str = "auto"

    def validate(self) -> None:
        """Raise ConfigError naming the first key whose value is out of range."""
        for key in ("batch_size", "bptt", "epochs", "eval_batch_size", "keep_checkpoints"):
            check_at_least(f"train.{key}", getattr(self, key), 1)
        for key in ("max_steps", "eval_every", "checkpoint_every"):
            check_at_least(f"train.{key}", getattr(self, key), 0)
        for key in ("batch_size", "eval_batch_size"):
            check_at_most(f"train.{key}", getattr(self, key), MAX_STREAMS)
        check_at_most("train.bptt", self.bptt, MAX_BPTT)
        check_in_range(
            "train.collective_timeout", self.collective_timeout, 10, MAX_COLLECTIVE_TIMEOUT
        )
        check_choice("train.mixed_precision", self.mixed_precision, MIXED_PRECISIONS)
        check_choice("train.reduce_dtype", self.reduce_dtype, REDUCE_DTYPES)
        check_in_range("train.seed", self.seed, 0, 2**32 - 1)  # numpy's seed range
        if not self.output_dir:
            raise ConfigError("train.output_dir must not be empty; set it to a folder for this run")
        if isinstance(self.cpu_threads, str) and self.cpu_threads != "auto":
            raise ConfigError(
                f'train.cpu_threads must be "auto" or a number of threads, got {self.cpu_threads!r}'
            )
        if isinstance(self.cpu_threads, int):
            check_in_range("train.cpu_threads", self.cpu_threads, 1, MAX_CPU_THREADS)


@dataclass
class LogConfig:
    """Console, progress bar and TensorBoard logging."""

    every: int = 50  # steps between log lines and TensorBoard scalars
    tensorboard: bool = True  # false: leave tensorboard out of log.trackers
    # where the scalars and hyper-parameters go, through Accelerate's trackers: any of
    # tensorboard, wandb, mlflow, aim, comet_ml, clearml, dvclive, swanlab, trackio
    trackers: list[str] = field(default_factory=lambda: ["tensorboard"])
    # tqdm bar on the main process: `"auto"` when stderr is a terminal (tqdm's disable=None:
    # not in a redirected log, which holds log lines, not bar redraws), `true` always, `false`
    # never
    progress: bool | str = "auto"

    def validate(self) -> None:
        """Raise ConfigError naming the first key whose value is out of range."""
        check_at_least("log.every", self.every, 1)
        for name in self.trackers:
            check_choice("log.trackers", name, tuple(TRACKER_MODULES))
        if isinstance(self.progress, str) and self.progress != "auto":
            raise ConfigError(f'log.progress must be true, false or "auto", got {self.progress!r}')

    def tracker_names(self) -> list[str]:
        """Return the trackers a run writes to: log.trackers, less tensorboard when
        log.tensorboard = false."""
        names = list(dict.fromkeys(self.trackers))
        return [n for n in names if n != "tensorboard" or self.tensorboard]

    def draws_progress(self) -> bool:
        """Return whether to draw the progress bar (`auto`: when stderr is a terminal)."""
        if self.progress == "auto":
            isatty = getattr(sys.stderr, "isatty", None)
            return bool(isatty and isatty())
        return bool(self.progress)

    def prepare_progress(self) -> bool | str:
        """Return how data preparation shows progress: a bar where `draws_progress`, log lines
        (`"lines"`) where `auto` finds stderr redirected, nothing for `false`."""
        if self.draws_progress():
            return True
        return "lines" if self.progress == "auto" else False


@dataclass
class RunConfig:
    """A whole run: one dataclass per TOML section."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    log: LogConfig = field(default_factory=LogConfig)

    def validate(self) -> None:
        """Validate every section."""
        for section in SECTIONS:
            getattr(self, section).validate()

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Return the config as nested plain dicts (the TOML layout)."""
        return dataclasses.asdict(self)

    def to_toml(self) -> str:
        """Return the config as TOML text that `load_config` reads back into the same run."""
        sections = self.to_dict()
        sections["data"] = self.data.toml_table()
        return to_toml(sections)

    def flat(self) -> dict[str, bool | int | float | str]:
        """Return `section.key -> value` with lists joined, for TensorBoard hparams."""
        out: dict[str, bool | int | float | str] = {}
        for section, values in self.to_dict().items():
            for key, value in values.items():
                listed = ",".join(map(str, value)) if isinstance(value, list) else value
                out[f"{section}.{key}"] = listed
        return out


SECTIONS = tuple(f.name for f in dataclasses.fields(RunConfig))


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Return the validated RunConfig read from a TOML file (None = defaults) with overrides applied."""
    raw: dict[str, Any] = {}
    if path is not None:
        raw = read_with_base(Path(path))
    for item in overrides:
        section, key, value = parse_override(item)
        if _field_type(section, key) is str and not isinstance(value, str):
            value = item.partition("=")[2].strip()  # e.g. train.output_dir=2024 stays a string
        table = raw.setdefault(section, {})
        if not isinstance(table, dict):
            raise ConfigError(f"[{section}] must be a table of keys, got {table!r}")
        table[key] = value
    return config_from_dict(raw)


def config_from_dict(raw: dict[str, Any]) -> RunConfig:
    """Return the validated RunConfig built from nested dicts, checking every key and type."""
    sections: dict[str, Any] = {}
    for section, values in raw.items():
        if section not in SECTIONS:
            raise ConfigError(
                f"unknown config section [{section}]{did_you_mean(section, SECTIONS)}"
            )
        if not isinstance(values, dict):
            raise ConfigError(f"[{section}] must be a table of keys, got {values!r}")
        cls = _SECTION_TYPES[section]
        fields = _checked_fields(section, cls, values)
        sections[section] = cls(**_expand_home(section, fields))
    cfg = RunConfig(**sections)
    cfg.data.user_keys = frozenset(raw.get("data", {}))  # the keys set, even at their default
    cfg.validate()
    return cfg


# keys that hold paths on this machine: a leading ~ is the user's home, as in a shell
PATH_KEYS = {
    "data": ("path", "train", "valid", "test", "cache_dir"),
    "train": ("output_dir",),
}


def _expand_home(section: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Return the fields with `~` expanded in the section's path keys, each checked for a NUL
    byte (the OS refuses it, with a traceback, at the first use)."""
    out = dict(fields)
    for key in PATH_KEYS.get(section, ()):
        if isinstance(out.get(key), str):
            out[key] = os.path.expanduser(_no_nul(f"{section}.{key}", out[key]))
        elif isinstance(out.get(key), list):
            out[key] = [
                os.path.expanduser(_no_nul(f"{section}.{key}", item))
                if isinstance(item, str)
                else item
                for item in out[key]
            ]
    return out


def _no_nul(key: str, path: str) -> str:
    """Return `path`; raise ConfigError naming `key` when it holds a NUL byte."""
    where = path.find("\x00")
    if where >= 0:
        raise ConfigError(
            f"{key} holds a NUL byte (\\x00) at character {where}, which no path may hold; "
            "remove it"
        )
    return path


def add_set_option(
    parser: argparse.ArgumentParser, help: str, metavar: str = "SECTION.KEY=VALUE"
) -> None:
    """Add the repeatable `--set section.key=value` option (into `overrides`) to a command."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar=metavar, help=help
    )


def read_with_base(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Return a run config file's tables over those of its `base` file (a path relative to
    it, itself read the same way): each [section] key the file sets wins, the others are the
    base's, so a config that differs from another in a few keys holds only those."""
    raw = read_toml(path, "config file", "configs/demo.toml")
    base = raw.pop("base", None)
    if base is None:
        return raw
    if not isinstance(base, str):
        raise ConfigError(
            f'{path}: base must be a config file\'s path (base = "ptb.toml"), got {base!r}'
        )
    where = (path.parent / base).resolve()
    if where in seen or where == path.resolve():
        raise ConfigError(f"{path}: base = {base!r} leads back to itself; break the cycle")
    merged = read_with_base(where, (*seen, path.resolve()))
    for section, values in raw.items():
        if isinstance(values, dict) and isinstance(merged.get(section), dict):
            merged[section] = {**merged[section], **values}
        else:
            merged[section] = values
    return merged


def read_toml(path: Path, what: str, example: str) -> dict[str, Any]:
    """Return the tables of a TOML file; raise ConfigError (one line) naming `what` it is."""
    if path.is_dir():
        inside = path / CONFIG_FILE  # a run folder
        hint = f" (a run's own config is {inside})" if inside.is_file() else ""
        raise ConfigError(
            f"{what} {path} is a folder, not a file; pass a TOML file such as {example}{hint}"
        )
    if not path.is_file():
        kind = _special_file_kind(path)
        found = f"is {kind}, not a file" if kind else "not found"
        raise ConfigError(f"{what} {path} {found}; pass a TOML file such as {example}")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a leading BOM is no key
    except UnicodeDecodeError as err:
        raise ConfigError(f"{what} {path} is not UTF-8 text: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{what} {path} is not valid TOML: {err}") from None


def _special_file_kind(path: Path) -> str:
    """Return what `path` is when it exists but is neither a file nor a folder ("a character
    device" for /dev/null), else ""."""
    try:
        mode = path.stat().st_mode
    except OSError:  # missing, or a link to nothing
        return ""
    kinds = {
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISFIFO: "a pipe",
        stat.S_ISSOCK: "a socket",
    }
    return next((kind for test, kind in kinds.items() if test(mode)), "")


def parse_override(item: str) -> tuple[str, str, Any]:
    """Return (section, key, value) from `section.key=value`; the value is parsed as TOML when it can be."""
    name, sep, text = item.partition("=")
    section, dot, key = name.strip().partition(".")
    if not sep or not dot or not key:
        raise ConfigError(
            f"--set {item!r} must look like section.key=value, e.g. train.max_steps=100"
        )
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text  # a bare string such as train.output_dir=runs/x
    return section, key, value


def to_toml(sections: dict[str, dict[str, Any]]) -> str:
    """Return TOML text for nested sections of str/int/float/bool/list values."""
    lines: list[str] = []
    for section, values in sections.items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            lines.append(f"{key} = {toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def toml_value(value: Any) -> str:
    """Return one value as a TOML literal (what `--set` and the config files parse back)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _toml_string(text: str) -> str:
    """Return `text` as a pure-ASCII TOML basic string (quotes, controls, non-ASCII escaped)."""
    short = {
        '"': '\\"',
        "\\": "\\\\",
        "\b": "\\b",
        "\t": "\\t",
        "\n": "\\n",
        "\f": "\\f",
        "\r": "\\r",
    }
    out = []
    for char in text:
        code = ord(char)
        if char in short:
            out.append(short[char])
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04X}")
        else:
            out.append(f"\\U{code:08X}")
    return '"' + "".join(out) + '"'


_SECTION_TYPES: dict[str, type] = {
    f.name: typing.get_type_hints(RunConfig)[f.name] for f in dataclasses.fields(RunConfig)
}


def _field_type(section: str, key: str) -> Any:
    """Return the type hint of `section.key`, or None when there is no such key."""
    cls = _SECTION_TYPES.get(section)
    return typing.get_type_hints(cls).get(key) if cls is not None else None


def _checked_fields(section: str, cls: type, values: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    out = {}
    for key, value in values.items():
        if key not in hints:
            raise ConfigError(f"unknown key {section}.{key}{did_you_mean(key, names, section)}")
        out[key] = _coerce(f"{section}.{key}", value, hints[key])
    return out


def _coerce(name: str, value: Any, hint: Any) -> Any:
    """Return value checked against the field's type (int accepted where float is expected)."""
    origin = typing.get_origin(hint)
    if origin is list and typing.get_args(hint) == (int,):
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise ConfigError(f"{name} must be a list of integers, got {value!r}")
        return value
    if origin is list:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{name} must be a list of strings, got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):  # e.g. bool | str: the first type that fits
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        for option in options:
            try:
                return _coerce(name, value, option)
            except ConfigError:
                continue
        names = " or ".join(option.__name__ for option in options)
        raise ConfigError(f"{name} must be of type {names}, got {value!r}")
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok:
            if abs(value) > sys.float_info.max or not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value}")
            value = float(value)
    else:
        ok = isinstance(value, hint)
    if not ok:
        raise ConfigError(f"{name} must be of type {hint.__name__}, got {value!r}")
    return value


def did_you_mean(word: str, options: typing.Iterable[str], section: str = "") -> str:
    """Return "; did you mean X?" for the closest option, else "; allowed: ..." listing them."""
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    prefix = f"{section}." if section else ""
    if match:
        return f"; did you mean {prefix}{match[0]}?"
    return f"; allowed: {', '.join(sorted(options))}"


# every command's --help ends with this pointer to the generated key tables
KEYS_HELP = (
    "config keys and defaults: docs/config.md (one table per [section]); "
    "a run's resolved config: python -m hornn_dist.train CONFIG --print-config"
)
