#!/usr/bin/env bash
# The CPU record of the gradient exchange (training/exchange.py), run from the repo root:
#   bash research/records/2026-11-28-cpu-scaling-exchange/command.sh
set -u
REC=research/records/2026-11-28-cpu-scaling-exchange
export OMP_NUM_THREADS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse HEAD)"
  echo "git status --porcelain (other engineers' work in progress in the same checkout):"
  git status --porcelain
  echo "OMP_NUM_THREADS=$OMP_NUM_THREADS"
  lscpu | head -20
  echo "load average before: $(cat /proc/loadavg)"
} >"$REC/environment.txt" 2>&1
# 1. this CPU's eager step, its overlap window, gloo collectives, projected (paper config)
python benchmarks/scaling.py --configs paper --json "$REC/scaling_paper.json" \
  >"$REC/scaling_paper.log" 2>&1
# 2. the H100 record's measured graphed step times (commit 16977fd) re-projected with what the
#    step exchanges now; no GPU ran here: no window, so no overlap (the graphed step has none)
python benchmarks/scaling.py --configs paper,big --allreduce-repeats 3 \
  --compute-from research/records/2026-11-27-h100-16977fd/scaling.json \
  --json "$REC/reprojected_h100.json" >"$REC/reprojected_h100.log" 2>&1
# 3. the trainer's step on two gloo ranks: the exchange (eager-ar) against DDP and one process
accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \
  --dynamo_backend no --main_process_port 29731 benchmarks/throughput.py \
  --variants hornn-fofe,lstm --modes eager,eager-ar,eager-ddp --rounds 5 \
  --json "$REC/multiprocess_step.json" >"$REC/multiprocess_step.log" 2>&1
echo "load average after: $(cat /proc/loadavg)" >>"$REC/environment.txt"
