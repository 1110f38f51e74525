"""The test run itself: no warnings from inside the libraries it uses."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest
from _pytest.warnings import apply_warning_filters

from tests.train_helpers import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _import_mkldnn(filters: list[str]) -> list[warnings.WarningMessage]:
    """Return the warnings of importing torch.utils.mkldnn afresh under pytest's `filters`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_warning_filters(filters, [])
        sys.modules.pop("torch.utils.mkldnn", None)
        importlib.import_module("torch.utils.mkldnn")
    return caught


def test_the_warning_filters_silence_torch_compiles_import_of_mkldnn() -> None:
    """torch.compile's inductor (test_step_gemm) imports torch.utils.mkldnn, whose 14 methods
    carry @torch.jit.script_method, deprecated in torch 2.13: pyproject's filter silences those
    (with pytest's own parser and order of filters), which do warn without it."""
    import torch  # noqa: F401  (torch.utils.mkldnn needs torch imported)

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    filters = config["tool"]["pytest"]["ini_options"]["filterwarnings"]
    unfiltered = _import_mkldnn([])
    if not unfiltered:
        pytest.skip("this torch does not deprecate script_method: the filter has nothing to do")
    assert all("script_method` is deprecated" in str(w.message) for w in unfiltered)
    assert _import_mkldnn(filters) == []
