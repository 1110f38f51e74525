#!/usr/bin/env bash
# One GPU check of the speed and scale-out issues, run from the repo root on a machine with one
# CUDA GPU:
#
#   OUT=/some/folder bash benchmarks/gpu_check.sh     # hard stop at 560 s
#   GPU_CHECK_STEPS=scaleout OUT=/some/folder bash benchmarks/gpu_check.sh   # ~4-5 min
#
# Run it with the device tool's timeout_s 600: the steps come in order of what they prove, and
# each one's limit is cut to what is left, so a late step is skipped rather than the run lost.
#
# Writes logs and JSON only (no checkpoints) under $OUT, up to 14 files (the device tool returns
# at most 8: pack them into one archive after the script):
#   summary.txt                  environment, then one line per step: exit code and seconds
#   scaleout_tests.log           (0) the multi-process step on CUDA: pytest of its graphs vs
#                                    eager steps (the exchange between two graphs) in a
#                                    1-process NCCL group, and two processes sharing
#                                    the GPU (gloo over CUDA tensors): graphed == eager == DDP,
#                                    and == one process on both batches; then the trainer in
#                                    fp16 (graphed, fused SGD), 200 steps, resumed to 400
#   scaleout.log / .json         (0) benchmarks/throughput.py, paper+big, fp32+bf16: hornn-fofe
#                                    and lstm graphed (one process) vs graphed-ar (the trainer's
#                                    multi-process step, NCCL world size 1), eager-ar and
#                                    eager-ddp (the old path); the goal: graphed-ar >= 0.9x
#                                    graphed
#   scaling.log / .json          (0) benchmarks/scaling.py, paper+big, bf16: per-GPU graphed
#                                    step, the eager step's overlap window, what the exchange
#                                    sends, 1-rank NCCL collectives, projected tokens/s and
#                                    efficiency for 1-64 GPUs
#   cuda_tests.log               (a) pytest -k cuda: model on CUDA vs CPU reference, graphed
#                                    benchmark step == eager, trainer's graphed step == eager,
#                                    triton engine vs fused; (a2) benchmarks/precision.py:
#                                    rounding of each recurrence_precision vs float64
#   triton_tiles.log / .json     (b) benchmarks/triton_tiles.py: the triton engine's tile sizes
#                                    and K splits (bf16 fofe+max+gated; fp32 fofe in the log
#                                    only); GPU_CHECK_TUNED=1: the fastest bf16 fofe tiles of
#                                    each config are used below instead of the engine's
#   throughput.log / .json       (c) benchmarks/throughput.py, paper+big, fp32+bf16, eager+graphed;
#                                    the default variants, with the triton engine's four; then
#                                    (c2) bf16 only, every pooling with -autocastrec and
#                                    -fp32rec on both engines
#   train_speed.log              (d) hornn_dist.train itself at the paper's sizes (H 400, B 20,
#                                    T 30, bf16) on the demo corpus, CUDA graph: HORNN-3 (fused
#                                    fofe; sum/max/fofe/gated with the default engine, each
#                                    also with recurrence_precision autocast) and LSTM
#   extra.log                    (e) kernels per step and their GPU time (paper, bf16);
#                                (f) optional, if time is left: demo training in bf16 (CUDA
#                                    graph) and fp16 (CUDA graph, fused SGD), 300 steps, then
#                                    resumed to 600;
#                                (g) optional, if time is left: torch.compile rows (paper, bf16)
# GPU_CHECK_STEPS=scaleout,tests,tiles,throughput,otherprec,trainer,profile,train,compiled (the
# default: all) picks steps; GPU_CHECK_PRECISIONS (default fp32,bf16) the throughput precisions of
# (0) and (c); GPU_CHECK_VARIANTS the variants of (c); GPU_CHECK_COMMIT the commit to record when
# the copy has no .git (e.g. "$(git rev-parse HEAD)$(git diff --quiet HEAD || echo -dirty)"). A failing step does not stop the others. Needs torch, accelerate, tokenizers,
# tensorboard, pytest; not `datasets` (the demo corpus is bundled, and preparing it does not
# import it).
set +e
set -u
: "${OUT:?set OUT to the folder that receives the logs}"
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python3}
# the commit every benchmark's JSON records (benchmarks/common.py) where the copy has no .git
[[ -n ${GPU_CHECK_COMMIT:-} ]] && export HORNN_COMMIT=$GPU_CHECK_COMMIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
DEADLINE=${GPU_CHECK_SECONDS:-560} # whole script; each step's timeout is cut to what is left
WORK=/tmp/hornn_gpu_check          # run dirs and checkpoints: not under $OUT
rm -rf "$WORK" && mkdir -p "$WORK"
SUMMARY="$OUT/summary.txt"
EXTRA="$OUT/extra.log"
STEPS=",${GPU_CHECK_STEPS:-scaleout,tests,tiles,throughput,otherprec,trainer,profile,train,compiled},"
PRECISIONS=${GPU_CHECK_PRECISIONS:-fp32,bf16}
VARIANTS=${GPU_CHECK_VARIANTS:-hornn-sum,hornn-max,hornn-fofe,hornn-gated,rnn,lstm,hornn-sum-triton,\
hornn-max-triton,hornn-fofe-triton,hornn-gated-triton,hornn-fofe-fp32rec,hornn-fofe-triton-fp32rec}
want() { [[ $STEPS == *",$1,"* ]]; }

