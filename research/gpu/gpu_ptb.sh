#!/usr/bin/env bash
# PTB on one GPU: every row of the CPU's PTB table at its chosen recipe over three seeds
# (configs/sweeps/ptb_chosen.toml: each model's run chosen on validation without dropout and
# with it, and the RNN and the LSTM sized to gated-3's parameters), then the paper's Table 2
# and Figure 4 at the shipped recipe (ptb_orders.toml, ptb_alpha.toml), trained by
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
# The queue, first to last (each run once, at its first item; GRIDS in gpu_grids.sh):
#   1. ptb_chosen.toml, seed 1234: the RNN, HORNN-3 sum/max/fofe/gated and the LSTM at each
#      one's chosen recipe without dropout and with it, and the equal-parameter rows (13 runs)
#   2. ptb_chosen.toml, seeds 1235 and 1236 (26 runs): the noise rule's seeds
#   3. the PTB recipe issue's open candidates: weight drop 0.2 for the RNN and the LSTM over
#      three seeds and 0.4 for gated-3 (ptb_recipe_weight_drop.toml: no ratio moves by a
#      regulariser only the HORNN had), the RNN without dropout at weight decay 3e-5
#      (ptb_recipe_rnn_l2.toml), gated-3, the LSTM and FOFE-3 without dropout under
#      weight decay (ptb_recipe_gated_l2.toml), FOFE-3's alpha at its own recipe
#      (ptb_recipe_fofe_alpha.toml), the RNN's own recipe with its feedback scaled by alpha
#      (ptb_recipe_rnn_alpha.toml), and `sum`, `max` and gated-3 under it with a feedback
#      scale (ptb_recipe_feedback_scale.toml: the screens, gated-3 at 0.2 with dropout and
#      `sum` at 0.2 with a fixed phase; each pooling's run at 0.2 without dropout is item 1's)
#   4. Table 2: orders 2, 3 and 4 of each pooling, the RNN and the LSTM (14 runs) at the
#      paper's setting, in bf16 (FOFE-3's own recipe, tied and halving from epoch 2, validated
#      only 0.7% better on the CPU: one seed)
#   5. Figure 4: FOFE-3 at alpha 0.2 ... 0.9, seed 1234 (8 runs)
# A run that research/records/2026-11-29-h200-ptb holds finished is not trained
# again (PTB_SKIP_RECORDED: another record's folder, or "" to train every run).
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
export GRIDS='ptb_chosen:-seed1234$
  ptb_chosen:-seed123[56]$
  ptb_recipe_weight_drop:^(rnn|lstm)-|wdrop0\.4
  ptb_recipe_rnn_l2:wd3e-05
  ptb_recipe_gated_l2
  ptb_recipe_fofe_alpha
  ptb_recipe_rnn_alpha
  ptb_recipe_feedback_scale:^screen-|-drop|-fixed10-seed
  ptb_orders
  ptb_alpha'
export GRIDS_SKIP_RECORDED=${PTB_SKIP_RECORDED-research/records/2026-11-29-h200-ptb}
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
