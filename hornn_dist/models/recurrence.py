"""The HORNN time recurrence (eq. 3-7): a fused autograd Function (one GEMM a step), a plain loop.

Both engines take the input-side pre-activations already projected for every token
(``xp = x @ weight_ih + biases``, one GEMM outside, see `hornn.py`) and run only the part
that must go step by step.

The fused engine (the "fully-unfolded" shape of paper §3.1, DESIGN.md "The model"):

* Every term that touches h_{t-n} is a linear map of h_{t-n} alone, so when h_t is born we
  compute U_t = h_t @ W once, W = [W_h1 | ... | W_hN (| W2_1 | ... | W2_N)]^T: ONE GEMM per
  step however large N is. U of the carried history is one GEMM at the start.
* Step t gathers block n of U_{t-n} for n = 1..N, pools, adds the input term and applies f.
  Internally W's path blocks are stored in reverse order (block i holds path n = N - i), so
  that the N terms step t needs (row t+i, block i of the buffer U_all) form ONE strided view
  with positive strides: pooling is a reduction over a view, no gather copies.
* FOFE (eq. 5) folds α^n into the internal copy of W_hn, so it costs exactly what sum costs;
  the gradient is scaled back by α^n so ``weight_hh.grad`` is the true dL/dW_hn.
* Backward walks time backwards accumulating dL/dU_t (again one GEMM per step, for dL/dh_t),
  then dW = H_all^T @ dU_all in ONE GEMM and dL/dhistory = dU_hist @ W^T in one more.
* Saved for backward: the outputs h (f' is computed from h), the winning path index for max,
  the gate values r for gated. Gated recomputes U_all with one GEMM in backward instead of
  keeping it (it is 2N times the size of the outputs).

Max pooling (eq. 4) sends the gradient to the winning path only. Ties go to the lowest n:
the comparison runs n = 1..N with strict ``>``, the same on CPU and CUDA.

The recurrence always runs in float32 (float64 when the inputs are float64), with autocast
turned off inside, whatever dtype autocast used for the input projection; it returns that dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

POOLINGS = ("sum", "max", "fofe", "gated")
ACTIVATIONS = ("tanh", "sigmoid", "relu")


def recurrence_dtype(*tensors: Tensor) -> torch.dtype:
    """Return the dtype the recurrence runs in: float64 if any input is float64, else float32."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


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


def _path_coefs(pooling: str, order: int, alpha: float, ref: Tensor) -> Tensor | None:
    """Return the FOFE factors α^n in internal (reversed) block order, shape (N,), or None."""
    if pooling != "fofe":
        return None
    n = torch.arange(order, 0, -1, dtype=ref.dtype, device=ref.device)  # i = 0..N-1 -> n = N..1
    return alpha**n


def _to_internal(weight_hh: Tensor, order: int, coefs: Tensor | None) -> Tensor:
    """Return W with its path blocks reversed (block i = path N - i) and FOFE-scaled, (H, K·H)."""
    H = weight_hh.shape[0]
    w = weight_hh.reshape(H, -1, order, H).flip(2)  # (H, G, N, H), G = 2 for gated else 1
    if coefs is not None:
        w = w * coefs.view(1, 1, order, 1)
    return w.reshape(H, -1).contiguous()


def _from_internal(grad_int: Tensor, order: int, coefs: Tensor | None) -> Tensor:
    """Map a gradient w.r.t. the internal W back to the parameter layout of weight_hh."""
    H = grad_int.shape[0]
    g = grad_int.reshape(H, -1, order, H)
    if coefs is not None:
        g = g * coefs.view(1, 1, order, 1)
    return g.flip(2).reshape(H, -1)


class _Paths:
    """Strided views into U_all: for step t, entry i is row t+i, block i (path n = N - i)."""

    def __init__(self, U: Tensor, order: int, hidden: int) -> None:
        self.U = U
        _, B, KH = U.shape
        self.size = (order, B, hidden)
        self.stride = (B * KH + hidden, KH, 1)
        self.row = B * KH
        self.hidden = hidden
        self.base = U.storage_offset()
        self.order = order

    def at(self, t: int, gate: bool = False) -> Tensor:
        """Return the (N, B, H) path terms of step t (gate=True: the W2n h_{t-n} terms)."""
        offset = self.base + t * self.row + (self.order * self.hidden if gate else 0)
        return self.U.as_strided(self.size, self.stride, offset)


