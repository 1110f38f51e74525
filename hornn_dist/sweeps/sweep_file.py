"""A sweep file: a base run config, a grid of runs and their recipes, read and checked in full.

    base = "../demo.toml"                 # every run starts from this config (relative to this file)
    output_dir = "runs/sweeps/demo_orders"  # run NAME trains in output_dir/NAME
    layout = "orders"                     # report's main table: orders | alpha | summary | fair
    paper = "ptb"                         # the paper's numbers beside ours: ptb | text8 | none
    set = { "train.epochs" = 15 }         # overrides for every run

    [[runs]]                              # a group: the grid's cartesian product, each with `set`
    name = "hornn{model.order}-{model.pooling}"
    grid = { "model.order" = [2, 3, 4], "model.pooling" = ["sum", "max", "fofe", "gated"] }

    [[runs]]
    name = "rnn"
    set = { "model.order" = 1, "model.pooling" = "sum" }

    [[runs]]
    name = "rnn-matched"
    set = { "model.order" = 1, "model.pooling" = "sum" }
    match_params = "hornn3-fofe"          # sized to that run's total parameter count (below)

    [recipes]                             # optional: every run trains under each recipe, and
    value5 = { "optim.clip_mode" = "value" }  # report keeps each model's best by validation

A run's config is: the base file, then the sweep's `set`, the group's `set` and grid point, the
recipe, the command line's `--set`, and last the hidden size `match_params` sets. Every run's
config is built and validated before anything trains, so a bad override stops the sweep with
one line naming the run and the key.

`match_params = "NAME"` sizes `model.hidden_size` of each run of its group so that the run's
total parameter count is within 2% of run NAME's: a run of the same sweep that is not matched
itself, named as its group names it (without the recipe: each recipe's run is matched to
NAME under the same recipe). `match_multiple = N` (default 1) sizes it among multiples of N
only: bf16 kernels (oneDNN's LSTM on a CPU, tensor cores) run far slower at other widths
(benchmarks/README.md, "Hidden sizes"). NAME may use the grid's keys as the group's name does, e.g.
"hornn3-fofe-seed{train.seed}". The counts are the model's own (sweeps/params.py), on the
prepared corpus's vocabulary: a sweep with match_params prepares its corpus when read (also
with --dry-run), as its first run would. `model.embedding_size` follows the hidden size only
where the config ties them (0, the same number as hidden_size, or tie_weights;
params.embedding_follows_hidden), else it stays as the config has it.

Every name that becomes a path, a group's run names and the recipe names (a run trains in
output_dir/MODEL--RECIPE), passes one rule, `run_name_problem`: one folder name of letters,
digits and . _ + -, never . or .. (checked again on each run's full name).
"""

from __future__ import annotations

import fnmatch
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hornn_dist.config import (
    RunConfig,
    did_you_mean,
    load_config,
    read_toml,
    read_with_base,
    toml_value,
)
from hornn_dist.util.errors import ConfigError, HornnError
from hornn_dist.util.wording import counted

LAYOUTS = ("orders", "alpha", "summary", "fair", "transfer")
PAPERS = ("ptb", "text8", "none")
SWEEP_KEYS = (
    "description",
    "base",
    "output_dir",
    "layout",
    "paper",
    "set",
    "runs",
    "recipes",
    "corpora",
)
GROUP_KEYS = ("name", "base", "set", "grid", "match_params", "match_multiple")
# runs one sweep may hold: each run's config is built and checked before anything trains (some
# 5 ms a run), so a larger grid is refused at once, never read for minutes
MAX_RUNS = 10_000
RUNS_FILE = "sweep.json"  # written into output_dir: the runs, their recipes and overrides


@dataclass(frozen=True)
class PlannedRun:
    """One training run of a sweep."""

    name: str  # also its folder under the sweep's output_dir
    model: str  # the group's name for the model, without the recipe
    recipe: str  # "" when the sweep has no recipes
    overrides: tuple[str, ...]  # `section.key=value`, applied to the base config in order
    config: RunConfig = field(compare=False, repr=False)
    matched_to: str = ""  # the run whose total parameter count match_params sized this one to
    base: Path = Path()  # the run config it starts from: its group's base, else the sweep's
    corpus: str = ""  # its [corpora] entry; "" when the sweep has none


