"""The HORNN time recurrence (eq. 3-7): a fused autograd Function (one GEMM a step), a plain loop.

Both engines take the input-side pre-activations already projected for every token
(``xp = x @ weight_ih + biases``, one GEMM outside, see `hornn.py`) and run only the part
that must go step by step.

The fused engine (the "fully-unfolded" shape of paper §3.1; why it is shaped so, point by point):

* Every term that touches h_{t-n} is a linear map of h_{t-n} alone, so when h_t is born we
  compute U_t = h_t @ W once, W = [W_h1 | ... | W_hN] (gated: [W2_1 .. W2_N | W_h1 .. W_hN]):
  ONE GEMM per step however large N is. U of the carried history is one GEMM at the start.
* The buffer U_all is (N+T, B, (K+1)·H), K = N (2N gated): row N+s holds U of h_s, s = -N..T-1,
  in its first K blocks (the GEMM writes a strided slice, no copy) and, in its last block X,
  the input term of step s (xin_s = W_in x_s + b, copied for all steps before the loop).
* Step t needs block n of U_{t-n}. Internally W's path blocks are stored in reverse order
  (block p0+i holds path n = N - i; p0 = 0, or N for gated where the gate blocks come first),
  so that entry i = row t+i, block p0+i: ONE strided view with positive strides, and entry
  i = N continues the pattern onto row t+N, block p0+N = X, the input term of step t.
  So pooling plus input is one reduction over a view, no gather copies.
* FOFE (eq. 5) folds α^n into the internal copy of W_hn, so it costs exactly what sum costs;
  the gradient is scaled back by α^n so ``weight_hh.grad`` is the true dL/dW_hn.
* Gated (eq. 6-7): xg_t = W1n x_t + c_n is pre-added into the gate blocks U's GEMMs
  accumulate into (each location of U_all is read by exactly one step), so a step takes
  σ of one view, multiplies the path view by r in place, then sums like sum pooling.
* Backward walks time backwards accumulating dL/dU_t in a buffer dU of the same layout (again
  one GEMM per step: dL/dh_t += dU_t @ W^T in place in a copy of grad_out, so cuBLAS copies
  nothing first). dL/dh_t times a precomputed per-step factor (N+1, B, H)
  (f'(z_t) for sum/fofe, f'·one-hot(winner) for max, f'·r for gated, and f' for the X slot)
  is written straight into the N path slots and the X slot with one ``mul(out=)``: the
  gradient w.r.t. xp is then the X view of dU. After the loop dW = H_all^T @ dU_all[..., :K·H]
  in ONE GEMM and dL/dhistory = dU_hist @ W^T in one more.
* Max (eq. 4): xin_t is copied into every path term step t reads, before the loop, and the
  GEMMs accumulate onto it (addmm), so a step's amax over the view is already max_n P_n + xin_t
  (exactly: rounding is monotone, so max_n fl(P_n + x) = fl(max_n P_n + x)).
* Ops per time step, forward + backward: sum / fofe 3 + 2 (sum over the view, f, GEMM;
  addmm, mul); max 3 + 2 (amax, f, GEMM; the winner of every step is found after the loop,
  vectorised); gated 5 + 3 (σ, r·P, sum, f, GEMM; addmm, mul, mul into the gate view).
  On CUDA cuBLAS may add a split-K reduce to a small GEMM (kernels a step measured:
  docs/performance.md, "Numbers behind the code's choices"). On a float32 CPU the forward's
  step GEMM goes through oneDNN where that pays (`step_gemm.py`) and is added or copied
  into U.
* Saved for backward: the outputs h (f' is computed from h), the winning path index for max,
  and for gated the gate values r and U_all, whose path slots the forward left holding r·P:
  the gate gradient f'·P·r(1-r) is f'·(r·P)·(1-r), so nothing is recomputed.

Max pooling (eq. 4) sends the gradient to the winning path only. Ties go to the lowest n (the
same as a walk over n = 1..N with strict ``>``): the winner is the lowest n whose term equals
the maximum exactly, the same on CPU and CUDA. (The terms compared are the rounded P_n + xin_t,
so two terms within a rounding of each other count as a tie: either is a valid subgradient.)

Precision (``precision`` of `fused_scan`, ``model.recurrence_precision``):

* "fp32": the recurrence runs in float32 (float64 when the inputs are float64), with
  autocast turned off inside, whatever dtype autocast used for the input projection; it
  returns that dtype. Under CUDA autocast (bf16 or fp16) its recurrent GEMMs (the per-step
  GEMMs and those of the backward) run with TF32 allowed (``float32_matmul_precision`` "high"
  for the duration of the call, restored after): the state and all element-wise math stay
  float32, only the GEMM inputs are rounded to TF32 (10-bit mantissa, finer than bf16's 7),
  which is what cuDNN's fp32 RNNs do by default. On CPU, and without autocast, the GEMMs
  stay strict float32/float64.
* "autocast": under autocast (CPU or CUDA) the buffers, per-step math and GEMMs use
  autocast's dtype (bf16/fp16; GEMMs and the pooled sums accumulate in float32, f' and the
  per-step backward factors stay float32); outputs and gradients are returned in float32.
  Fewer and faster kernels than "fp32", and in bf16 the most rounding (measured:
  docs/performance.md, "Why the layers run in fp16 under autocast").
* "fp16" (the default): as "autocast", but under CUDA autocast in float16 whatever autocast's
  dtype, the layer's input GEMM too: what cuDNN's RNNs do under autocast (PyTorch casts them
  to fp16 for bf16 autocast as well). The same speed as bf16 on tensor cores with 3 more
  mantissa bits, so nearer float64, as cuDNN's LSTM (measured: the same section). fp16's
  range (6.5e4) holds tanh/sigmoid states; unbounded relu states could overflow, where
  "autocast" (bf16) or "fp32" is the choice. On a CPU it is "autocast" (no native fp16
  there). Without autocast every precision is exactly "fp32". The rule: `precision.layer_dtype`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from hornn_dist.models.poolings import Pooling, get_pooling
from hornn_dist.models.precision import low_precision_dtype, recurrence_dtype
from hornn_dist.models.step_gemm import StepGemm


def input_projection_autocast(precision: str, x: Tensor) -> AbstractContextManager:
    """Return the context of the layer's input projection: autocast in the layer's dtype where
    that is not autocast's own (precision "fp16" under CUDA bf16 autocast: cuDNN's RNNs run
    their input GEMM in float16 too), else a no-op."""
    device = x.device.type
    low = low_precision_dtype(precision, x.dtype, device)
    if low is not None and low != torch.get_autocast_dtype(device):
        # no cast cache: autocast keys it by tensor alone, so a cast cached in one dtype would
        # be handed out in the other
        return torch.autocast(device, dtype=low, cache_enabled=False)
    return nullcontext()


def _activation_(name: str) -> Callable[[Tensor], Tensor]:
    """Return the named activation f as an in-place function."""
    if name == "tanh":
        return torch.Tensor.tanh_
    if name == "sigmoid":
        return torch.Tensor.sigmoid_
    return torch.Tensor.relu_


def _activation_grad(name: str, h: Tensor) -> Tensor:
    """Return f'(z) computed from h = f(z), element-wise, same shape as h."""
    if name == "tanh":
        return 1.0 - h * h
    if name == "sigmoid":
        return h * (1.0 - h)
    return (h > 0).to(h.dtype)  # relu; f'(0) = 0 as in torch.relu


