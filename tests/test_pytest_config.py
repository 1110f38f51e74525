"""The test run itself: no warnings from inside the libraries it uses."""

from __future__ import annotations

import subprocess
import sys

from tests.train_helpers import REPO, env


def test_the_step_gemm_tests_raise_no_deprecation_warning() -> None:
    """torch.compile's import of torch.utils.mkldnn warned 14 times (torch.jit.script_method)."""
    child = env()
    child.pop("PYTHONWARNINGS")  # pytest shows warnings only where nothing else filters them
    test = "tests/test_step_gemm.py::test_step_gemm_under_torch_compile_uses_mm"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=child,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "1 passed" in proc.stdout and "warning" not in proc.stdout, proc.stdout[-3000:]