{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: ${GPU_CHECK_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
  echo "steps: ${GPU_CHECK_STEPS:-all}; precisions: ${GPU_CHECK_PRECISIONS:-fp32,bf16}"
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

# (0) The scale-out issue's GPU proofs: the multi-process step's graphs against its eager steps
#     and DDP (two processes on the one GPU over gloo), its speed at NCCL world size 1 against
#     the one-process graph, and the scaling projection from this GPU's graphed step.
if want scaleout; then
  step scaleout_tests 150 "$OUT/scaleout_tests.log" \
    "$PY" -m pytest tests/test_train_step.py tests/test_step_ranks.py -q \
    -k "(cuda and not triton) or gpu" -p no:cacheprovider -rf
  tail -n 3 "$OUT/scaleout_tests.log" >>"$SUMMARY"
  step scaleout_speed 150 "$OUT/scaleout.log" \
    "$PY" benchmarks/throughput.py --device cuda --configs paper,big --precisions "$PRECISIONS" \
    --modes graphed,graphed-ar,eager-ar,eager-ddp --variants hornn-fofe,lstm --rounds 3 \
    --json "$OUT/scaleout.json"
  sed -n '/^== the multi-process path/,$p' "$OUT/scaleout.log" >>"$SUMMARY"
  step scaling 120 "$OUT/scaling.log" \
    "$PY" benchmarks/scaling.py --device cuda --configs paper,big --json "$OUT/scaling.json"
  grep -e "^measured:" "$OUT/scaling.log" >>"$SUMMARY"
  # fp16 graphed (fused SGD, the scaler's overflow check on the GPU), then resumed
  for steps in 200 400; do
    step "fp16_train_$steps" 45 "$OUT/scaleout_tests.log" \
      "$PY" -m hornn_dist.train configs/demo.toml --set train.mixed_precision=fp16 \
      --set train.max_steps=$steps --set train.output_dir="$WORK/fp16_graph" \
      --set data.cache_dir="$WORK/data_cache" --set train.checkpoint_every=100 \
      --set log.every=100 --set log.progress=false --set log.tensorboard=false
  done
  grep -o -e "step CUDA graph[^|]*" -e "resuming from .*" -e "step 400: .*" \
    "$OUT/scaleout_tests.log" | sed 's/^/fp16 train: /' >>"$SUMMARY"
fi

# (a) CUDA tests: the model's CUDA-vs-CPU checks, the benchmark's graphed-vs-eager checks and
#     the triton engine's checks against the fused engine.
if want tests; then
  step cuda_tests 180 "$OUT/cuda_tests.log" \
    "$PY" -m pytest tests/test_models_*.py tests/test_benchmarks.py tests/test_train_step.py \
    tests/test_triton_scan.py -q -k cuda -p no:cacheprovider -rf
  tail -n 3 "$OUT/cuda_tests.log" >>"$SUMMARY"
  # (a2) each precision's rounding against float64, with cuDNN's LSTM beside it (log only)
  step precision 60 "$OUT/cuda_tests.log" \
    "$PY" benchmarks/precision.py --device cuda --json "$WORK/precision.json"
fi

# (b) The triton engine's tiles and K splits: one layer's forward+backward in a CUDA graph,
#     fused vs triton at each BLOCK_BxBLOCK_HxBLOCK_Kxwarps[xsplit] (a cut of the grid; each
#     choice compiles its own kernels, ~1-2 s each); each group's line in summary.txt names the
#     fastest tiles and the engine's default ("d"). With GPU_CHECK_TUNED=1 the fastest bf16 fofe
#     tiles of each config become the triton rows' tiles in (c)-(e); by default they run the
#     engine's own tiles, which is what a user gets.
TILES=""
if want tiles; then
  step triton_tiles 180 "$OUT/triton_tiles.log" \
    "$PY" benchmarks/triton_tiles.py --poolings fofe,max,gated --precisions bf16 \
    --tiles 32x16x32x4,32x16x32x4x2,32x16x32x4x4,32x16x32x4x8,16x16x32x2x4,16x16x32x4x8,\
32x16x64x4x4,32x32x32x4x4,32x32x32x4x2,64x32x32x8x4 --json "$OUT/triton_tiles.json"
  step triton_tiles_fp32 40 "$OUT/triton_tiles.log" \
    "$PY" benchmarks/triton_tiles.py --poolings fofe --precisions fp32 \
    --tiles 32x16x32x4x4,16x16x32x2x4,32x32x32x4x4,64x32x32x8x4 \
    --json "$WORK/triton_tiles_fp32.json"
  grep -e "^  -> " "$OUT/triton_tiles.log" >>"$SUMMARY" # per group: fused, best, default tiles
  if [ "${GPU_CHECK_TUNED:-0}" = 1 ]; then
    TILES=$("$PY" -c 'import json, sys
rows = json.load(open(sys.argv[1]))["results"]
print(",".join(r["config"] + "=" + "x".join(map(str, r["tiles"])) for r in rows
      if r.get("best") and r["precision"] == "bf16" and r["pooling"] == "fofe"))' \
      "$OUT/triton_tiles.json" 2>>"$SUMMARY")
  fi
fi
echo "triton tiles for what follows: ${TILES:-the engine defaults}" >>"$SUMMARY"
PAPER_TILES=$(echo "$TILES" | tr ',' '\n' | sed -n 's/^paper=//p')

# (c) The throughput table: the default variants with the triton engine's four, and fofe with
#     the layer kept in fp32 under bf16 on both engines (-fp32rec); both configs, fp32 and
#     bf16, eager and graphed.
if want throughput; then
  step throughput 300 "$OUT/throughput.log" \
    "$PY" benchmarks/throughput.py --device cuda --configs paper,big --precisions "$PRECISIONS" \
    --variants "$VARIANTS" --rounds 3 --triton-tiles "$TILES" --json "$OUT/throughput.json"
  sed -n '/^== best mode/,$p' "$OUT/throughput.log" >>"$SUMMARY"
  "$PY" benchmarks/markdown_table.py "$OUT/throughput.json" >>"$SUMMARY" 2>&1 # for the README
fi

# (c2) The same under bf16 only (graphed), every pooling on both engines with the layer in bf16
#      (-autocastrec, model.recurrence_precision = "autocast") and in fp32 (-fp32rec, "fp32");
#      the default runs it in fp16. Against the LSTM of the same run. Log appended to
#      throughput.log, table to summary.txt.
if want otherprec; then
  echo "== bf16 -autocastrec and -fp32rec rows (separate run, own LSTM)" >>"$SUMMARY"
  step throughput_other_precisions 150 "$OUT/throughput.log" \
    "$PY" benchmarks/throughput.py --device cuda --configs paper,big --precisions bf16 \
    --modes graphed --variants "$(echo hornn-{sum,max,fofe,gated}{,-triton}-{autocast,fp32}rec \
    | tr ' ' ,),lstm" \
    --rounds 3 --triton-tiles "$TILES" --json "$WORK/throughput_other_precisions.json"
  "$PY" benchmarks/markdown_table.py "$WORK/throughput_other_precisions.json" >>"$SUMMARY" 2>&1
fi

# (d) The trainer's own tokens/s at the paper's sizes, bf16, on the demo corpus (vocab ~5k),
#     with the paper configs' sigmoid and column norm: the rate logged at step 400 covers steps
#     301-400, after the warm-up and the capture. Each run is "VARIANT ENGINE MODE"; "auto" is
#     the default engine, and summary.txt says what it picked (the start-up line).
#     A 4th word sets model.recurrence_precision (the default: fp16). GPU_CHECK_TRAINER, runs
#     separated by ";", replaces the list. The rnn (cuDNN's nn.RNN) runs tanh, all else sigmoid.
TRAINER_RUNS=${GPU_CHECK_TRAINER:-"hornn-fofe fused graph;hornn-fofe auto graph;\
hornn-max auto graph;hornn-sum auto graph;hornn-gated auto graph;lstm - graph;rnn - graph;\
hornn-max auto graph autocast;hornn-gated auto graph autocast;hornn-sum auto graph autocast;\
hornn-fofe auto graph autocast"}
want trainer && while IFS= read -r run; do
  set -- $run
  variant=$1 engine=$2 mode=$3 precision=${4:-fp16}
  arch=${variant%%-*}
  pooling=${variant#*-}
  activation=sigmoid
  label="$variant $engine $mode${4:+ $4}"
  [ "$arch" != hornn ] && pooling=fofe engine=fused && label="$variant $mode"
  [ "$arch" = rnn ] && activation=tanh
  name=${label// /_}
  HORNN_TRITON_TILES=$PAPER_TILES step "speed_$name" 45 "$OUT/train_speed.log" \
    "$PY" -m hornn_dist.train configs/demo.toml --no-resume \
    --set model.arch=$arch --set model.pooling=$pooling --set model.engine=$engine \
    --set model.hidden_size=400 --set model.embedding_size=400 --set model.activation=$activation \
    --set model.recurrence_precision=$precision --set optim.max_col_norm=4.0 \
    --set train.mixed_precision=bf16 \
    --set train.cuda_graph=$([ "$mode" = graph ] && echo true || echo false) \
    --set train.max_steps=400 --set train.output_dir="$WORK/speed_$name" \
    --set data.cache_dir="$WORK/data_cache" --set train.checkpoint_every=0 \
    --set log.every=100 --set log.progress=false --set log.tensorboard=false
  rate=$(grep -o "step 400: .*tokens/s" "$OUT/train_speed.log" | tail -n 1 | grep -o "[0-9]* tokens/s")
  picked=$(grep -o "(auto engine: [a-z]*, [a-z]* in [a-z0-9]*)" "$OUT/train_speed.log" | tail -n 1)
  [ "$engine" = auto ] || picked=""
  echo "trainer ${label}: ${rate:-no rate} ${picked}" >>"$SUMMARY"
  sed -i "s/step 400: /step 400 ($label): /" "$OUT/train_speed.log"
done < <(tr ';' '\n' <<<"$TRAINER_RUNS")

# (e) Kernels launched per step and their GPU time (paper, bf16): how launch-bound each is.
if want profile; then
  step throughput_profile 60 "$EXTRA" \
    "$PY" benchmarks/throughput.py --device cuda --configs paper --precisions bf16 --profile \
    --variants hornn-fofe,hornn-fofe-triton,hornn-max-triton,hornn-gated-triton,lstm \
    --triton-tiles "$TILES" --json "$WORK/profile.json"
fi

# (f) Optional: demo training with mixed precision, 300 steps, then the same command resumed to
#     600 (issue 4's GPU check; passed on an H200 and an H100 before), if 150 s are left.
want train && for prec in bf16 fp16; do
  if ((DEADLINE - SECONDS < 150)); then
    echo "train_${prec}: skipped (under 150 s left)" >>"$SUMMARY"
    continue
  fi
  for steps in 300 600; do
    step "train_${prec}_${steps}" 60 "$EXTRA" \
      "$PY" -m hornn_dist.train configs/demo.toml \
      --set train.mixed_precision=$prec --set train.max_steps=$steps \
      --set train.output_dir="$WORK/$prec" --set data.cache_dir="$WORK/data_cache" \
      --set train.checkpoint_every=100 --set log.every=100 --set log.progress=false
  done
  resumed=$(grep -c "resuming from $WORK/$prec/checkpoints/step_00000300" "$EXTRA")
  echo "train_${prec}: resumed from step 300: $([ "$resumed" -ge 1 ] && echo yes || echo NO)" \
    >>"$SUMMARY"
done

# (g) Optional: torch.compile (default mode) of the same step, if at least 100 s are left.
if want compiled; then
  if ((DEADLINE - SECONDS >= 100)); then
    step throughput_compiled 90 "$EXTRA" \
      "$PY" benchmarks/throughput.py --device cuda --configs paper --precisions bf16 \
      --modes eager,graphed,compiled --variants hornn-fofe,lstm --json "$WORK/compiled.json"
  else
    echo "throughput_compiled: skipped (under 100 s left)" >>"$SUMMARY"
  fi
fi

echo "total: ${SECONDS}s" >>"$SUMMARY"
cat "$SUMMARY"