@contextmanager
def _tf32_matmuls(enabled: bool) -> Iterator[None]:
    """Allow TF32 in float32 GEMMs inside the block when `enabled`; restore the setting after."""
    if not enabled:
        yield
        return
    try:
        prev = torch.get_float32_matmul_precision()
    except RuntimeError:  # set through the per-backend API (torch >= 2.9): use that one
        matmul = torch.backends.cuda.matmul
        prev_backend = matmul.fp32_precision
        matmul.fp32_precision = "tf32"
        try:
            yield
        finally:
            matmul.fp32_precision = prev_backend
        return
    if prev != "highest":  # TF32 (or coarser) is already allowed
        yield
        return
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(prev)


def _path_coefs(pooling: Pooling, order: int, alpha: float, ref: Tensor) -> Tensor | None:
    """Return the pooling's path coefficients k_n (FOFE's α^n) in internal (reversed) block
    order, shape (N,), or None where every k_n is 1."""
    if pooling.coefficient is None:
        return None
    n = torch.arange(order, 0, -1, dtype=ref.dtype, device=ref.device)  # i = 0..N-1 -> n = N..1
    return pooling.coefficient_tensor(n, order, alpha)


def _reverse_blocks(w: Tensor, size: int) -> Tensor:
    """Return a copy of w (rows, K·size) with its K column blocks in reverse order.

    One `torch.cat`: one kernel on CUDA, and on CPU faster than `flip` (measured:
    docs/performance.md, "Numbers behind the code's choices")."""
    return torch.cat(w.reshape(w.shape[0], -1, size).unbind(1)[::-1], 1)


