"""The test run itself: no warnings from inside the libraries it uses, no private API it relies on
without saying so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train_helpers import REPO, reset_accelerate_state

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

IMPORT_MKLDNN = """
import importlib
import sys


def test_import_mkldnn_afresh():
    import torch  # noqa: F401  (torch.utils.mkldnn needs torch imported)

    sys.modules.pop("torch.utils.mkldnn", None)
    importlib.import_module("torch.utils.mkldnn")
"""


def _pytest_with_filters(tmp_path: Path, filters: list[str]) -> subprocess.CompletedProcess:
    """Run a real pytest on a file that imports torch.utils.mkldnn, warnings as errors but `filters`."""
    folder = tmp_path / f"run{len(filters)}"
    folder.mkdir()
    (folder / "test_mkldnn.py").write_text(IMPORT_MKLDNN)
    lines = "\n    ".join(["error", *filters])  # later filters win: "error" for all the rest
    (folder / "pytest.ini").write_text(f"[pytest]\nfilterwarnings =\n    {lines}\n")
    # no plugin but pytest's own: one installed here (pytest-benchmark warns when it finds
    # xdist's worker variables) would turn its own warning into this run's error
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "pytest.ini"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )


def test_the_warning_filters_silence_torch_compiles_import_of_mkldnn(tmp_path: Path) -> None:
    """torch.compile's inductor (test_step_gemm) imports torch.utils.mkldnn, whose 14 methods
    carry @torch.jit.script_method, deprecated in torch 2.13: pyproject's filter silences those
    in a real pytest run (its own parser and order of filters), which fails on them without it."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    filters = config["tool"]["pytest"]["ini_options"]["filterwarnings"]
    unfiltered = _pytest_with_filters(tmp_path, [])
    if unfiltered.returncode == 0:
        pytest.skip("this torch does not deprecate script_method: the filter has nothing to do")
    assert "script_method` is deprecated" in unfiltered.stdout, unfiltered.stdout[-2000:]
    filtered = _pytest_with_filters(tmp_path, filters)
    assert filtered.returncode == 0, filtered.stdout[-2000:]
    assert "1 passed" in filtered.stdout


def test_accelerates_private_reset_is_still_there() -> None:
    """The tests' one private use of Accelerate: its singleton reset still exists and works."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    assert hasattr(AcceleratorState, "_reset_state"), (
        "this Accelerate release dropped AcceleratorState._reset_state, which "
        "tests/train_helpers.py:reset_accelerate_state calls: replace it there "
        "with the release's own way to forget its singleton"
    )
    reset_accelerate_state()
    Accelerator(cpu=True)
    assert AcceleratorState._shared_state != {}
    reset_accelerate_state()
    assert AcceleratorState._shared_state == {}
