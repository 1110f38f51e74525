#!/usr/bin/env bash
# PTB on one GPU: the seeds and candidates the PTB verdict still lacks (every row of the PTB
# table at its chosen recipe over three seeds, configs/sweeps/ptb_chosen.toml; stages 23 and
# 22), then the paper's Table 2 and Figure 4 at the shipped recipe (ptb_orders.toml,
# ptb_alpha.toml), each run no PTB record holds finished, trained by
# gpu_grids.sh in the GPU issue's order within one deadline, test ppl on each run's best
# checkpoint by validation, everything a record needs packed into $OUT/grids.tgz and
# $OUT/summary.txt.
#
# Here, before the call (the device gets neither ../shared nor .git; gpu_carry/ is in
# .git/info/exclude, so only `carry` takes it there; ~8 MB):
#   mkdir -p gpu_carry/ptb && cp -p PTB_FOLDER/ptb.{train,valid,test}.txt gpu_carry/ptb/
#   python -m hornn_dist.prepare configs/ptb.toml --set data.path=gpu_carry/ptb \
#     --set data.cache_dir=gpu_carry/data_cache
#   (git rev-parse HEAD; git status --porcelain) > gpu_carry/commit.txt
# The device call (one command; the script ends by PTB_SECONDS + 30 s of SIGTERM grace +
# PTB_FINISH_SECONDS + PTB_REPORT_SECONDS + ~30 s: under 560 s, about 460 s expected):
#   run(command="OUT=$OUT bash research/gpu/gpu_ptb.sh", carry=["gpu_carry"], timeout_s=600)
# A try on a CPU (H 16, two runs stopped at the deadline and scored; about 4 minutes on 2 cores;
# research/records/2026-11-27-cpu-ptb-dryrun has it, and a try on a tiny corpus that shows the queue):
#   OUT=/tmp/ptb PTB_SECONDS=75 PTB_MIN_RUN_SECONDS=10 PTB_JOBS=2 PTB_JOBS_NO_MPS=2 \
#     PTB_FINISH_SECONDS=120 PTB_SET="model.hidden_size=16 model.embedding_size=16" \
#     bash research/gpu/gpu_ptb.sh
#
# The queue, first to last (each run once, at its first item; GRIDS in gpu_grids.sh), as the
# PTB verdict issue needs it; a run any PTB record in research/records holds finished at the
# recipe planned now is not trained again (PTB_SKIP_RECORDED: other record folders, or "" to
# train every run), so the call trains only what the CPU's queue has not:
#   1. ptb_chosen.toml, seeds 1235 and 1236 of every row (28 runs; seed 1234 of each is the run
#      its stage chose, in that stage's record): the noise rule's seeds
#   2. stage 23 (ptb_recipe_dropout_knobs.toml): the feedback scale on gated-3 and the LSTM with
#      dropout, the RNN sized to gated-3 under its recipes with and without dropout
#   3. stage 22 (ptb_recipe_equal_knobs.toml): every knob on every model, `max`-3 and `sum`-3 with
#      dropout at their own rate last; stage 24 (ptb_recipe_fixed_phase.toml): the RNN's fixed
#      phase of 7 epochs on every HORNN-3 without dropout
#   4. the earlier stages' candidates: weight drop 0.2 for the RNN and the LSTM over three seeds
#      and 0.4 for gated-3 (ptb_recipe_weight_drop.toml), the RNN without dropout at weight
#      decay 3e-5 (ptb_recipe_rnn_l2.toml), gated-3, the LSTM and FOFE-3 under weight decay
#      (ptb_recipe_gated_l2.toml), FOFE-3's alpha (ptb_recipe_fofe_alpha.toml), the RNN with
#      its feedback scaled by alpha (ptb_recipe_rnn_alpha.toml), and the feedback scale's
#      screens (ptb_recipe_feedback_scale.toml)
#   5. Table 2: orders 2, 3 and 4 of each pooling, the RNN and the LSTM (14 runs) at the
#      paper's setting, in bf16
#   6. Figure 4: FOFE-3 at alpha 0.2 ... 0.9, seed 1234 (8 runs)
# PTB_JOBS (18) runs train at once where MPS runs (the whole of item 1 at once),
# PTB_JOBS_NO_MPS (6) where it does not; no run starts with under 60 s left; at PTB_SECONDS (390) from the start the runs still training are stopped
# (SIGTERM: a checkpoint) and their best checkpoints by validation so far scored on the test
# split within PTB_FINISH_SECONDS (45); such a run stays unfinished (no report takes it for a
# converged one) and the sweep command resumes it later.
set -u
carry=${PTB_CARRY:-gpu_carry}
if ! compgen -G "$carry/data_cache/ptb-*/manifest.json" > /dev/null; then
  echo "gpu_ptb.sh: no prepared PTB in $carry/data_cache; HINT: prepare it before the call" \
    "(this script's header) and carry $carry" >&2
  exit 2
fi
export GRIDS='ptb_chosen:-seed123[56]$
  ptb_recipe_dropout_knobs
  ptb_recipe_equal_knobs
  ptb_recipe_fixed_phase
  ptb_recipe_weight_drop:^(rnn|lstm)-|wdrop0\.4
  ptb_recipe_rnn_l2:wd3e-05
  ptb_recipe_gated_l2
  ptb_recipe_fofe_alpha
  ptb_recipe_rnn_alpha
  ptb_recipe_feedback_scale:^screen-|-drop|-fixed10-seed
  ptb_orders
  ptb_alpha'
export GRIDS_SKIP_RECORDED=${PTB_SKIP_RECORDED-$(echo research/records/*-ptb*/)}
export GRIDS_SET="data.path=$carry/ptb data.cache_dir=$carry/data_cache ${PTB_SET:-}"
export GRIDS_SECONDS=${PTB_SECONDS:-390}
export GRIDS_JOBS=${PTB_JOBS:-18}
export GRIDS_JOBS_NO_MPS=${PTB_JOBS_NO_MPS:-6}
export GRIDS_MIN_RUN_SECONDS=${PTB_MIN_RUN_SECONDS:-60}
export GRIDS_FINISH_SECONDS=${PTB_FINISH_SECONDS:-45}
export GRIDS_REPORT_SECONDS=${PTB_REPORT_SECONDS:-60}
export GRIDS_REFERENCE=0
export GRIDS_COMMIT_FILE=$carry/commit.txt
export GRIDS_PACK_SCRIPTS=$0
exec bash "$(dirname "$0")/gpu_grids.sh"