def _to_internal(weight_hh: Tensor, order: int, coefs: Tensor | None) -> Tensor:
    """Return W with its path blocks reversed (block i = path N - i) and FOFE-scaled, (H, K·H).

    Gated: the two groups swap too, internal W = [W2 reversed | W_h reversed].
    """
    H = weight_hh.shape[0]
    w = _reverse_blocks(weight_hh, H)  # reversing all K blocks reverses each group and swaps them
    if coefs is not None:  # fofe: K = N
        w.view(H, order, H).mul_(coefs.view(1, order, 1))
    return w


def _from_internal(grad_int: Tensor, order: int, coefs: Tensor | None) -> Tensor:
    """Map a gradient w.r.t. the internal W back to the parameter layout of weight_hh."""
    H = grad_int.shape[0]
    if coefs is not None:
        grad_int = (grad_int.view(H, order, H) * coefs.view(1, order, 1)).view(H, -1)
    return _reverse_blocks(grad_int, H)


class _Paths:
    """Strided views into a buffer shaped like U_all (rows, B, blocks of H).

    Entry i of step t is row t+i, block first+i; for step t every entry is one location
    that no other step reads, and all steps together form one (T, count, B, H) view.
    """

    def __init__(self, U: Tensor, hidden: int) -> None:
        self.U = U
        _, self.B, width = U.shape
        self.hidden = hidden
        self.row = self.B * width
        self.stride = (self.row + hidden, width, 1)
        self.base = U.storage_offset()

    def at(self, t: int, first: int, count: int) -> Tensor:
        """Return the (count, B, H) view of step t, starting at block `first`."""
        size = (count, self.B, self.hidden)
        offset = self.base + t * self.row + first * self.hidden
        return self.U.as_strided(size, self.stride, offset)

    def every(self, T: int, first: int, count: int) -> Tensor:
        """Return the (T, count, B, H) view of steps 0..T-1: `at(t, first, count)` for each t."""
        size = (T, count, self.B, self.hidden)
        offset = self.base + first * self.hidden
        return self.U.as_strided(size, (self.row, *self.stride), offset)


