#!/bin/bash
# the WikiText-103 size's step memory, one output layer per process (three models of 285M
# parameters do not fit this 23 GB machine together)
source /work/venv/bin/activate
cd /work/main
for batch in 32 128; do
  for layer in plain fused adaptive; do
    python benchmarks/output_layer.py --sizes 267735x1024 --batch $batch --bptt 35 --parts step --steps 1 --models hornn --layers $layer --json /tmp/olbench/wt103_b${batch}_${layer}.json > /tmp/olbench/wt103_b${batch}_${layer}.log 2>&1
  done
done
