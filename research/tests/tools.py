"""The search's own scripts as the tests use them: a record reader of research/tools/ (or
research/gpu/grid_runs.py) loaded as a module, or run as its command in this process."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tests.train_helpers import run_here

REPO = Path(__file__).resolve().parents[2]
RECORDS = REPO / "research" / "records"
SWEEPS = REPO / "research" / "sweeps"
TOOLS = REPO / "research" / "tools"


def _on_path(folder: Path) -> None:
    """Put `folder` on sys.path, as `python FOLDER/SCRIPT.py` does (a script imports its
    siblings, e.g. record_tables.py imports record_runs.py)."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def load_tool(name: str, folder: Path = TOOLS) -> ModuleType:
    """Return folder/<name>.py loaded as a module."""
    _on_path(folder)
    spec = importlib.util.spec_from_file_location(f"research_{name}", folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def run_tool(name: str, *args: str, folder: Path = TOOLS) -> subprocess.CompletedProcess:
    """Run `python folder/<name>.py ARGS` in this process (`tests.train_helpers.run_here`)."""
    _on_path(folder)
    return run_here(name, *args)


def run_record_tables(record: Path) -> subprocess.CompletedProcess:
    """Run `python research/tools/record_tables.py RECORD` in this process."""
    return run_tool("record_tables", str(record))
