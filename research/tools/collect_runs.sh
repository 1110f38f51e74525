#!/usr/bin/env bash
# Copy the finished runs of a sweep (or one run folder) into a record: each run's config.toml,
# metrics.jsonl (what the record readers read), train.log (for people) and newest checkpoint's
# trainer_state.json, and the sweep's sweep.json. Runs still training are left out (finished as
# the sweep judges it). Run from the repository root:
#   bash research/tools/collect_runs.sh runs/sweeps/NAME research/records/DATE-WHAT/NAME
set -euo pipefail
src=${1:?usage: collect_runs.sh SWEEP_OR_RUN_FOLDER RECORD_FOLDER}
dst=${2:?usage: collect_runs.sh SWEEP_OR_RUN_FOLDER RECORD_FOLDER}
mkdir -p "$dst"
if [ -f "$src/sweep.json" ]; then
  cp "$src/sweep.json" "$dst/"
  runs=("$src"/*/)
  single=0
else
  runs=("$src/")
  single=1
fi
for run in "${runs[@]}"; do
  name=$(basename "$run")
  state=$(ls -d "$run"checkpoints/step_* 2>/dev/null | tail -1 || true)/trainer_state.json
  [ -f "$state" ] || continue
  python3 -c 'import sys; from pathlib import Path; from hornn_dist.sweeps.results import read_run; r = read_run(Path(sys.argv[1])); sys.exit(0 if r and r.finished else 1)' "$run" || continue
  out="$dst/$name"
  [ "$single" = 1 ] && out="$dst"
  mkdir -p "$out"
  cp "$run/config.toml" "$run/metrics.jsonl" "$run/train.log" "$state" "$out/"
  echo "copied $name"
done