@dataclass(frozen=True)
class SweepPlan:
    """A sweep file read and expanded into its runs, each with a validated config."""

    path: Path
    base: Path | None  # None when every group names its own
    output_dir: Path
    layout: str
    paper: str
    runs: tuple[PlannedRun, ...]

    def record(self) -> dict[str, Any]:
        """Return what `report` needs to know of the sweep, for output_dir/sweep.json."""
        return {
            "sweep": str(self.path),
            "base": str(self.base or ""),
            "layout": self.layout,
            "paper": self.paper,
            "runs": [
                {
                    "name": r.name,
                    "model": r.model,
                    "recipe": r.recipe,
                    "overrides": r.overrides,
                    "base": str(r.base),
                    **({"corpus": r.corpus} if r.corpus else {}),
                    **({"matched_to": r.matched_to} if r.matched_to else {}),
                }
                for r in self.runs
            ],
        }


def read_sweep(path: str | Path, cli_overrides: tuple[str, ...] = ()) -> SweepPlan:
    """Return the SweepPlan of a sweep file; raise ConfigError (one line) on any problem."""
    path = Path(path)
    raw = read_toml(path, "sweep file", "configs/sweeps/demo_orders.toml")
    for key in raw:
        if key not in SWEEP_KEYS:
            raise ConfigError(f"{path}: unknown sweep key {key!r}{did_you_mean(key, SWEEP_KEYS)}")
    base = _base_file(path, "base", raw["base"]) if "base" in raw else None
    layout = _choice(path, "layout", raw.get("layout", "summary"), LAYOUTS)
    paper = _choice(path, "paper", raw.get("paper", "none"), PAPERS)
    output_dir = Path(str(raw.get("output_dir") or f"runs/sweeps/{path.stem}"))
    shared = _overrides(path, "set", raw.get("set", {}))
    recipes = _recipes(path, raw.get("recipes", {}))
    corpora = _corpora(path, raw.get("corpora", {}))
    groups = raw.get("runs", [])
    if not isinstance(groups, list) or not groups:
        raise ConfigError(f"{path}: the sweep has no runs; add at least one [[runs]] table")
    _check_size(path, groups, len(recipes), len(corpora))
    planned: list[_Entry] = []
    points = [p for i, g in enumerate(groups, 1) for p in _expand_group(path, i, g, base)]
    for corpus, data in corpora:  # a corpus's runs together: a screen finishes corpus by corpus
        for point in points:
            for recipe, recipe_overrides in recipes:
                model = f"{corpus}.{point.model}" if corpus else point.model
                name = _checked_name(path, point.where, f"{model}--{recipe}" if recipe else model)
                if corpus:
                    _check_whole_data(path, point, corpus, data)
                items = (*shared, *point.overrides, *data, *recipe_overrides, *cli_overrides)
                planned.append(
                    _Entry(
                        name,
                        model,
                        recipe,
                        items,
                        point.match,
                        point.multiple,
                        point.where,
                        point.base,
                        corpus,
                    )
                )
    _check_unique(path, planned)
    _check_matches(path, planned)
    configs = {
        e.name: _run_config(
            path, e.base, e.name, (*e.items, f"train.output_dir={output_dir / e.name}")
        )
        for e in planned
    }
    runs = [
        _matched(path, output_dir, e, planned, configs)
        if e.match
        else PlannedRun(
            e.name, e.model, e.recipe, e.items, configs[e.name], base=e.base, corpus=e.corpus
        )
        for e in planned
    ]
    return SweepPlan(path, base, output_dir, layout, paper, tuple(runs))


