#!/usr/bin/env bash
# The paper's own benchmark on one GPU: Tables 2 and 3 and Figure 4 on Mikolov's PTB at H 400
# (configs/sweeps/ptb_fair.toml, ptb_orders.toml, ptb_alpha.toml), trained by gpu_grids.sh in
# the issue's order of priority within one deadline, test ppl on each run's best checkpoint by
# validation, everything a record needs packed into $OUT/grids.tgz and $OUT/summary.txt.
#
# Here, before the call (the device gets neither ../shared nor .git; gpu_carry/ is in
# .git/info/exclude, so only `carry` takes it there; ~8 MB):
#   mkdir -p gpu_carry/ptb && cp -p PTB_FOLDER/ptb.{train,valid,test}.txt gpu_carry/ptb/
#   python -m hornn_dist.prepare configs/ptb.toml --set data.path=gpu_carry/ptb \
#     --set data.cache_dir=gpu_carry/data_cache
#   (git rev-parse HEAD; git status --porcelain) > gpu_carry/commit.txt
# The device call (one command; the script ends by PTB_SECONDS + 30 s of SIGTERM grace +
# PTB_FINISH_SECONDS + PTB_REPORT_SECONDS + ~30 s: under 560 s, about 460 s expected):
#   run(command="OUT=$OUT bash benchmarks/gpu_ptb.sh", carry=["gpu_carry"], timeout_s=600)
# A try on a CPU (H 16, two runs stopped at the deadline and scored; about 4 minutes on 2 cores;
# records/2026-11-27-cpu-ptb-dryrun has it, and a try on a tiny corpus that shows the queue):
#   OUT=/tmp/ptb PTB_SECONDS=75 PTB_MIN_RUN_SECONDS=10 PTB_JOBS=2 PTB_JOBS_NO_MPS=2 \
#     PTB_FINISH_SECONDS=120 PTB_SET="model.hidden_size=16 model.embedding_size=16" \
#     bash benchmarks/gpu_ptb.sh
#
# The queue, first to last (each run once, at its first item; GRIDS in gpu_grids.sh):
#   1. Table 3 at lr 0.5: the RNN, HORNN-3 sum/max/fofe/gated and the LSTM, seed 1234, then
#      seeds 1235 and 1236 (18 runs)
#   2. Table 2's cells not in 1: orders 2 and 4 of each pooling, seed 1234 (8 runs)
#   3. the RNN and the LSTM sized to HORNN-3 FOFE's parameters, three seeds, lr 0.5 (6 runs);
#      the RNN, FOFE-3, gated-3 and the LSTM at lr 1.0, seed 1234 (4 runs)
#   4. Figure 4: FOFE-3 at alpha 0.2 ... 0.9, seed 1234 (8 runs)
#   5. the rest of ptb_fair.toml: lr 1.0 for the other runs (20 runs)
# PTB_JOBS (18) runs train at once where MPS runs (the whole of item 1 at once),
# PTB_JOBS_NO_MPS (6) where it does not (one seed of Table 3 at a time); no run starts with
# under 60 s left; at PTB_SECONDS (390) from the start the runs still training are stopped
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
export GRIDS='ptb_fair:^(rnn|lstm|hornn3-[a-z]+)-seed1234--lr05$
  ptb_fair:^(rnn|lstm|hornn3-[a-z]+)-seed123[56]--lr05$
  ptb_orders:^hornn[24]-
  ptb_fair:-matched-seed[0-9]+--lr05$
  ptb_fair:^(rnn|lstm|hornn3-(fofe|gated))-seed1234--lr1$
  ptb_alpha
  ptb_fair'
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
