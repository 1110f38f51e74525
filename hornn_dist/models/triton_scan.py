"""The HORNN recurrence (eq. 3-7) as Triton kernels: ONE kernel launch per time step each way.

The "triton" engine (``model.engine = "triton"``, every pooling). Where the fused engine
(`recurrence.py`) runs 3-5 kernels a step forward and 2-3 backward around a cuBLAS GEMM, here
the GEMMs, the pooling, the input term and f (and backward f', the winner mask of max, the
gate factors and the sum over paths) live in one kernel, so a step is one launch: what bounds a
small-batch step on the GPU is the number of dependent launches, not FLOPs
(docs/performance.md).

Forward, step t (``_forward_step``), "pull" form: each program owns a (batch, hidden) tile of
h_t and runs the N GEMMs of the window itself,

    part_n = h_{t-n} @ W_hn                       (K = H each, read from the state buffer)
    h_t    = f( xin_t + pool_n(part_n) )          sum: Σ part_n, fofe: Σ α^n part_n,
                                                  max: element-wise max, ties to the lowest n,
                                                  gated: Σ r_n ⊙ part_n, r_n = σ(xg_n + h_{t-n} @ W2n)

so nothing is recomputed and no intermediate is written: the state buffer holds
[history | h_0 .. h_{T-1}] (N+T, B, H) and step t reads rows t..t+N-1 and writes row N+t.
Max also stores the winning path n-1 (uint8) of every unit; gated stores r_n and part_n.

Backward, step t = T-1 .. 0 (``_backward_step``), same form:

    dh_t = dL/dh_t (from above) + Σ_n (m_n(t+n) ⊙ dz_{t+n}) @ W_hn^T  [+ gated: Σ_n
           (dz_{t+n} ⊙ part_n r_n (1 - r_n))(t+n) @ W2n^T],            dz_t = f'(z_t) ⊙ dh_t

with m_n = 1 for sum, α^n for fofe, the winner mask of path n for max (eq. 4's gradient goes
to the winner only) and r_n for gated. The program that finishes a tile of dz_t also stores
the operands the N earlier steps read: m_n ⊙ dz_t per path for max and gated, and gated's
gate-input gradient dz_t ⊙ part_n r_n (1 - r_n), straight into the layout of xp's gradient.
So each operand is made once, not once per hidden tile that reads it, and after the loop
nothing is left to compute but the weight GEMMs. The operands sit in buffers with N zero rows
either side, so every step reads N rows of the same shape. Then steps -1..-N give the
history's gradient (dh, no f'), only if the history needs one (TBPTT's detached history does
not). dL/dxin = dz (gated: also dL/dxg_n); after the loop dW_hn = Σ_t h_{t-n}^T (m_n ⊙ dz_t)
(and dW2n): N (2N) GEMMs, one per path.

K split (``SPLIT``, both directions): at B 20 x H 400 a step has only 25 output tiles, 25 of an
H100's 132 multiprocessors, each running 39 dependent K iterations; that engine was no faster
than the fused one (measured: docs/performance.md, "Numbers behind the code's choices"). So
SPLIT programs share each output tile, each over 1/SPLIT of every path's K range (whole
BLOCK_K chunks); each stores its partial sums (per path for max and gated, whose pooling is
not linear), counts its arrival with one atomic, and the last to arrive sums the partials in
split order (deterministic whatever the arrival order) and finishes the step (pool, f,
store). No program ever waits for another, so this needs no co-residency; on the H100 it made
one layer's step faster at the paper's size (measured: the same section). The tile sizes
and the split of each step shape come from `triton_tiles.py`.

Precision: the state, the accumulators and all element-wise math are float32 (float64 for
float64 inputs). The GEMMs use TF32 under CUDA autocast (as the fused engine and cuDNN do) and
strict IEEE float32 otherwise; precision "autocast" also stores the weight in autocast's dtype
and casts h to it at the GEMM input (accumulation stays float32); "fp16" (the default) does
the same in float16 whatever autocast's dtype (recurrence.py's module docstring).

On CPU the kernels run under Triton's interpreter (``TRITON_INTERPRET=1`` set before this
module is first imported), which the tests use to check the kernels against the plain loop in
float64 without a GPU.
"""