def _check_size(path: Path, groups: list[Any], recipes: int, corpora: int) -> None:
    """Raise ConfigError when the sweep holds more than MAX_RUNS runs, counted from the sizes
    of its grids before any run is built (a group's own problems are found when it is read)."""
    sizes = [
        math.prod(len(v) if isinstance(v, list) else 1 for v in group["grid"].values())
        if isinstance(group, dict) and isinstance(group.get("grid"), dict)
        else 1
        for group in groups
    ]
    count = sum(sizes) * recipes * corpora
    if count > MAX_RUNS:
        raise ConfigError(
            f"{path}: the sweep holds {count:,} runs ({sum(sizes):,} grid points x "
            f"{counted(recipes, 'recipe')} x {counted(corpora, 'corpus', 'corpora')}), more "
            f"than the {MAX_RUNS:,} a sweep may hold: shrink its grids or split it into several "
            "sweep files"
        )


def _base_file(path: Path, where: str, value: Any) -> Path:
    """Return the run config `value` names (relative to the sweep file), or raise ConfigError."""
    base = (path.parent / str(value)).resolve()
    if not base.is_file():
        raise ConfigError(f"{path}: {where} = {value!r} names no file ({base})")
    return base


def _corpora(path: Path, table: Any) -> list[tuple[str, tuple[str, ...]]]:
    """Return each [corpora] entry's name and its `data.*` overrides ([("", ())] without any)."""
    if not isinstance(table, dict):
        raise ConfigError(f'{path}: corpora must be a table of named "data.key" = value tables')
    if not table:
        return [("", ())]
    out = []
    for name, items in table.items():
        where = f"corpora.{name}"
        overrides = _overrides(path, where, items)
        for item in overrides:
            if not item.startswith("data."):
                raise ConfigError(
                    f"{path}: {where} sets {item.partition('=')[0]}; a corpus sets data.* keys "
                    "only (the rest of a run's config is its base's)"
                )
        out.append((_checked_name(path, "corpus", name), overrides))
    return out


def _check_whole_data(path: Path, point: _Point, corpus: str, data: tuple[str, ...]) -> None:
    """Raise ConfigError (one line) when the base of `point` sets a [data] key that `corpus`
    leaves in place: a run on a corpus takes all of its [data] from the corpus."""
    own = {item.partition("=")[0].removeprefix("data.") for item in data}
    left = sorted(set(read_with_base(point.base).get("data", {})) - own)
    if left:
        raise ConfigError(
            f"{path}: corpora.{corpus} leaves data.{left[0]} of {point.base.name} in place; set "
            f"it in [corpora] (every [data] key a base sets: {', '.join(left)})"
        )


@dataclass(frozen=True)
class _Point:
    """One grid point of a [[runs]] group: its model name, overrides and match_params name."""

    model: str
    overrides: tuple[str, ...]
    match: str  # "" without match_params
    multiple: int  # match_multiple: the matched hidden size is a multiple of it
    where: str  # "[[runs]] #N", for messages
    base: Path  # the run config its runs start from


@dataclass(frozen=True)
class _Entry:
    """A run of the sweep before its config is built."""

    name: str
    model: str
    recipe: str
    items: tuple[str, ...]
    match: str
    multiple: int
    where: str
    base: Path
    corpus: str


def select_runs(plan: SweepPlan, patterns: Sequence[str]) -> frozenset[str]:
    """Return the names of the runs of `plan` that match any of `patterns` (shell-style, as
    `sweep --only` takes them; every run without patterns); raise ConfigError (one line) for a
    pattern that matches no run."""
    names = [run.name for run in plan.runs]
    if not patterns:
        return frozenset(names)
    selected: set[str] = set()
    for pattern in patterns:
        matched = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            raise ConfigError(
                f"--only {pattern!r} matches no run of {plan.path}; its runs: {_listed(names)} "
                "(a shell-style pattern: * any text, ? one character)"
            )
        selected.update(matched)
    return frozenset(selected)