class HornnScan(torch.autograd.Function):
    """Fused HORNN recurrence (eq. 3-7): (xp, history, weight_hh) -> outputs (T, B, H)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        xp: Tensor,
        history: Tensor,
        weight_hh: Tensor,
        pooling: str,
        alpha: float,
        activation: str,
        low: torch.dtype | None = None,
    ) -> Tensor:
        """Run the recurrence; see the module docstring for the layout of xp and weight_hh.

        low: run the buffers, the per-step math and the GEMMs in this dtype (bf16/fp16; the
        GEMMs and reductions accumulate in fp32); None = in xp's dtype.
        """
        device = xp.device.type
        tf32 = low is None and device == "cuda" and torch.is_autocast_enabled(device)
        with torch.autocast(device_type=device, enabled=False), _tf32_matmuls(tf32):
            T, B, _ = xp.shape
            N, _, H = history.shape
            spec = get_pooling(pooling)
            gated, is_max = spec.gated, spec.reduce == "max"
            KH = weight_hh.shape[1]
            p0 = KH // H - N  # first path block: gate blocks come first for gated
            coefs = _path_coefs(spec, N, alpha, weight_hh)
            W = _to_internal(weight_hh, N, coefs)  # (H, K·H)
            result_dtype = xp.dtype
            if low is not None:
                W, history, xp = W.to(low), history.to(low), xp.to(low)
            # U_all (N+T, B, (K+1)·H): row N+s = [U of h_s | xin_s], s = -N..T-1.
            # Gated accumulates its GEMMs onto the pre-added gate inputs, so zeros first; max
            # onto xin_t in each path term of step t (locations no step reads are never used).
            prefilled = gated or is_max
            U = (xp.new_zeros if gated else xp.new_empty)(N + T, B, KH + H)
            paths = _Paths(U, H)
            xin = xp[..., :H]  # (T, B, H) W_in x_t + b
            if is_max:  # max_n (P_n + xin) is max_n P_n + xin: rounding is monotone
                paths.every(T, p0, N).copy_(xin.unsqueeze(1).expand(T, N, B, H))
            else:
                U[N:, :, KH:].copy_(xin)  # entry N of each step's path view
            if gated:  # W1n x_t + c_n, internal order i, into the gate terms step t reads
                xg = _reverse_blocks(xp[..., H:].reshape(T * B, N * H), H)
                xg = xg.view(T, B, N, H).transpose(1, 2)
                paths.every(T, 0, N).copy_(xg)
                R = xp.new_empty(T, N, B, H)  # gate values r_n (eq. 7)
            hist_rows = U[:N].view(N * B, KH + H)[:, :KH]
            if prefilled:
                hist_rows.addmm_(history.reshape(N * B, H), W)
            else:
                torch.mm(history.reshape(N * B, H), W, out=hist_rows)
            f_ = _activation_(activation)
            step_gemm = StepGemm(W, B)  # h_t @ W: oneDNN on a float32 CPU where it pays
            out = xp.new_empty(T, B, H)  # (T, B, H)
            for t in range(T):
                h = out[t]
                if is_max:  # eq. 4, the path terms already hold + xin_t
                    torch.amax(paths.at(t, p0, N), 0, out=h)
                else:  # eq. 3 (sum), 5 (fofe: α^n folded into W), 6-7 (gated)
                    if gated:  # P <- r ⊙ P in place: U's path terms are not read again
                        P = paths.at(t, p0, N)  # (N, B, H): W_hn h_{t-n}
                        torch.mul(torch.sigmoid(paths.at(t, 0, N), out=R[t]), P, out=P)
                    torch.sum(paths.at(t, p0, N + 1), 0, out=h)  # pooled + W_in x_t + b
                f_(h)
                if t < T - 1:  # U of the last output is not needed inside this call
                    row = U[N + t, :, :KH]
                    if prefilled:
                        step_gemm.add_to(row, h)
                    else:
                        step_gemm.write_to(row, h)
            if is_max:  # winner i of every step; ties to the highest i = lowest n
                P_all = paths.every(T, p0, N)  # (T, N, B, H) P_n + xin_t
                idx_dtype = torch.uint8 if N <= 256 else torch.int64
                i = torch.arange(N, dtype=idx_dtype, device=xp.device).view(1, N, 1, 1)
                ctx.idx_all = torch.where(P_all == P_all.amax(1, keepdim=True), i, 0).amax(1)
            else:
                ctx.idx_all = None
            ctx.pooling, ctx.alpha, ctx.activation, ctx.tf32 = pooling, alpha, activation, tf32
            ctx.low = low
            ctx.save_for_backward(history, weight_hh, out)
            ctx.R = R if gated else None
            ctx.U = U if gated else None  # its path slots hold r ⊙ P, all the gate gradient needs
            ctx.W = W  # the internal weight (a copy), for the backward's GEMMs
        return out.to(result_dtype)  # one cast after the loop when `low` is set

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_out: Tensor
    ) -> tuple[Tensor | None, ...]:
        """Backpropagate through time: one GEMM per step, weight gradient in one GEMM after."""
        history, weight_hh, out = ctx.saved_tensors
        pooling, activation = ctx.pooling, ctx.activation
        with torch.autocast(device_type=out.device.type, enabled=False), _tf32_matmuls(ctx.tf32):
            T, B, H = out.shape
            N = history.shape[0]
            KH = weight_hh.shape[1]
            p0 = KH // H - N
            spec = get_pooling(pooling)
            gated = spec.gated
            coefs = _path_coefs(spec, N, ctx.alpha, weight_hh)
            W = ctx.W  # (H, K·H), in out's dtype
            Wt = W.t()  # (K·H, H)
            H_all = torch.cat([history, out], 0)  # (N+T, B, H)
            dU = out.new_zeros(N + T, B, KH + H)  # dL/dU_all, X block: dL/dxin
            dpaths = _Paths(dU, H)
            # f' in float32 at least (out may be bf16/fp16 with `low`), float64 stays float64
            fprime = _activation_grad(
                activation, out.to(torch.promote_types(out.dtype, torch.float32))
            )
            # S[t] (N+1, B, H): d(path terms, xin of step t) = dL/dh_t * S[t]
            if not spec.per_path_factors:  # one factor for every path: f'
                S = fprime.unsqueeze(1).expand(T, N + 1, B, H)
            else:
                S = fprime.new_empty(T, N + 1, B, H)
                S[:, N] = fprime
                if gated:  # r ⊙ f'; the gate terms get f' ⊙ P ⊙ r(1-r) = f' ⊙ (r ⊙ P) ⊙ (1-r)
                    torch.mul(ctx.R, fprime.unsqueeze(1), out=S[:, :N])
                    rP_all = _Paths(ctx.U, H).every(T, p0, N)  # forward left r ⊙ P in U
                    SG = (1.0 - ctx.R).mul_(rP_all).mul_(fprime.unsqueeze(1))  # (T, N, B, H)
                else:  # max: f' at the winner only
                    i = torch.arange(N, dtype=ctx.idx_all.dtype, device=out.device)
                    winner = ctx.idx_all.unsqueeze(1) == i.view(1, N, 1, 1)
                    torch.mul(winner, fprime.unsqueeze(1), out=S[:, :N])
            dH = out.new_empty(T, B, H).copy_(grad_out)  # dL/dh_t (out's dtype), in place
            for t in range(T - 1, -1, -1):
                dh = dH[t]
                if t < T - 1:  # + the N steps that read U_t (in place: no copy of grad_out[t])
                    dh.addmm_(dU[N + t, :, :KH], Wt)
                # each location is written by this step only; the rest of dU stays zero
                torch.mul(dh.expand(N + 1, B, H), S[t], out=dpaths.at(t, p0, N + 1))
                if gated:
                    torch.mul(dh.expand(N, B, H), SG[t], out=dpaths.at(t, 0, N))
            g_xp = g_hist = g_w = None
            dtype = grad_out.dtype  # the gradients are returned in the inputs' dtype
            if ctx.needs_input_grad[0]:
                g_xp = dU[N:, :, KH:]  # (T, B, H) dL/d(W_in x_t + b)
                if gated:  # back to the parameter layout: blocks [W_in | W1_1..W1_N]
                    dxg = dpaths.every(T, 0, N).unbind(1)[::-1]  # (T, B, H) each, path order
                    g_xp = torch.cat([g_xp, *dxg], 2)
                g_xp = g_xp.to(dtype)
            if ctx.needs_input_grad[1]:
                g_hist = (dU[:N].view(N * B, KH + H)[:, :KH] @ Wt).view(N, B, H).to(dtype)
            if ctx.needs_input_grad[2]:
                dU_2d = dU.view(-1, KH + H)[:, :KH]
                g_w = _from_internal((H_all.view(-1, H).t() @ dU_2d).to(dtype), N, coefs)
        return g_xp, g_hist, g_w, None, None, None, None


def fused_scan(
    xp: Tensor,
    history: Tensor,
    weight_hh: Tensor,
    pooling: str,
    alpha: float,
    activation: str,
    precision: str = "fp16",
) -> Tensor:
    """Return outputs (T, B, H) of the fused recurrence; casts to the recurrence dtype first.

    precision "autocast": under autocast, run the recurrence in autocast's dtype; "fp16": in
    float16 under CUDA autocast (see the module docstring); "fp32" (or no autocast, or float64
    inputs): in the recurrence dtype.
    """
    dtype = recurrence_dtype(xp, history, weight_hh)
    low = low_precision_dtype(precision, dtype, xp.device.type)
    return HornnScan.apply(
        xp.to(dtype), history.to(dtype), weight_hh.to(dtype), pooling, alpha, activation, low
    )


def loop_scan(
    xp: Tensor, history: Tensor, weight_hh: Tensor, pooling: str, alpha: float, activation: str
) -> Tensor:
    """Return outputs (T, B, H) of the same recurrence written as plain per-step autograd."""
    dtype = recurrence_dtype(xp, history, weight_hh)
    xp, history, weight_hh = xp.to(dtype), history.to(dtype), weight_hh.to(dtype)
    act = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu}[activation]
    with torch.autocast(device_type=xp.device.type, enabled=False):
        T = xp.shape[0]
        N, _, H = history.shape
        spec = get_pooling(pooling)
        ks = spec.coefficients(N, alpha)
        U = [h @ weight_hh for h in history.unbind(0)]  # U of h_{-N} .. h_{-1}, each (B, K·H)
        outs = []
        for t in range(T):
            # term n: block n-1 of U_{t-n}; U[-n] is U of h_{t-n}
            P = [U[-n][:, (n - 1) * H : n * H] for n in range(1, N + 1)]
            if ks is not None:  # eq. 5: k_n = α^n
                P = [k * p for k, p in zip(ks, P, strict=True)]
            if spec.gated:  # eq. 6-7: r_n = σ(W1n x_t + c_n + W2n h_{t-n})
                gate_in = [
                    xp[t, :, n * H : (n + 1) * H] + U[-n][:, (N + n - 1) * H : (N + n) * H]
                    for n in range(1, N + 1)
                ]
                P = [torch.sigmoid(g) * p for g, p in zip(gate_in, P, strict=True)]
            if spec.reduce == "max":  # eq. 4, ties to the lowest n
                pooled = P[0]
                for p in P[1:]:
                    pooled = torch.where(p > pooled, p, pooled)
            else:  # eq. 3
                pooled = sum(P)
            h = act(xp[t, :, :H] + pooled)  # (B, H)
            outs.append(h)
            U.append(h @ weight_hh)
        return torch.stack(outs) if outs else xp.new_zeros(0, xp.shape[1], H)
