#!/usr/bin/env bash
# The commands the device tool ran (repo root, one H200, 2026-11-29), each a call of its own on
# the machine that had just trained research/records/2026-11-29-h200-ptb/ (its calls 3 and 4
# came before and after these). The copy's git HEAD read 9dfec4f with research/gpu/gpu_ptb.sh,
# research/sweeps/ptb_recipe_weight_drop.toml and tests/test_ptb_sweeps.py modified: the tree of
# commit fb8e1c8 (those three files only; nothing the benchmarks import).
GPU_CHECK_STEPS=scaleout OUT=$OUT bash benchmarks/gpu_check.sh                 # 22:04:33, 92 s
GPU_CHECK_STEPS=throughput GPU_CHECK_PRECISIONS=bf16 GPU_CHECK_SECONDS=140 \
  OUT=$OUT bash benchmarks/gpu_check.sh                                        # 22:08:23, 55 s
