"""A sweep file: a base run config, a grid of runs and their recipes, read and checked in full.

    base = "../demo.toml"                 # every run starts from this config (relative to this file)
    output_dir = "runs/sweeps/demo_orders"  # run NAME trains in output_dir/NAME
    layout = "orders"                     # report's main table: orders | alpha | summary
    paper = "ptb"                         # the paper's numbers beside ours: ptb | text8 | none
    set = { "train.epochs" = 15 }         # overrides for every run

    [[runs]]                              # a group: the grid's cartesian product, each with `set`
    name = "hornn{model.order}-{model.pooling}"
    grid = { "model.order" = [2, 3, 4], "model.pooling" = ["sum", "max", "fofe", "gated"] }

    [[runs]]
    name = "rnn"
    set = { "model.order" = 1, "model.pooling" = "sum" }

    [recipes]                             # optional: every run trains under each recipe, and
    value5 = { "optim.clip_mode" = "value" }  # report keeps each model's best by validation

A run's config is: the base file, then the sweep's `set`, the group's `set` and grid point, the
recipe, and last the command line's `--set`. Every run's config is built and validated before
anything trains, so a bad override stops the sweep with one line naming the run and the key.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hornn_dist.config import RunConfig, did_you_mean, load_config, read_toml, toml_value
from hornn_dist.errors import ConfigError

LAYOUTS = ("orders", "alpha", "summary")
PAPERS = ("ptb", "text8", "none")
SWEEP_KEYS = ("description", "base", "output_dir", "layout", "paper", "set", "runs", "recipes")
GROUP_KEYS = ("name", "set", "grid")
RUNS_FILE = "sweep.json"  # written into output_dir: the runs, their recipes and overrides


@dataclass(frozen=True)
class PlannedRun:
    """One training run of a sweep."""

    name: str  # also its folder under the sweep's output_dir
    model: str  # the group's name for the model, without the recipe
    recipe: str  # "" when the sweep has no recipes
    overrides: tuple[str, ...]  # `section.key=value`, applied to the base config in order
    config: RunConfig = field(compare=False, repr=False)


@dataclass(frozen=True)
class SweepPlan:
    """A sweep file read and expanded into its runs, each with a validated config."""

    path: Path
    base: Path
    output_dir: Path
    layout: str
    paper: str
    runs: tuple[PlannedRun, ...]

    def record(self) -> dict[str, Any]:
        """Return what `report` needs to know of the sweep, for output_dir/sweep.json."""
        return {
            "sweep": str(self.path),
            "base": str(self.base),
            "layout": self.layout,
            "paper": self.paper,
            "runs": [
                {"name": r.name, "model": r.model, "recipe": r.recipe, "overrides": r.overrides}
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
    if "base" not in raw:
        raise ConfigError(f"{path}: missing key base, the run config every run starts from")
    base = (path.parent / str(raw["base"])).resolve()
    if not base.is_file():
        raise ConfigError(f"{path}: base = {raw['base']!r} names no file ({base})")
    layout = _choice(path, "layout", raw.get("layout", "summary"), LAYOUTS)
    paper = _choice(path, "paper", raw.get("paper", "none"), PAPERS)
    output_dir = Path(str(raw.get("output_dir") or f"runs/sweeps/{path.stem}"))
    shared = _overrides(path, "set", raw.get("set", {}))
    recipes = _recipes(path, raw.get("recipes", {}))
    groups = raw.get("runs", [])
    if not isinstance(groups, list) or not groups:
        raise ConfigError(f"{path}: the sweep has no runs; add at least one [[runs]] table")
    runs: list[PlannedRun] = []
    for index, group in enumerate(groups, 1):
        for model, overrides in _expand_group(path, index, group):
            for recipe, recipe_overrides in recipes:
                name = f"{model}--{recipe}" if recipe else model
                items = (*shared, *overrides, *recipe_overrides, *cli_overrides)
                config = _run_config(
                    path, base, name, (*items, f"train.output_dir={output_dir / name}")
                )
                runs.append(PlannedRun(name, model, recipe, items, config))
    _check_unique(path, runs)
    return SweepPlan(path, base, output_dir, layout, paper, tuple(runs))


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
    return [(name, _overrides(path, f"recipes.{name}", items)) for name, items in table.items()]


def _expand_group(path: Path, index: int, group: Any) -> list[tuple[str, tuple[str, ...]]]:
    """Return (model name, overrides) for every point of one [[runs]] group's grid."""
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
    out = []
    for point in itertools.product(*axes):
        values = dict(point)
        overrides = (*fixed, *_overrides(path, f"{where} grid", values))
        out.append((_format_name(path, where, str(group["name"]), values), overrides))
    return out


def _format_name(path: Path, where: str, pattern: str, values: dict[str, Any]) -> str:
    """Return the name with each {section.key} replaced by the grid point's value."""

    def value(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise ConfigError(f"{path}: {where} name uses {{{key}}}, which its grid does not set")
        return str(values[key])

    name = re.sub(r"\{([^{}]+)\}", value, pattern)
    problem = run_name_problem(name)
    if problem:
        raise ConfigError(f"{path}: {where} run name {name!r} {problem}")
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


def _check_unique(path: Path, runs: list[PlannedRun]) -> None:
    seen: set[str] = set()
    for run in runs:
        if run.name in seen:
            raise ConfigError(
                f"{path}: two runs are named {run.name!r}; put the grid's keys in the group's name"
            )
        seen.add(run.name)
