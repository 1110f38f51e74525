"""Page faults and CPU time of the trainer's step (gated HORNN-3, bf16, one thread, 20 x 30
tokens) at V x H, under the SGD and the pages the caller picks; the weights' hash after it.

    THP_MEM_ALLOC_ENABLE=0|1 python faults.py plain|fused foreach|fused [V H]

Run from the repository root (it imports benchmarks/output_layer.py's helpers). torch reads
THP_MEM_ALLOC_ENABLE at its first allocation: the caller's environment decides, whatever
hornn_dist's default (torch is imported first here).
"""

import hashlib
import os
import resource
import sys
import time

import torch

sys.path.insert(0, "benchmarks")
from output_layer import autocast, model_config, zipf_tokens  # noqa: E402

from hornn_dist.config import OptimConfig  # noqa: E402
from hornn_dist.models import build_model  # noqa: E402
from hornn_dist.training.optim import build_optimizer  # noqa: E402
from hornn_dist.training.step import TrainStep  # noqa: E402

layer, sgd = sys.argv[1], sys.argv[2]
vocab, hidden = (int(v) for v in sys.argv[3:5]) if len(sys.argv) > 4 else (44000, 500)
torch.set_num_threads(1)
optim = OptimConfig()
torch.manual_seed(0)
model = build_model(model_config("hornn", layer, hidden), vocab)
step = TrainStep(model, build_optimizer(model, optim, fused=sgd == "fused"),
                 device=torch.device("cpu"), batch_size=20, bptt=30, optim=optim,
                 graph_reason="eager", autocast=autocast("bf16"))  # fmt: skip
data = zipf_tokens(vocab, (4, 31, 20), torch.Generator().manual_seed(1))
for i in range(3):
    step.run(data[i % 4][:-1], data[i % 4][1:], measure=False)
times, faults0 = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(12):
    block = data[i % 4]
    start = time.process_time()
    step.run(block[:-1], block[1:], measure=False)
    times.append(time.process_time() - start)
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0) / 12
digest = hashlib.sha256()
for p in model.parameters():
    digest.update(p.detach().numpy().tobytes())
times.sort()
print(f"V {vocab} H {hidden} layer {layer} sgd {sgd} THP {os.environ.get('THP_MEM_ALLOC_ENABLE')}: "
      f"CPU s a step median {times[6]:.3f} min {times[0]:.3f}, page faults a step {faults:.0f}, "
      f"weights sha256 {digest.hexdigest()[:16]}")  # fmt: skip
