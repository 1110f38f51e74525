#!/bin/bash
# The short runs of this record, as run on 2026-12-07 14:24-14:44 UTC, one at a time, from the
# repository root of /work/main (beside two transfer-screen trainings and a benchmark):
#   for c in 9a92ace 2ce787f d0ac379; do git worktree add --detach /tmp/wt_$c $c; done
#   bash research/records/2026-12-07-cpu-max3-twins/run.sh 2ce787f d0ac379 9a92ace
#   ISA=AVX512_CORE bash research/records/2026-12-07-cpu-max3-twins/run.sh 2ce787f
# Each trains max-3's row config (its seed-1234 run's own config.toml) for 300 steps from the
# worktree of one commit (python -m puts the worktree's hornn_dist first on the path).
source /work/venv/bin/activate
CFG=/work/main/research/records/2026-11-30-cpu-ptb-feedback-scale/ptb_recipe_feedback_scale/hornn3-max-tied-wd1e-05-c0.2-seed1234/config.toml
for c in "$@"; do
  out=/tmp/max3_$c${ISA:+_isa_${ISA,,}}
  (cd /tmp/wt_$c &&
    env ${ISA:+ONEDNN_MAX_CPU_ISA=$ISA} OMP_NUM_THREADS=1 nice -n 5 python -m hornn_dist.train "$CFG" \
      --set train.max_steps=300 --set train.output_dir=$out --set data.path=/work/shared/data/ptb \
      --set data.cache_dir=/tmp/max3_cache --set train.cpu_threads=1 --no-resume)
done
