#!/usr/bin/env bash
# temporary: one short GPU check of recurrence_precision "fp16"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S=$SECONDS
V=hornn-sum-fp16rec,hornn-max-fp16rec,hornn-fofe-fp16rec,hornn-gated-fp16rec,hornn-sum-triton-fp16rec,hornn-max-triton-fp16rec,hornn-fofe-triton-fp16rec,hornn-gated-triton-fp16rec,hornn-max-triton,hornn-gated,lstm
timeout 60 python3 benchmarks/throughput.py --device cuda --configs paper,big --precisions bf16 --modes graphed \
  --variants $V --rounds 3 --json $OUT/throughput_fp16rec.json > $OUT/throughput_fp16rec.log 2>&1
echo "throughput rc=$? $((SECONDS-S))s"; sed -n '/^== best mode/,$p' $OUT/throughput_fp16rec.log
timeout 35 python3 benchmarks/precision.py --device cuda --dtypes bf16 --seeds 2 --json $OUT/precision.json 2>&1 | tee $OUT/precision.log
echo "precision $((SECONDS-S))s"
for pool in max gated; do
  timeout 22 python3 -m hornn_dist.train configs/demo.toml --no-resume --set model.arch=hornn --set model.pooling=$pool \
    --set model.hidden_size=400 --set model.embedding_size=400 --set model.activation=sigmoid \
    --set model.recurrence_precision=fp16 --set optim.max_col_norm=4.0 --set train.mixed_precision=bf16 \
    --set train.cuda_graph=true --set train.max_steps=400 --set train.output_dir=/tmp/s_$pool \
    --set data.cache_dir=/tmp/dc --set train.checkpoint_every=0 --set log.every=100 --set log.progress=false \
    --set log.tensorboard=false >> $OUT/train_speed.log 2>&1
  echo "trainer $pool fp16: $(grep -o 'step 400: .*' $OUT/train_speed.log | tail -n 1) $((SECONDS-S))s"
done
timeout 60 python3 -m pytest tests/test_models_hornn.py tests/test_models_lm.py tests/test_triton_scan.py -q -p no:cacheprovider -rf \
  -k "cuda and (autocast or triton_agrees or bf16)" > $OUT/cuda_tests.log 2>&1
echo "tests rc=$? $((SECONDS-S))s"; tail -n 8 $OUT/cuda_tests.log