from __future__ import annotations

import functools
import os

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from hornn_dist.models.poolings import get_pooling
from hornn_dist.models.precision import low_precision_dtype, recurrence_dtype
from hornn_dist.models.triton_tiles import choose_tiles, multiprocessors, tiles_error

try:
    import triton
    import triton.language as tl
except Exception as err:  # optional (ImportError, or a broken install): `check_available` says so
    triton = None
    _IMPORT_ERROR: str | None = (str(err).strip().splitlines() or [type(err).__name__])[0]
else:
    _IMPORT_ERROR = None

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"  # read by triton.jit at import
_ACT_CODE = {"tanh": 0, "sigmoid": 1, "relu": 2}


def unavailable_reason(device: torch.device | str | None = None) -> str | None:
    """Return why the triton engine cannot run (on `device`, if given), or None if it can."""
    if _IMPORT_ERROR is not None:
        return (
            f"model.engine = 'triton' needs the triton package, which did not import "
            f"({_IMPORT_ERROR}): pip install 'triton>=3.3' (CUDA builds of torch ship it), "
            "or use model.engine = 'fused'"
        )
    if device is not None and torch.device(device).type != "cuda" and not INTERPRETED:
        return (
            f"model.engine = 'triton' runs on CUDA devices, not {torch.device(device).type} "
            "(TRITON_INTERPRET=1 runs it slowly on CPU, for tests); use model.engine = 'fused'"
        )
    return tiles_error()


def check_available(device: torch.device | str | None = None) -> None:
    """Raise a one-line RuntimeError if the triton engine cannot run (on `device`)."""
    reason = unavailable_reason(device)
    if reason is not None:
        raise RuntimeError(reason)


