#!/usr/bin/env bash
# Copy each finished run of runs/sweeps/ptb_table3_cpu (its last checkpoint's trainer_state.json
# names a stop reason) into this record: config.toml, train.log, that trainer_state.json; and
# the sweep's sweep.json. Run from the repository root; runs still training are left out.
set -euo pipefail
src=runs/sweeps/ptb_table3_cpu
dst=benchmarks/records/2026-11-28-cpu-ptb/ptb_table3_cpu
mkdir -p "$dst"
cp "$src/sweep.json" "$dst/"
for run in "$src"/*/; do
  name=$(basename "$run")
  state=$(ls -d "$run"checkpoints/step_* 2>/dev/null | tail -1 || true)/trainer_state.json
  [ -f "$state" ] || continue
  python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get("stop_reason") else 1)' "$state" || continue
  mkdir -p "$dst/$name"
  cp "$run/config.toml" "$run/train.log" "$state" "$dst/$name/"
  echo "copied $name"
done
