#!/usr/bin/env bash
# The training step of every model at the paper size (V 10k, H = E = 400, B 20, T 30), fp32
# against bf16 autocast, at 1 and then 2 threads, one command; run from the repo root:
#   bash research/records/2026-11-28-cpu-bf16/bench.sh
set -euo pipefail
here=research/records/2026-11-28-cpu-bf16
{ lscpu | grep -E "Model name|CPU family|Model:|Thread|Core|Socket"; grep -m1 '^flags' /proc/cpuinfo; } > "$here/machine.txt"
variants=hornn-sum,hornn-max,hornn-fofe,hornn-gated,rnn,lstm,gru,hornn-fofe-autocastrec,hornn-gated-autocastrec
for threads in 1 2; do
  OMP_NUM_THREADS=$threads python benchmarks/throughput.py --variants "$variants" \
    --precisions fp32,bf16 --rounds 5 --steps 4 --json "$here/throughput-${threads}thread.json" \
    | tee "$here/throughput-${threads}thread.txt"
done