def _max_pool(P: Tensor) -> tuple[Tensor, Tensor]:
    """Return (max over paths, winning internal index) of P (N, B, H); ties go to the lowest n."""
    N = P.shape[0]
    best = P[N - 1]  # i = N-1 is path n = 1
    idx = torch.full(best.shape, N - 1, dtype=torch.int64, device=P.device)
    for i in range(N - 2, -1, -1):  # n = 2..N, strict > keeps the lower n on ties
        better = P[i] > best
        best = torch.where(better, P[i], best)
        idx = torch.where(better, i, idx)
    return best, idx


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
    ) -> Tensor:
        """Run the recurrence; see the module docstring for the layout of xp and weight_hh."""
        with torch.autocast(device_type=xp.device.type, enabled=False):
            T, B, _ = xp.shape
            N, _, H = history.shape
            gated = pooling == "gated"
            KH = weight_hh.shape[1]
            coefs = _path_coefs(pooling, N, alpha, weight_hh)
            W = _to_internal(weight_hh, N, coefs)  # (H, K·H)
            U = xp.new_empty(N + T, B, KH)  # U_all: row N+s holds U of h_s, s = -N..T-1
            torch.mm(history.reshape(N * B, H), W, out=U[:N].view(N * B, KH))
            paths = _Paths(U, N, H)
            xin = xp[..., :H]  # (T, B, H) W_in x_t + b
            if gated:  # W1n x_t + gate bias, in internal path order i: (T, N, B, H)
                xg = xp[..., H:].reshape(T, B, N, H).flip(2).permute(0, 2, 1, 3).contiguous()
                R = xp.new_empty(T, N, B, H)  # gate values r_n (eq. 7)
            if pooling == "max":
                idx_dtype = torch.uint8 if N <= 256 else torch.int64  # winner i, 0..N-1
                idx_all = torch.empty(T, B, H, dtype=idx_dtype, device=xp.device)
            f_ = _activation_(activation)
            out = xp.new_empty(T, B, H)  # (T, B, H)
            for t in range(T):
                P = paths.at(t)  # (N, B, H): W_hn h_{t-n} (α^n-scaled for fofe)
                if pooling == "max":  # eq. 4
                    pooled, idx = _max_pool(P)
                    idx_all[t].copy_(idx)
                elif gated:  # eq. 6-7
                    r = torch.add(xg[t], paths.at(t, gate=True), out=R[t]).sigmoid_()
                    pooled = (r * P).sum(0)
                else:  # eq. 3 (sum), eq. 5 (fofe: α^n folded into W)
                    pooled = P.sum(0)
                f_(torch.add(pooled, xin[t], out=out[t]))  # h_t = f(W_in x_t + b + pooled)
                if t < T - 1:  # U of the last output is not needed inside this call
                    torch.mm(out[t], W, out=U[N + t])
            ctx.pooling, ctx.alpha, ctx.activation = pooling, alpha, activation
            ctx.save_for_backward(history, weight_hh, out)
            ctx.idx_all = idx_all if pooling == "max" else None
            ctx.R = R if gated else None
        return out

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_out: Tensor
    ) -> tuple[Tensor | None, ...]:
        """Backpropagate through time: one GEMM per step, weight gradient in one GEMM after."""
        history, weight_hh, out = ctx.saved_tensors
        pooling, activation = ctx.pooling, ctx.activation
        with torch.autocast(device_type=out.device.type, enabled=False):
            T, B, H = out.shape
            N = history.shape[0]
            KH = weight_hh.shape[1]
            gated = pooling == "gated"
            grad_out = grad_out.to(out.dtype).contiguous()
            coefs = _path_coefs(pooling, N, ctx.alpha, weight_hh)
            W = _to_internal(weight_hh, N, coefs)  # (H, K·H)
            Wt = W.t()  # (K·H, H)
            H_all = torch.cat([history, out], 0)  # (N+T, B, H)
            dU = out.new_zeros(N + T, B, KH)  # dL/dU_all
            dpaths = _Paths(dU, N, H)
            if gated:
                U = (H_all.view(-1, H) @ W).view(N + T, B, KH)  # recomputed, one GEMM
                paths = _Paths(U, N, H)
                dxg = out.new_empty(T, N, B, H)
            fprime = _activation_grad(activation, out)  # (T, B, H)
            dz_all = out.new_empty(T, B, H)  # dL/d(pre-activation) = dL/d(W_in x_t + b)
            for t in range(T - 1, -1, -1):
                if t < T - 1:  # dL/dh_t: from the loss and from the N steps that read U_t
                    dh = torch.addmm(grad_out[t], dU[N + t], Wt)
                else:
                    dh = grad_out[t]
                dz = torch.mul(dh, fprime[t], out=dz_all[t])  # (B, H)
                dP = dpaths.at(t)  # (N, B, H) view: each location is written by one step only
                if pooling == "max":
                    idx = ctx.idx_all[t].long().unsqueeze(0)  # (1, B, H)
                    dP.scatter_(0, idx, dz.unsqueeze(0))  # winner only; the rest stay zero
                elif gated:
                    r = ctx.R[t]  # (N, B, H)
                    dP.copy_(r * dz)
                    dg = torch.mul(dz * paths.at(t), r * (1.0 - r), out=dxg[t])
                    dpaths.at(t, gate=True).copy_(dg)
                else:
                    dP.copy_(dz.expand(N, B, H))
            g_xp = g_hist = g_w = None
            if ctx.needs_input_grad[0]:
                if gated:  # back to the parameter layout: blocks [W_in | W1_1..W1_N]
                    dxg_nat = dxg.permute(0, 2, 1, 3).flip(2).reshape(T, B, N * H)
                    g_xp = torch.cat([dz_all, dxg_nat], 2)
                else:
                    g_xp = dz_all
            if ctx.needs_input_grad[1]:
                g_hist = (dU[:N].view(N * B, KH) @ Wt).view(N, B, H)
            if ctx.needs_input_grad[2]:
                g_w = _from_internal(H_all.view(-1, H).t() @ dU.view(-1, KH), N, coefs)
        return g_xp, g_hist, g_w, None, None, None