def _check_matches(path: Path, planned: list[_Entry]) -> None:
    """Raise ConfigError (one line) for a match_params that names no run, or a matched one."""
    models = list(dict.fromkeys(e.model for e in planned))
    matched = {e.model for e in planned if e.match}
    for entry in planned:
        if not entry.match:
            continue
        where = f"{path}: {entry.where} match_params = {entry.match!r}"
        if entry.match not in models:
            raise ConfigError(
                f"{where} names no run of the sweep; its runs (without the recipe): "
                f"{_listed(models)}"
            )
        if entry.match in matched:
            raise ConfigError(
                f"{where} names a run that match_params sizes itself; name one sized by its "
                f"config: {_listed([m for m in models if m not in matched])}"
            )


def _listed(names: list[str], most: int = 30) -> str:
    shown = ", ".join(names[:most]) or "none"
    return shown + (f", … ({len(names)} in all)" if len(names) > most else "")


def _matched(
    path: Path,
    output_dir: Path,
    entry: _Entry,
    planned: list[_Entry],
    configs: dict[str, RunConfig],
) -> PlannedRun:
    """Return the run of `entry` with the hidden size that matches its target's parameters."""
    from hornn_dist.sweeps.params import (
        hidden_size_overrides,
        matched_hidden_size,
        total_parameters,
        vocabulary_size,
    )

    target = next(e for e in planned if e.model == entry.match and e.recipe == entry.recipe)
    goal = configs[target.name]
    own = configs[entry.name]
    try:
        count = total_parameters(goal.model, vocabulary_size(goal.data, prepare=True))
        vocab = vocabulary_size(own.data, prepare=True)
        hidden = matched_hidden_size(own.model, vocab, count, entry.multiple)
    except ConfigError as err:
        raise ConfigError(
            f"{path}: run {entry.name} (match_params = {entry.match!r}): {err}"
        ) from None
    except HornnError as err:  # the corpus could not be prepared
        raise ConfigError(
            f"{path}: run {entry.name} (match_params = {entry.match!r}) counts parameters on "
            f"the prepared corpus: {err}"
        ) from None
    items = (*entry.items, *hidden_size_overrides(own.model, hidden))
    config = _run_config(
        path, entry.base, entry.name, (*items, f"train.output_dir={output_dir / entry.name}")
    )
    return PlannedRun(
        entry.name,
        entry.model,
        entry.recipe,
        items,
        config,
        target.name,
        base=entry.base,
        corpus=entry.corpus,
    )


def _choice(path: Path, key: str, value: Any, options: tuple[str, ...]) -> str:
    if value not in options:
        raise ConfigError(f"{path}: {key} must be one of {', '.join(options)}, got {value!r}")
    return str(value)


def _overrides(path: Path, where: str, table: Any) -> tuple[str, ...]:
    """Return `section.key=value` strings from an inline table of "section.key" = value."""
    if not isinstance(table, dict):
        raise ConfigError(
            f'{path}: {where} must be a table of "section.key" = value, got {table!r}'
        )
    items = []
    for key, value in table.items():
        if "." not in key:
            raise ConfigError(f'{path}: {where} key {key!r} must be "section.key", e.g. "optim.lr"')
        try:
            items.append(f"{key}={toml_value(value)}")
        except TypeError:  # a table: no config key holds one
            raise ConfigError(
                f"{path}: {where} value of {key!r} must be a number, string, boolean or list "
                f"of strings, got {value!r}"
            ) from None
    return tuple(items)


def _recipes(path: Path, table: Any) -> list[tuple[str, tuple[str, ...]]]:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: recipes must be a table of named override tables")
    if not table:
        return [("", ())]
    return [
        (_checked_name(path, "recipe", name), _overrides(path, f"recipes.{name}", items))
        for name, items in table.items()
    ]