if triton is not None:

    @triton.jit
    def _activate(z, ACT: tl.constexpr):
        """f(z): tanh, sigmoid or relu (eq. 1)."""
        if ACT == 0:
            return 2.0 * tl.sigmoid(2.0 * z) - 1.0
        elif ACT == 1:
            return tl.sigmoid(z)
        else:
            return tl.maximum(z, 0.0)

    @triton.jit
    def _activation_grad(h, ACT: tl.constexpr):
        """f'(z) from h = f(z)."""
        if ACT == 0:
            return 1.0 - h * h
        elif ACT == 1:
            return h * (1.0 - h)
        else:
            return tl.where(h > 0.0, 1.0, 0.0)

    @triton.jit
    def _dot(a, w, acc, PRECISION: tl.constexpr, ACC: tl.constexpr, UPCAST: tl.constexpr):
        """acc + a @ w, a cast to w's dtype (fp32 or bf16/fp16), accumulated in ACC."""
        a = a.to(w.dtype)
        if UPCAST:  # the interpreter's bf16/fp16 dot is wrong: the same rounded values in fp32
            return tl.dot(a.to(ACC), w.to(ACC), acc=acc, input_precision="ieee", out_dtype=ACC)
        return tl.dot(a, w, acc=acc, input_precision=PRECISION, out_dtype=ACC)

    @triton.jit
    def _split_range(H, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr):
        """Return this program's hidden units [k_lo, k_hi) of the K axis: whole BLOCK_K chunks,
        split s of SPLIT (grid axis 2); the last splits may be short or empty."""
        chunk = tl.cdiv(tl.cdiv(H, BLOCK_K), SPLIT) * BLOCK_K
        k_lo = tl.program_id(2) * chunk
        return k_lo, tl.minimum(k_lo + chunk, H)

    @triton.jit
    def _last_of_split(count_ptr, SPLIT: tl.constexpr):
        """Count this program's arrival at its output tile; True for the last of the SPLIT.

        The partials stored before are visible to the last one: a CTA barrier, then one
        acq_rel atomic at GPU scope (the programs of a tile never wait for each other, so
        nothing here needs them to run at the same time)."""
        tile = count_ptr + tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
        tl.debug_barrier()
        ticket = tl.atomic_add(tile, 1, sem="acq_rel", scope="gpu")
        last = ticket == SPLIT - 1
        if last:
            tl.store(tile, 0)  # reset for the next step's launch (stream-ordered)
        return last

    @triton.jit
    def _window_dot(
        acc, gate, row, w_at, w_stride, coef, rb, rk, b_ok, h_ok, H, k_lo, k_hi, n,
        N: tl.constexpr, POOL: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr,
        UPCAST: tl.constexpr, BLOCK_K: tl.constexpr,
    ):  # fmt: skip
        """acc + (coef ·) h_{t-n}[:, k_lo:k_hi] @ W_hn[k_lo:k_hi] (gated: gate + .. @ W2n)."""
        for k0 in range(k_lo, k_hi, BLOCK_K):
            kk = k0 + rk
            k_ok = kk < H  # chunks start at multiples of BLOCK_K: only H cuts one short
            a = tl.load(
                row + rb[:, None] * H + kk[None, :],
                b_ok[:, None] & k_ok[None, :],
                0.0,
                cache_modifier=".cg",  # written by the last step's launch: L2, never stale L1
            )
            if POOL == 1:
                a = a * coef
            w_ok = k_ok[:, None] & h_ok[None, :]
            w_k = w_at + kk[:, None] * w_stride
            acc = _dot(a, tl.load(w_k + (n - 1) * H, w_ok, 0.0), acc, PRECISION, ACC, UPCAST)
            if POOL == 3:
                w2 = tl.load(w_k + (N + n - 1) * H, w_ok, 0.0)
                gate = _dot(a, w2, gate, PRECISION, ACC, UPCAST)
        return acc, gate

    @triton.jit
    def _pool(
        pooled, winner, part, gate, n, t, xin_at, rb, rh, ok, B, H, gate_ptr, path_ptr,
        N: tl.constexpr, POOL: tl.constexpr,
    ):  # fmt: skip
        """Fold path n into the pooled value: max (eq. 4) or gated (eq. 6-7)."""
        if POOL == 3:  # r_n = σ(W1n x_t + c_n + W2n h_{t-n})
            r = tl.sigmoid(gate + tl.load(xin_at + n * H, ok, 0.0))
            at_n = (t * N + n - 1) * B * H + rb[:, None] * H + rh[None, :]
            tl.store(gate_ptr + at_n, r, ok)
            tl.store(path_ptr + at_n, part, ok)
            pooled += r * part
        elif POOL == 2:  # strict > keeps the lowest n on ties
            if n == 1:
                pooled = part
            else:
                winner = tl.where(part > pooled, n - 1, winner)
                pooled = tl.where(part > pooled, part, pooled)
        return pooled, winner

    @triton.jit(do_not_specialize=["t"])  # one compiled kernel for every step
    def _forward_step(
        state_ptr,  # (N+T, B, H) contiguous: rows 0..N-1 the history, row N+t = h_t
        w_ptr,  # (H, N·H) weight_hh, row stride w_stride; block n-1 = W_hn^T
        xin_ptr,  # (T, B, ·) W_in x_t + b in columns 0..H-1
        win_ptr,  # (T, B, H) uint8: winning path n-1 (max only)
        gate_ptr,  # (T, N, B, H) gated: r_n of step t (eq. 7)
        path_ptr,  # (T, N, B, H) gated: W_hn h_{t-n}
        part_ptr,  # SPLIT > 1: (SPLIT, P, B, H) partial sums, P = 1 (sum, fofe), N, 2N (gated)
        count_ptr,  # SPLIT > 1: (tiles,) int32 arrivals per output tile, zero between launches
        t,
        B,
        H,
        w_stride,
        xin_stride_t,
        xin_stride_b,
        coef_ptr,  # (N,) α^n (fofe only)
        N: tl.constexpr,
        POOL: tl.constexpr,  # 0 sum, 1 fofe, 2 max, 3 gated
        ACT: tl.constexpr,
        PRECISION: tl.constexpr,  # "ieee" | "tf32"
        ACC: tl.constexpr,  # tl.float32 | tl.float64
        UPCAST: tl.constexpr,  # interpreter with a bf16/fp16 weight: dot in ACC
        BLOCK_B: tl.constexpr,
        BLOCK_H: tl.constexpr,
        BLOCK_K: tl.constexpr,
        SPLIT: tl.constexpr,  # programs sharing one output tile, each over 1/SPLIT of K
    ):
        """h_t = f(xin_t + pool_n(h_{t-n} @ W_hn)) for one (batch, hidden) tile (eq. 3-7)."""
        rb = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
        rh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
        rk = tl.arange(0, BLOCK_K)
        b_ok = rb < B
        h_ok = rh < H
        ok = b_ok[:, None] & h_ok[None, :]
        at = rb[:, None] * H + rh[None, :]
        xin_at = xin_ptr + t * xin_stride_t + rb[:, None] * xin_stride_b + rh[None, :]
        w_at = w_ptr + rh[None, :]
        k_lo, k_hi = _split_range(H, BLOCK_K, SPLIT)
        P: tl.constexpr = 1 if POOL <= 1 else (2 * N if POOL == 3 else N)
        pooled = tl.zeros((BLOCK_B, BLOCK_H), dtype=ACC)  # sum, fofe: every path's dots
        winner = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.int32)
        for n in tl.static_range(1, N + 1):
            row = state_ptr + (N + t - n) * B * H  # h_{t-n}
            coef = 1.0
            if POOL == 1:
                coef = tl.load(coef_ptr + n - 1)  # α^n (eq. 5)
            if POOL <= 1:  # eq. 3, 5: one accumulator over all paths
                pooled, _ = _window_dot(
                    pooled, pooled, row, w_at, w_stride, coef, rb, rk, b_ok, h_ok, H, k_lo,
                    k_hi, n, N, POOL, PRECISION, ACC, UPCAST, BLOCK_K,
                )  # fmt: skip
            else:
                zero = tl.zeros((BLOCK_B, BLOCK_H), dtype=ACC)
                part, gate = _window_dot(
                    zero, zero, row, w_at, w_stride, coef, rb, rk, b_ok, h_ok, H, k_lo, k_hi,
                    n, N, POOL, PRECISION, ACC, UPCAST, BLOCK_K,
                )  # fmt: skip
                if SPLIT == 1:
                    pooled, winner = _pool(
                        pooled, winner, part, gate, n, t, xin_at, rb, rh, ok, B, H, gate_ptr,
                        path_ptr, N, POOL,
                    )  # fmt: skip
                else:  # partial W_hn h_{t-n} (and W2n h_{t-n}) over this program's K
                    mine = part_ptr + tl.program_id(2) * P * B * H + at
                    tl.store(mine + (n - 1) * B * H, part, ok)
                    if POOL == 3:
                        tl.store(mine + (N + n - 1) * B * H, gate, ok)
        last = True
        if SPLIT > 1:
            if POOL <= 1:
                tl.store(part_ptr + tl.program_id(2) * B * H + at, pooled, ok)
            last = _last_of_split(count_ptr, SPLIT)
        if last:
            if SPLIT > 1:  # the last program of the tile sums the partials, then pools
                if POOL <= 1:
                    pooled = tl.zeros((BLOCK_B, BLOCK_H), dtype=ACC)
                    for s in tl.static_range(SPLIT):
                        pooled += tl.load(part_ptr + s * B * H + at, ok, 0.0, cache_modifier=".cg")
                else:
                    for n in tl.static_range(1, N + 1):
                        part = tl.zeros((BLOCK_B, BLOCK_H), dtype=ACC)
                        gate = tl.zeros((BLOCK_B, BLOCK_H), dtype=ACC)
                        for s in tl.static_range(SPLIT):
                            split_at = part_ptr + s * P * B * H + at
                            part += tl.load(
                                split_at + (n - 1) * B * H, ok, 0.0, cache_modifier=".cg"
                            )
                            if POOL == 3:
                                gate += tl.load(
                                    split_at + (N + n - 1) * B * H, ok, 0.0, cache_modifier=".cg"
                                )
                        pooled, winner = _pool(
                            pooled, winner, part, gate, n, t, xin_at, rb, rh, ok, B, H,
                            gate_ptr, path_ptr, N, POOL,
                        )  # fmt: skip
            h = _activate(pooled + tl.load(xin_at, ok, 0.0), ACT)
            tl.store(state_ptr + (N + t) * B * H + at, h, ok)
            if POOL == 2:
                tl.store(win_ptr + t * B * H + at, winner.to(tl.uint8), ok)

    @triton.jit
    def _store_operands(
        dz, t, rb, rh, ok, ops_ptr, gops_ptr, win_ptr, gate_ptr, path_ptr, B, H,
        ops_path_stride, N: tl.constexpr, POOL: tl.constexpr,
    ):  # fmt: skip
        """Store step t's per-path operands once, for the N earlier steps that read them: max
        dz at the winner of path n (eq. 4's gradient), gated dz ⊙ r_n for the path and
        dz ⊙ p_n r_n(1-r_n) for the gate input (eq. 6-7); sum and fofe read dz itself."""
        at = rb[:, None] * H + rh[None, :]
        if POOL == 2:
            won = tl.load(win_ptr + t * B * H + at, ok, 0)
            for n in tl.static_range(1, N + 1):
                mine = ops_ptr + (n - 1) * ops_path_stride + t * B * H + at
                tl.store(mine, tl.where(won == n - 1, dz, 0.0), ok)
        if POOL == 3:
            g_row = t * B + rb[:, None]
            for n in tl.static_range(1, N + 1):
                at_n = (t * N + n - 1) * B * H + at
                r = tl.load(gate_ptr + at_n, ok, 0.0)
                p = tl.load(path_ptr + at_n, ok, 0.0)
                tl.store(ops_ptr + (n - 1) * ops_path_stride + t * B * H + at, dz * r, ok)
                g_at = g_row * (N + 1) * H + n * H + rh[None, :]
                tl.store(gops_ptr + g_at, dz * p * r * (1.0 - r), ok)

    @triton.jit(do_not_specialize=["t"])
    def _backward_step(
        ops_ptr,  # row 0 = step 0 of the per-path operands m_n ⊙ dz, (paths, N+T+N, B, H),
        # N zero rows either side: sum/fofe dz itself (paths 1, ops_path_stride 0), max and
        # gated one (rows, B, H) block per path (dz at the winner / dz ⊙ r_n)
        gops_ptr,  # gated: row 0 = step 0 of (N+T+N, B, (N+1)·H) [dz | dz ⊙ p_n r_n(1-r_n)]
        dz_ptr,  # where dz_t goes, rows of B x dz_b_stride: sum/fofe ops, max its own, gated gops
        win_ptr,  # max: (T, B, H) uint8 winning path n-1 of the forward
        gate_ptr,  # gated: (T, N, B, H) r_n of the forward
        path_ptr,  # gated: (T, N, B, H) W_hn h_{t-n} of the forward
        state_ptr,  # (N+T, B, H) [history | outputs]
        w_ptr,  # (H, N·H) weight_hh
        grad_ptr,  # (T, B, H) dL/dh_t from above (contiguous); history steps: dL/dhistory out
        part_ptr,  # SPLIT > 1: (SPLIT, B, H) partial dh
        count_ptr,  # SPLIT > 1: (tiles,) int32 arrivals per output tile, zero between launches
        t,
        B,
        H,
        w_stride,
        ops_path_stride,
        dz_b_stride,
        coef_ptr,
        N: tl.constexpr,
        POOL: tl.constexpr,
        ACT: tl.constexpr,
        HISTORY: tl.constexpr,  # t < 0: write dh of history row N+t into grad_ptr, no f'
        PRECISION: tl.constexpr,
        ACC: tl.constexpr,
        UPCAST: tl.constexpr,
        BLOCK_B: tl.constexpr,
        BLOCK_H: tl.constexpr,
        BLOCK_K: tl.constexpr,
        SPLIT: tl.constexpr,
    ):
        """dh_t = dL/dh_t + Σ_n (m_n ⊙ dz_{t+n}) @ W_hn^T, then dz_t = f'(z_t) ⊙ dh_t, and the
        operands m_n ⊙ dz_t that steps t-1..t-N read."""
        rb = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
        rh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)  # units of h_t
        rk = tl.arange(0, BLOCK_K)  # units of z_{t+n}
        b_ok = rb < B
        h_ok = rh < H
        k_lo, k_hi = _split_range(H, BLOCK_K, SPLIT)
        dh = tl.zeros((BLOCK_B, BLOCK_H), dtype=ACC)
        for n in tl.static_range(1, N + 1):
            if POOL == 1:
                coef = tl.load(coef_ptr + n - 1)  # α^n
            for k0 in range(k_lo, k_hi, BLOCK_K):
                kk = k0 + rk
                k_ok = kk < H  # chunks start at multiples of BLOCK_K: only H cuts one short
                a_ok = b_ok[:, None] & k_ok[None, :]
                a_at = (n - 1) * ops_path_stride + (t + n) * B * H + rb[:, None] * H + kk[None, :]
                a = tl.load(ops_ptr + a_at, a_ok, 0.0, cache_modifier=".cg")
                w_at = w_ptr + rh[None, :] * w_stride + kk[:, None]  # tiles of W^T
                w_ok = k_ok[:, None] & h_ok[None, :]
                w_t = tl.load(w_at + (n - 1) * H, w_ok, 0.0)  # (BLOCK_K, BLOCK_H) of W_hn^T
                if POOL == 1:
                    a = a * coef
                if POOL == 3:  # the gate term: dz ⊙ p_n r_n (1 - r_n) of step t+n, @ W2n^T
                    g_row = (t + n) * B + rb[:, None]
                    g_at = g_row * (N + 1) * H + n * H + kk[None, :]
                    g = tl.load(gops_ptr + g_at, a_ok, 0.0, cache_modifier=".cg")
                    w2_t = tl.load(w_at + (N + n - 1) * H, w_ok, 0.0)
                    dh = _dot(g, w2_t, dh, PRECISION, ACC, UPCAST)
                dh = _dot(a, w_t, dh, PRECISION, ACC, UPCAST)
        ok = b_ok[:, None] & h_ok[None, :]
        at = rb[:, None] * H + rh[None, :]
        last = True
        if SPLIT > 1:
            tl.store(part_ptr + tl.program_id(2) * B * H + at, dh, ok)
            last = _last_of_split(count_ptr, SPLIT)
        if last:
            if SPLIT > 1:  # the last program of the tile sums the partials
                dh = tl.zeros((BLOCK_B, BLOCK_H), dtype=ACC)
                for s in tl.static_range(SPLIT):
                    dh += tl.load(part_ptr + s * B * H + at, ok, 0.0, cache_modifier=".cg")
            if HISTORY:
                tl.store(grad_ptr + (N + t) * B * H + at, dh, ok)
            else:
                dh += tl.load(grad_ptr + t * B * H + at, ok, 0.0)
                h = tl.load(state_ptr + (N + t) * B * H + at, ok, 0.0)
                dz = _activation_grad(h, ACT) * dh
                dz_at = (t * B + rb[:, None]) * dz_b_stride + rh[None, :]
                tl.store(dz_ptr + dz_at, dz, ok)
                _store_operands(
                    dz, t, rb, rh, ok, ops_ptr, gops_ptr, win_ptr, gate_ptr, path_ptr, B, H,
                    ops_path_stride, N, POOL,
                )  # fmt: skip


