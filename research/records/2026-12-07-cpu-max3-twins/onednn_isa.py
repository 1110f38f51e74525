"""Print which oneDNN kernel runs a bf16 product of the PTB rows' shapes on this CPU.

Run as: ONEDNN_VERBOSE=1 python research/records/2026-12-07-cpu-max3-twins/onednn_isa.py
(optionally with ONEDNN_MAX_CPU_ISA=AVX512_CORE, the cap of the ISA check). Under bf16
autocast (train.mixed_precision = "auto" on a CPU with avx512_bf16) torch hands these products
to oneDNN, which picks its kernel by the instructions the CPU (and the kernel's XSTATE
permission, for AMX) allows: on an AMX Xeon an avx512_core_amx kernel, without AMX an
avx512_core_bf16 one. oneDNN's verbose lines name the kernel (its `impl` field)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.randn(600, 400)  # 20 streams x bptt 30 rows, H = E = 400
out_w = torch.randn(10000, 400)  # the tied output layer: vocabulary 10,000
rec_w = torch.randn(400, 400)  # one feedback path's W_hn
with torch.autocast("cpu", dtype=torch.bfloat16):
    logits = F.linear(x, out_w)
    step = F.linear(x[:20], rec_w)
print("products:", tuple(logits.shape), logits.dtype, tuple(step.shape), step.dtype)