def _expand_group(path: Path, index: int, group: Any, sweep_base: Path | None) -> list[_Point]:
    """Return every point of one [[runs]] group's grid."""
    where = f"[[runs]] #{index}"
    if not isinstance(group, dict):
        raise ConfigError(f"{path}: {where} must be a table with name, set and grid")
    for key in group:
        if key not in GROUP_KEYS:
            raise ConfigError(
                f"{path}: {where}: unknown key {key!r}{did_you_mean(key, GROUP_KEYS)}"
            )
    if not group.get("name"):
        raise ConfigError(f'{path}: {where} needs a name, e.g. name = "hornn{{model.order}}"')
    if "base" in group:
        base = _base_file(path, f"{where} base", group["base"])
    elif sweep_base is None:
        raise ConfigError(
            f'{path}: {where} has no base: set base = "../demo.toml" at the top of the sweep '
            "file (every run starts from it) or in the group"
        )
    else:
        base = sweep_base
    fixed = _overrides(path, f"{where} set", group.get("set", {}))
    grid = group.get("grid", {})
    if not isinstance(grid, dict):
        raise ConfigError(f'{path}: {where} grid must be a table of "section.key" = [values]')
    axes = []
    for key, values in grid.items():
        values = values if isinstance(values, list) else [values]
        if not values:
            raise ConfigError(f"{path}: {where} grid {key!r} is empty; give it at least one value")
        axes.append([(key, value) for value in values])
    match = group.get("match_params", "")
    if "match_params" in group and (not isinstance(match, str) or not match):
        raise ConfigError(
            f"{path}: {where} match_params must name a run of the sweep, e.g. match_params = "
            f'"hornn3-fofe", got {match!r}'
        )
    multiple = group.get("match_multiple", 1)
    if "match_multiple" in group and not match:
        raise ConfigError(f"{path}: {where} match_multiple needs match_params beside it")
    if isinstance(multiple, bool) or not isinstance(multiple, int) or not 1 <= multiple <= 1024:
        raise ConfigError(
            f"{path}: {where} match_multiple must be a whole number in [1, 1024] (e.g. 16), "
            f"got {multiple!r}"
        )
    out = []
    for point in itertools.product(*axes):
        values = dict(point)
        overrides = (*fixed, *_overrides(path, f"{where} grid", values))
        name = _checked_name(
            path, where, _format_name(path, where, "name", str(group["name"]), values)
        )
        target = _format_name(path, where, "match_params", match, values) if match else ""
        out.append(_Point(name, overrides, target, multiple, where, base))
    return out


def _format_name(path: Path, where: str, key: str, pattern: str, values: dict[str, Any]) -> str:
    """Return the group's `key` (its name, its match_params) with each {section.key} replaced
    by the grid point's value."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ConfigError(f"{path}: {where} {key} uses {{{name}}}, which its grid does not set")
        return str(values[name])

    return re.sub(r"\{([^{}]+)\}", value, pattern)


def _checked_name(path: Path, where: str, name: str) -> str:
    """Return `name`, a name that becomes a folder (a run's, a recipe's part of one), or raise
    ConfigError (one line) where `run_name_problem` refuses it."""
    problem = run_name_problem(name)
    if problem:
        what = "recipe name" if where == "recipe" else f"{where} run name"
        raise ConfigError(f"{path}: {what} {name!r} {problem}")
    return name


def run_name_problem(name: object) -> str:
    """Return why `name` cannot name a run's folder under the sweep's output_dir ("" if it
    can): it must be one path component of letters, digits and . _ + -, never . or .."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._+-]+", name):
        return "must be letters, digits and . _ + - (a folder name)"
    if name in (".", ".."):
        return "must name a folder of its own, not . or .."
    return ""


def _run_config(path: Path, base: Path, name: str, overrides: tuple[str, ...]) -> RunConfig:
    try:
        return load_config(base, list(overrides))
    except ConfigError as err:
        raise ConfigError(f"{path}: run {name}: {err}") from None


def _check_unique(path: Path, runs: list[_Entry]) -> None:
    seen: set[str] = set()
    for run in runs:
        if run.name in seen:
            raise ConfigError(
                f"{path}: two runs are named {run.name!r}; put the grid's keys in the group's name"
            )
        seen.add(run.name)
