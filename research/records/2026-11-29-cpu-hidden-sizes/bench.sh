#!/usr/bin/env bash
# The training step at the paper's sizes (V 10k, B 20, T 30, E = H) for hidden sizes around
# 400, fp32 against bf16 autocast, one thread; run from the repo root:
#   bash research/records/2026-11-29-cpu-hidden-sizes/bench.sh
set -euo pipefail
# (2026-11-29: the PTB training on the other core was paused with SIGSTOP while it ran)
here=research/records/2026-11-29-cpu-hidden-sizes
{ lscpu | grep -E "Model name|CPU family|Model:|Thread|Core|Socket"; grep -m1 '^flags' /proc/cpuinfo; } > "$here/machine.txt"
for hidden in 400 416 419 420 424 432; do
  OMP_NUM_THREADS=1 python benchmarks/throughput.py --variants lstm,rnn,hornn-gated,hornn-fofe \
    --precisions fp32,bf16 --hidden "$hidden" --embedding 0 --rounds 5 --steps 4 \
    --json "$here/throughput-h$hidden.json" | tee "$here/throughput-h$hidden.txt"
done
