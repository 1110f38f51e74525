#!/usr/bin/env bash
# The PTB verdict's CPU trainings in two lanes of one run at a time (one thread each, two
# cores), each lane a list of sweep commands in the order the verdict needs them. A sweep
# command resumes its runs where they stopped and skips finished ones, so after a stop (a
# session's end, a SIGTERM) the same command goes on. Two lanes rather than one sweep with
# --jobs 2: a sweep's last run trains alone, and the lane beside it keeps the other core busy.
# A sweep's output_dir takes one sweep at a time, so the lanes share none. Run it from a
# checkout of a committed tree (a run records its commit, and a sweep's next run imports the
# code as it is then):
#   git worktree add --detach ../wt-train HEAD && cd ../wt-train && ln -s ../main/runs runs
#   PTB=/path/to/ptb nohup bash research/tools/ptb_verdict_queue.sh > runs/verdict_queue.log 2>&1 &
# To stop it, send its bash SIGTERM: it passes the signal to both lanes' sweeps (whose runs
# checkpoint) and ends. Each lane names only the runs its record lacked when it last ran (a
# fresh machine has no runs/ whose finished runs a sweep would skip); every run the PTB verdict
# needs is in its records since 2026-12-02, and the lanes name the last of them: lane A the
# sized RNN's seed 1236 without dropout, `sum`-3's seeds with dropout and FOFE-3's seed 1235
# under the fixed phase (configs/sweeps/ptb_chosen.toml), lane B stage 24.
set -uo pipefail
ptb=${PTB:?set PTB to the folder of ptb.train.txt, ptb.valid.txt, ptb.test.txt}

lane() {  # NAME, then sweep commands separated by "--next"; one run at a time, in order
  local name=$1 child="" stopping=0
  shift
  trap 'stopping=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null' TERM
  while [ $# -gt 0 ]; do
    local args=()
    while [ $# -gt 0 ] && [ "$1" != "--next" ]; do args+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    # a run that fails leaves the lane going
    OMP_NUM_THREADS=1 nice -n 10 python -m hornn_dist.sweep "${args[@]}" --jobs 1 \
      --set data.path="$ptb" &
    child=$!
    wait "$child"  # returns early when the trap runs: wait again for the runs' checkpoints
    while kill -0 "$child" 2>/dev/null; do wait "$child"; done
    child=""
    if [ "$stopping" = 1 ]; then
      echo "ptb_verdict_queue.sh lane $name stopped: run the script again to go on" >&2
      exit 143
    fi
  done
  echo "ptb_verdict_queue.sh lane $name: every sweep done" >&2
}

lane A configs/sweeps/ptb_chosen.toml \
  --only 'rnn-matched-tied-wd1e-05-alpha0.2-fixed7-seed1236' \
  --only 'hornn3-sum-tied-drop0.3-fixed10-c0.2-seed123[56]' \
  --only 'hornn3-fofe-tied-wd1e-05-alpha0.2-fixed7-seed1235' &
lane_a=$!
lane B research/sweeps/ptb_recipe_fixed_phase.toml &
lane_b=$!
trap 'kill -TERM "$lane_a" "$lane_b" 2>/dev/null' TERM INT
for pid in "$lane_a" "$lane_b"; do
  wait "$pid"
  while kill -0 "$pid" 2>/dev/null; do wait "$pid"; done  # the trap ran: wait for the lane
done
