"""The fused engine's CPU step GEMM (oneDNN's linear) against float64 products and the reference."""

from __future__ import annotations

import platform

import pytest
import torch

from hornn_dist.models import HornnLayer, step_gemm
from hornn_dist.models.poolings import PAPER_POOLINGS
from hornn_dist.models.step_gemm import (
    ONEDNN_MIN_HIDDEN,
    ONEDNN_MIN_MACS,
    StepGemm,
    onednn_linear_works,
    onednn_pays,
)

try:  # tests/ as a package (tests/__init__.py present) or as a plain rootdir
    from tests.reference_hornn import reference_layer
    from tests.test_models_hornn import rel_err
except ImportError:
    from reference_hornn import reference_layer
    from test_models_hornn import rel_err

X86 = ("x86_64", "amd64")
needs_onednn = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available() or platform.machine().lower() not in X86,
    reason="the oneDNN step runs on x86-64 CPUs with a torch built with oneDNN",
)


@needs_onednn
def test_onednn_linear_is_found_on_this_build():
    """The CPU wheel has oneDNN's linear: the fast path is really what the tests below run."""
    assert onednn_linear_works()


@needs_onednn
def test_onednn_runs_only_where_it_pays():
    """oneDNN from H 256, or from 4M multiply-adds a step; mm below (the demo's H 128)."""
    assert onednn_pays(20, torch.empty(ONEDNN_MIN_HIDDEN, 8))
    assert not onednn_pays(20, torch.empty(128, 384))  # the demo: B 20, H 128, sum
    assert onednn_pays(128, torch.empty(128, 384))  # 6.3M multiply-adds
    rows = -(-ONEDNN_MIN_MACS // (64 * 128))  # the fewest rows that reach the threshold
    assert onednn_pays(rows, torch.empty(64, 128))
    assert not onednn_pays(rows - 1, torch.empty(64, 128))
    assert StepGemm(torch.randn(400, 1200), 20).onednn
    assert not StepGemm(torch.randn(128, 384), 20).onednn


@needs_onednn
@pytest.mark.parametrize("rows,k,n", [(20, 256, 120), (3, 300, 96), (1, 256, 8)])
def test_step_gemm_matches_the_float64_product(rows, k, n):
    """x @ w, out += x @ w and out = x @ w into strided views, to float32 rounding."""
    g = torch.Generator().manual_seed(rows * k + n)
    w = torch.randn(k, n, generator=g)
    x = torch.randn(rows, k, generator=g)
    gemm = StepGemm(w, rows)
    assert gemm.onednn
    want = x.double() @ w.double()
    assert rel_err(gemm(x), want) < 1e-6
    buf = torch.randn(2, rows, n + 5, generator=g)
    row = buf[1, :, :n]  # a strided slice, as in the engine's U buffer
    untouched = buf.clone()
    before = row.clone()
    gemm.add_to(row, x)
    assert rel_err(row, before.double() + want) < 1e-6
    gemm.write_to(row, x)
    assert rel_err(row, want) < 1e-6
    assert torch.equal(buf[0], untouched[0]) and torch.equal(buf[1, :, n:], untouched[1, :, n:])


@pytest.mark.parametrize(
    "make_w",
    [
        lambda: torch.randn(6, 10, dtype=torch.float64),  # float64: the reference precision
        lambda: torch.randn(10, 6).t(),  # a non-contiguous w: the fast form would need a copy
        lambda: torch.randn(6, 10, dtype=torch.bfloat16),
    ],
)
def test_step_gemm_falls_back_to_mm(make_w):
    """Anything but a contiguous float32 CPU weight multiplies exactly as torch.mm does."""
    w = make_w()
    x = torch.randn(4, 6, dtype=w.dtype)
    gemm = StepGemm(w, 10**9)  # large enough to pay, were it a float32 contiguous w
    assert not gemm.onednn
    assert torch.equal(gemm(x), x @ w)
    out = torch.randn(4, 10, dtype=w.dtype)
    want = out.addmm(x, w)
    gemm.add_to(out, x)
    assert torch.equal(out, want)
    gemm.write_to(out, x)
    assert torch.equal(out, torch.mm(x, w))


def test_other_cpus_keep_mm(monkeypatch):
    """oneDNN's step was measured on x86-64 only: an arm64 CPU keeps mm (its own BLAS)."""
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    onednn_linear_works.cache_clear()
    try:
        assert not onednn_linear_works()
        assert not StepGemm(torch.randn(400, 1200), 20).onednn
    finally:
        monkeypatch.undo()
        onednn_linear_works.cache_clear()


@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")
@pytest.mark.parametrize(
    "op",
    [
        ("mkldnn", "_no_such_linear"),  # another torch without the op
        ("no_such_namespace", "_linear_pointwise"),
        ("aten", "mm"),  # an op that exists but refuses the linear's arguments
    ],
)
def test_a_missing_or_failing_onednn_op_leaves_mm(monkeypatch, op):
    """The private op is tried once on a probe; when it is absent or fails, StepGemm and the
    fused engine multiply by mm: the same bits as with oneDNN turned off."""
    torch.manual_seed(9)
    layer = HornnLayer(6, ONEDNN_MIN_HIDDEN, order=2, pooling="gated")  # a size oneDNN pays at
    x = torch.randn(4, 3, 6)
    with torch.backends.mkldnn.flags(enabled=False):
        want, _ = layer(x)
    w, rows = torch.randn(ONEDNN_MIN_HIDDEN, 64), torch.randn(3, ONEDNN_MIN_HIDDEN)
    monkeypatch.setattr(step_gemm, "ONEDNN_LINEAR", op)
    onednn_linear_works.cache_clear()
    try:
        assert not onednn_linear_works()
        gemm = StepGemm(w, 3)
        assert not gemm.onednn
        assert torch.equal(gemm(rows), rows @ w)
        got, _ = layer(x)
        assert torch.equal(got, want)
    finally:
        monkeypatch.undo()
        onednn_linear_works.cache_clear()


@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")
def test_step_gemm_respects_onednn_turned_off():
    """torch.backends.mkldnn.flags(enabled=False) sends the product to mm."""
    w, x = torch.randn(6, 10), torch.randn(4, 6)
    assert StepGemm(w, 10**9).onednn == onednn_linear_works()
    with torch.backends.mkldnn.flags(enabled=False):
        gemm = StepGemm(w, 10**9)
        assert not gemm.onednn
        assert torch.equal(gemm(x), x @ w)


@pytest.mark.parametrize("pooling", PAPER_POOLINGS)
def test_float32_fused_engine_matches_the_float64_reference(pooling, monkeypatch):
    """The float32 path with oneDNN steps (at any size here) gives the eq. 3-7 outputs and
    gradients to 1e-5."""
    monkeypatch.setattr(step_gemm, "ONEDNN_MIN_HIDDEN", 1)
    assert StepGemm(torch.randn(16, 48), 3).onednn == onednn_linear_works()
    torch.manual_seed(len(pooling))
    T, B, N, H = 7, 3, 3, 16
    layer = HornnLayer(5, H, order=N, pooling=pooling, activation="tanh", init_std=0.3)
    x = torch.randn(T, B, 5, requires_grad=True)
    hist = torch.randn(N, B, H, requires_grad=True)
    weights = torch.randn(T, B, H)
    out, _ = layer(x, hist)
    got = torch.autograd.grad((out * weights).sum(), [x, hist, *layer.parameters()])
    layer64 = layer.double()
    x64, hist64 = x.detach().double().requires_grad_(), hist.detach().double().requires_grad_()
    ref, _ = reference_layer(layer64, x64, hist64)
    want = torch.autograd.grad((ref * weights.double()).sum(), [x64, hist64, *layer64.parameters()])
    assert rel_err(out, ref) < 1e-5
    for a, b in zip(got, want, strict=True):
        assert rel_err(a, b) < 1e-5


def test_step_gemm_under_torch_compile_uses_mm():
    """A graph torch.compile traces gets mm (inductor cannot lower oneDNN's linear on a plain
    weight), and the compiled product is the same."""

    def product(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        gemm = StepGemm(w, 10**9)
        out = torch.zeros(x.shape[0], w.shape[1])
        gemm.add_to(out, x)
        return out

    w, x = torch.randn(8, 12), torch.randn(3, 8)
    compiled = torch.compile(product, backend="inductor", fullgraph=True)
    assert rel_err(compiled(w, x), x.double() @ w.double()) < 1e-6