def fused_scan(
    xp: Tensor, history: Tensor, weight_hh: Tensor, pooling: str, alpha: float, activation: str
) -> Tensor:
    """Return outputs (T, B, H) of the fused recurrence; casts to the recurrence dtype first."""
    dtype = recurrence_dtype(xp, history, weight_hh)
    return HornnScan.apply(
        xp.to(dtype), history.to(dtype), weight_hh.to(dtype), pooling, alpha, activation
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
        U = [h @ weight_hh for h in history.unbind(0)]  # U of h_{-N} .. h_{-1}, each (B, K·H)
        outs = []
        for t in range(T):
            # term n: block n-1 of U_{t-n}; U[-n] is U of h_{t-n}
            P = [U[-n][:, (n - 1) * H : n * H] for n in range(1, N + 1)]
            if pooling == "sum":  # eq. 3
                pooled = sum(P)
            elif pooling == "fofe":  # eq. 5
                pooled = sum(alpha**n * p for n, p in zip(range(1, N + 1), P, strict=True))
            elif pooling == "max":  # eq. 4, ties to the lowest n
                pooled = P[0]
                for p in P[1:]:
                    pooled = torch.where(p > pooled, p, pooled)
            else:  # eq. 6-7
                pooled = 0
                for n in range(1, N + 1):
                    gate_in = (
                        xp[t, :, n * H : (n + 1) * H] + U[-n][:, (N + n - 1) * H : (N + n) * H]
                    )
                    pooled = pooled + torch.sigmoid(gate_in) * P[n - 1]
            h = act(xp[t, :, :H] + pooled)  # (B, H)
            outs.append(h)
            U.append(h @ weight_hh)
        return torch.stack(outs) if outs else xp.new_zeros(0, xp.shape[1], H)
