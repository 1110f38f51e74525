#!/usr/bin/env bash
# Train sweeps of small runs on one CUDA GPU all at once, each run its own process (the sweep
# runner trains one run per GPU; runs at hidden size 128 leave an H100/H200 mostly idle), then
# write their reports and pack each sweep's record data into $OUT/grids.tgz:
#
#   OUT=/some/folder bash benchmarks/gpu_grids.sh                       # hard stop at 480 s
#   GRIDS="demo_alpha demo_dropout" GRIDS_SECONDS=480 OUT=... bash benchmarks/gpu_grids.sh
#
# GRIDS_SET="k=v ..." adds overrides to every run (a quick try: GRIDS_SET="train.max_steps=5").
# GRIDS_MATCH="REGEX" trains only the runs whose name matches (the others' records come from
# elsewhere, e.g. a grid widened after part of it trained).
# GRIDS names sweep files under configs/sweeps/; GRIDS_REFERENCE=1 also trains the order-1 RNN
# of configs/demo.toml (the reference a ratio needs) into runs/sweeps/gpu_reference/rnn.
# At GRIDS_SECONDS every run still training gets SIGTERM: it checkpoints and stops, and its
# record says how far it got. The shards must be there already (carry data_cache): the device
# image has no `datasets`. MPS, when the machine has it, lets the processes' kernels overlap.
set -u
OUT=${OUT:?set OUT to the folder for the results}
GRIDS=${GRIDS:-"demo_alpha demo_dropout"}
GRIDS_SECONDS=${GRIDS_SECONDS:-480}
GRIDS_REFERENCE=${GRIDS_REFERENCE:-1}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
sets=(); for kv in ${GRIDS_SET:-}; do sets+=(--set "$kv"); done
PY=${PYTHON:-python3}
started=$(date +%s)
summary=$OUT/summary.txt
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY -c "import torch, accelerate; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'accelerate', accelerate.__version__)"
  echo "cpu cores: $(nproc --all)"
} > "$summary" 2>&1

if command -v nvidia-cuda-mps-control > /dev/null && nvidia-cuda-mps-control -d 2> /dev/null; then
  if $PY -c "import torch; torch.zeros(1, device='cuda')" 2> /dev/null; then
    echo "mps: on" >> "$summary"
  else
    echo quit | nvidia-cuda-mps-control; echo "mps: failed its check, off" >> "$summary"
  fi
else
  echo "mps: not available" >> "$summary"
fi

pids=()
launch() {  # launch NAME COMMAND...: one run in the background, its console in $OUT/logs
  "${@:2}" > "$OUT/logs/$1.console" 2>&1 &
  pids+=($!)
}
mkdir -p "$OUT/logs"
for sweep in $GRIDS; do
  while IFS= read -r line; do
    name=${line%%: *}
    [[ $name =~ ${GRIDS_MATCH:-.} ]] || continue
    eval "launch $sweep-$name ${line#*: }"
  done < <($PY -m hornn_dist.sweep "configs/sweeps/$sweep.toml" --dry-run "${sets[@]}" | grep -- ' -m hornn_dist.train ')
  # What the sweep runner writes first, so that `report` and collect.py see a sweep.
  $PY -c "import sys; from hornn_dist.experiments.plan import read_sweep, RUNS_FILE; \
from hornn_dist.files import write_json; p = read_sweep(sys.argv[1]); \
p.output_dir.mkdir(parents=True, exist_ok=True); write_json(p.output_dir / RUNS_FILE, p.record())" \
    "configs/sweeps/$sweep.toml"
done
if [ "$GRIDS_REFERENCE" = 1 ]; then
  launch reference-rnn $PY -m hornn_dist.train configs/demo.toml --set train.epochs=60 \
    --set train.checkpoint_every=0 --set log.every=400 --set model.order=1 \
    --set 'model.pooling="sum"' --set train.output_dir=runs/sweeps/gpu_reference/rnn "${sets[@]}"
fi
echo "launched ${#pids[@]} runs at $(($(date +%s) - started)) s" >> "$summary"

# Its own output goes nowhere, so a sleep still pending never holds the caller's pipe open.
(sleep "$((GRIDS_SECONDS - ($(date +%s) - started)))"; kill -TERM "${pids[@]}") > /dev/null 2>&1 &
watchdog=$!
for pid in "${pids[@]}"; do wait "$pid"; echo "pid $pid exit $? at $(($(date +%s) - started)) s" >> "$summary"; done
pkill -P "$watchdog" 2> /dev/null; kill "$watchdog" 2> /dev/null
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv >> "$summary" 2>&1

pack=$(mktemp -d)
for sweep in $GRIDS; do
  dir=runs/sweeps/$sweep
  $PY -m hornn_dist.report "$dir" > "$OUT/logs/report-$sweep.log" 2>&1
  $PY benchmarks/records/2026-11-27-cpu-converged/collect.py "$dir" "$pack/$sweep"
done
if [ "$GRIDS_REFERENCE" = 1 ]; then
  mkdir -p "$pack/gpu_reference/runs/rnn"
  run=runs/sweeps/gpu_reference/rnn
  cp "$run/config.toml" "$run/train.log" "$pack/gpu_reference/runs/rnn/"
  cp "$(ls -d "$run"/checkpoints/step_* | sort | tail -1)/trainer_state.json" "$pack/gpu_reference/runs/rnn/"
fi
cp -r "$OUT/logs" "$pack/logs"
tar czf "$OUT/grids.tgz" -C "$pack" .
echo "done at $(($(date +%s) - started)) s" >> "$summary"
cat "$summary"
