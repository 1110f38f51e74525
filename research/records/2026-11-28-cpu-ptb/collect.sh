#!/usr/bin/env bash
# Copy each finished run of runs/sweeps/ptb_table3_cpu (as the sweep judges it) into this record:
# config.toml, train.log, its newest checkpoint's trainer_state.json; and the sweep's sweep.json.
# Run from the repository root; runs still training are left out.
set -euo pipefail
src=runs/sweeps/ptb_table3_cpu
dst=research/records/2026-11-28-cpu-ptb/ptb_table3_cpu
mkdir -p "$dst"
cp "$src/sweep.json" "$dst/"
for run in "$src"/*/; do
  name=$(basename "$run")
  state=$(ls -d "$run"checkpoints/step_* 2>/dev/null | tail -1 || true)/trainer_state.json
  [ -f "$state" ] || continue
  # finished as the sweep judges it (a run stopped by a signal has a stop_reason too)
  python3 -c 'import sys; from pathlib import Path; from hornn_dist.sweeps.results import read_run; r = read_run(Path(sys.argv[1])); sys.exit(0 if r and r.finished else 1)' "$run" || continue
  mkdir -p "$dst/$name"
  cp "$run/config.toml" "$run/train.log" "$state" "$dst/$name/"
  echo "copied $name"
done