class _Launch:
    """The grid of one pass and, when K is split, its partial-sum and arrival buffers."""

    def __init__(self, like: Tensor, meta: dict, parts: int, B: int, H: int) -> None:
        tiles = (triton.cdiv(B, meta["BLOCK_B"]), triton.cdiv(H, meta["BLOCK_H"]))
        split = meta["SPLIT"]
        self.grid = (*tiles, split)
        self.partials, self.arrivals = like, like  # unused when split == 1
        if split > 1:
            self.partials = like.new_empty(split, parts, B, H)
            self.arrivals = torch.zeros(tiles[0] * tiles[1], dtype=torch.int32, device=like.device)


class TritonScan(torch.autograd.Function):
    """HORNN recurrence (eq. 3-7) in Triton: (xp, history, weight_hh) -> outputs (T, B, H)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        xp: Tensor,
        history: Tensor,
        weight_hh: Tensor,
        pooling: str,
        alpha: float,
        activation: str,
        low: torch.dtype | None,
        tf32: bool,
    ) -> Tensor:
        """Run T forward kernels; low: the GEMM input dtype (bf16/fp16), None = xp's dtype;
        tf32: let float32 GEMMs round their inputs to TF32."""
        T, B, _ = xp.shape
        N, _, H = history.shape
        spec = get_pooling(pooling)
        gated = spec.gated
        state = xp.new_empty(N + T, B, H)  # [history | h_0 .. h_{T-1}]
        state[:N].copy_(history)
        weight = weight_hh.detach()
        weight = (weight if low is None else weight.to(low)).contiguous()
        coefs = _coefficients(pooling, alpha, N, xp.device, xp.dtype)  # k_n: fofe's α^n
        # what backward needs of every step: the winners of max, r_n and W_hn h_{t-n} of gated
        winners = xp.new_empty(T, B, H, dtype=torch.uint8) if spec.reduce == "max" else None
        gates = xp.new_empty(T, N, B, H) if gated else None
        paths = xp.new_empty(T, N, B, H) if gated else None
        meta = _meta(pooling, activation, N, xp.dtype, weight.dtype, tf32, B, H, xp.device)
        launch = _Launch(state, meta, _partials(pooling, N), B, H)
        for t in range(T):
            _forward_step[launch.grid](
                state,
                weight,
                xp,
                state if winners is None else winners,
                state if gates is None else gates,
                state if paths is None else paths,
                launch.partials,
                launch.arrivals,
                t,
                B,
                H,
                weight.stride(0),
                xp.stride(0),
                xp.stride(1),
                coefs,
                **meta,
            )
        ctx.pooling, ctx.activation, ctx.tf32, ctx.order = pooling, activation, tf32, N
        ctx.save_for_backward(state, weight_hh, weight, coefs)
        ctx.winners, ctx.gates, ctx.paths = winners, gates, paths
        return state[N:]

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_out: Tensor
    ) -> tuple[Tensor | None, ...]:
        """Backpropagate through time: T (+ N) kernels, then one GEMM per path for dW_hn."""
        state, weight_hh, weight, coefs = ctx.saved_tensors
        N = ctx.order
        T = state.shape[0] - N
        _, B, H = state.shape
        grad = grad_out.to(state.dtype).contiguous()
        pooling = ctx.pooling
        spec = get_pooling(pooling)
        winners, gates, paths = ctx.winners, ctx.gates, ctx.paths
        # The operands step t's kernel stores for steps t-1..t-N (m_n ⊙ dz_t, see the kernel),
        # at row N+t of buffers with N zero rows either side: the steps after T-1, and before
        # 0 (the history has no z), so every step reads N rows of the same shape.
        rows = N + T + N
        per_path = spec.per_path_factors
        ops = state.new_zeros(N if per_path else 1, rows, B, H)
        gops = state.new_zeros(rows, B, (N + 1) * H) if gates is not None else None
        if spec.reduce == "max":
            dz = state.new_empty(T, B, H)
        elif gops is not None:  # gated: dz and the gate-input gradients, xp's layout
            dz = gops[N : N + T, :, :H]
        else:
            dz = ops[0, N : N + T]
        g_hist = state.new_empty(N, B, H) if ctx.needs_input_grad[1] else None
        meta = _meta(
            pooling, ctx.activation, N, state.dtype, weight.dtype, ctx.tf32, B, H, state.device
        )
        launch = _Launch(state, meta, 1, B, H)
        last = -N if g_hist is not None else 0  # a detached history (TBPTT) needs no gradient
        for t in range(T - 1, last - 1, -1):  # steps T-1..0, then the history rows -1..-N
            _backward_step[launch.grid](
                ops[:, N:],
                ops if gops is None else gops[N:],
                dz,
                ops if winners is None else winners,
                ops if gates is None else gates,
                ops if paths is None else paths,
                state,
                weight,
                grad if t >= 0 else g_hist,
                launch.partials,
                launch.arrivals,
                t,
                B,
                H,
                weight.stride(0),
                ops.stride(0) if per_path else 0,
                dz.stride(1),
                coefs,
                HISTORY=t < 0,
                **meta,
            )
        g_xp = dz if gops is None else gops[N : N + T]  # dL/d(W_in x_t + b) (gated: and W1n x_t)
        g_w = None
        if ctx.needs_input_grad[2]:
            g_w = torch.empty_like(weight_hh)
            for n in range(1, N + 1):  # dW_hn = Σ_t h_{t-n}^T (m_n ⊙ dz_t)
                h_n = state[N - n : N - n + T].reshape(T * B, H).t()
                dz_n = ops[n - 1 if per_path else 0, N : N + T].reshape(T * B, H)
                torch.mm(h_n, dz_n, out=g_w[:, (n - 1) * H : n * H])
                if gops is not None:  # dW2n = Σ_t h_{t-n}^T (dz_t ⊙ p_n r_n (1 - r_n))
                    d_gate = gops[N : N + T, :, n * H : (n + 1) * H].reshape(T * B, H)
                    torch.mm(h_n, d_gate, out=g_w[:, (N + n - 1) * H : (N + n) * H])
            if spec.coefficient is not None:  # k_n (fofe: α^n) of every path in one op
                g_w.view(H, N, H).mul_(coefs.view(1, N, 1))
        return g_xp, g_hist, g_w, None, None, None, None, None


def _partials(pooling: str, order: int) -> int:
    """Return the partial sums per output element of a split forward: one pooled sum (sum,
    fofe), one per path (max), two per path (gated: path and gate)."""
    spec = get_pooling(pooling)
    return 2 * order if spec.gated else order if spec.per_path_factors else 1


@functools.cache
def _coefficients(
    pooling: str, alpha: float, order: int, device: torch.device, dtype: torch.dtype
) -> Tensor:
    """Return (k_1, .., k_N) on `device` (fofe: α, α², .., α^N; 1 each where a pooling has
    none), made once: a captured step replays no kernel for it."""
    with torch.inference_mode(False):  # a normal tensor even if first made under inference mode
        n = torch.arange(1, order + 1, device=device, dtype=dtype)
        return get_pooling(pooling).coefficient_tensor(n, order, alpha)


def _meta(
    pooling: str,
    activation: str,
    order: int,
    dtype: torch.dtype,
    weight_dtype: torch.dtype,
    tf32: bool,
    batch: int,
    hidden: int,
    device: torch.device,
) -> dict:
    """Return the compile-time arguments shared by the forward and backward kernels."""
    return {
        "N": order,
        "POOL": get_pooling(pooling).triton_code,
        "ACT": _ACT_CODE[activation],
        "PRECISION": "tf32" if tf32 else "ieee",
        "ACC": tl.float64 if dtype == torch.float64 else tl.float32,
        "UPCAST": INTERPRETED and weight_dtype != dtype,
        **choose_tiles(batch, hidden, multiprocessors(device)),
    }


def triton_scan(
    xp: Tensor,
    history: Tensor,
    weight_hh: Tensor,
    pooling: str,
    alpha: float,
    activation: str,
    precision: str = "fp16",
) -> Tensor:
    """Return outputs (T, B, H) of the recurrence run by the Triton kernels (module docstring).

    xp: (T, B, ≥H), columns 0..H-1 = W_in x_t + b; precision "autocast" ("fp16"): under
    autocast, the GEMM inputs use autocast's dtype (float16), the state stays float32.
    """
    if get_pooling(pooling).triton_code is None:  # raises for an unknown one
        raise ValueError(f"pooling {pooling!r} has no triton kernel: use engine 'fused'")
    T, B, _ = xp.shape
    N, _, H = history.shape
    split = choose_tiles(B, H, multiprocessors(xp.device))["SPLIT"]
    # (T + 2N) rows of B x H per path: the backward's operands (gated: + its gate gradients)
    spec = get_pooling(pooling)
    paths = N + 1 if spec.gated else N if spec.per_path_factors else 1
    largest = max((T + 2 * N) * paths, split * _partials(pooling, N)) * B * H
    if largest >= 2**31:
        raise ValueError(
            f"the triton engine indexes its buffers with 32-bit offsets; T {T} x B {B} x H {H} "
            f"x order {N} needs {largest:,} elements: use a shorter train.bptt, a smaller batch "
            "per process, or engine 'fused'"
        )
    check_available(xp.device)
    dtype = recurrence_dtype(xp, history, weight_hh)
    device = xp.device.type
    low = low_precision_dtype(precision, dtype, device)
    tf32 = device == "cuda" and torch.is_autocast_enabled(device)
    with torch.autocast(device_type=device, enabled=False):
        xp = xp.to(dtype).contiguous()
        return TritonScan.apply(
            xp, history.to(dtype), weight_hh.to(dtype), pooling, alpha, activation, low, tf32
        )
