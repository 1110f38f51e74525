#!/usr/bin/env bash
# One GPU check of the speed issue, run from the repo root on a machine with one CUDA GPU:
#
#   OUT=/some/folder bash benchmarks/gpu_check.sh     # ~4-5 min on an H100, hard stop at 8 min
#
# Writes logs and JSON only (no checkpoints) under $OUT, at most 7 files:
#   summary.txt                  environment, then one line per step: exit code and seconds
#   cuda_tests.log               (a) pytest -k cuda: model tests on CUDA, graphed == eager
#   throughput.log / .json       (b) benchmarks/throughput.py, paper+big, fp32+bf16, eager+graphed
#   train.log                    (c) demo training in bf16 and fp16, 300 steps, then resumed to 600
#   throughput_compiled.log      (d) optional, if time is left: torch.compile rows (paper, bf16)
# A failing step does not stop the others. Needs torch, accelerate, tokenizers, tensorboard,
# pytest; not `datasets` (the demo corpus is bundled, and preparing it does not import it).
set +e
set -u
: "${OUT:?set OUT to the folder that receives the logs}"
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
DEADLINE=${GPU_CHECK_SECONDS:-480} # whole script; each step's timeout is cut to what is left
WORK=/tmp/hornn_gpu_check          # run dirs and checkpoints: not under $OUT
rm -rf "$WORK" && mkdir -p "$WORK"
SUMMARY="$OUT/summary.txt"

{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  "$PY" -c 'import sys, torch, accelerate; print("python", sys.version.split()[0], "torch",
torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
"accelerate", accelerate.__version__, "gpu", torch.cuda.is_available() and
torch.cuda.get_device_name())' 2>&1
} >"$SUMMARY"

# step NAME TIMEOUT LOG CMD...: run CMD (appending to LOG) under timeout, record rc and seconds.
step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local left=$((DEADLINE - SECONDS))
  ((limit > left)) && limit=$left
  if ((limit < 20)); then
    echo "$name: skipped (no time left)" >>"$SUMMARY"
    return 1
  fi
  echo "### $name: $*" >>"$log"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  local note=""
  ((rc == 124 || rc == 137)) && note=" (timed out after ${limit}s)"
  echo "$name: rc=$rc, $((SECONDS - start))s$note" >>"$SUMMARY"
  return $rc
}

# (a) CUDA tests: the model's CUDA-vs-CPU checks and the benchmark's graphed-vs-eager checks.
step cuda_tests 120 "$OUT/cuda_tests.log" \
  "$PY" -m pytest tests/test_models_*.py tests/test_benchmarks.py -q -k cuda -p no:cacheprovider

# (b) The throughput table: every variant, both configs, fp32 and bf16, eager and graphed.
step throughput 270 "$OUT/throughput.log" \
  "$PY" benchmarks/throughput.py --device cuda --configs paper,big --precisions fp32,bf16 \
  --json "$OUT/throughput.json"
sed -n '/^== best mode/,$p' "$OUT/throughput.log" >>"$SUMMARY"

# (c) Demo training with mixed precision: 300 steps, then the same command resumed to 600.
for prec in bf16 fp16; do
  for steps in 300 600; do
    step "train_${prec}_${steps}" 60 "$OUT/train.log" \
      "$PY" -m hornn_dist.train configs/demo.toml \
      --set train.mixed_precision=$prec --set train.max_steps=$steps \
      --set train.output_dir="$WORK/$prec" --set data.cache_dir="$WORK/data_cache" \
      --set train.checkpoint_every=100 --set log.every=100 --set log.progress=false
  done
  resumed=$(grep -c "resuming from $WORK/$prec/checkpoints/step_00000300" "$OUT/train.log")
  echo "train_${prec}: resumed from step 300: $([ "$resumed" -ge 1 ] && echo yes || echo NO)" \
    >>"$SUMMARY"
done

# (d) Optional: torch.compile (default mode) of the same step, if at least 100 s are left.
if ((DEADLINE - SECONDS >= 100)); then
  step throughput_compiled 90 "$OUT/throughput_compiled.log" \
    "$PY" benchmarks/throughput.py --device cuda --configs paper --precisions bf16 \
    --modes eager,compiled --variants hornn-fofe,hornn-gated,lstm --json "$WORK/compiled.json"
else
  echo "throughput_compiled: skipped (under 100 s left)" >>"$SUMMARY"
fi

echo "total: ${SECONDS}s" >>"$SUMMARY"
cat "$SUMMARY"
