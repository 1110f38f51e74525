#!/usr/bin/env bash
# The PTB verdict's CPU trainings in the order the verdict needs them, as two lanes of one
# thread each (two lanes on two cores; docs/sweeps.md). Each line is a sweep command that
# resumes its runs where they stopped and skips finished ones, so after a stop (a session's
# end, a SIGTERM) the same command goes on. Run from a checkout of a committed tree (a run
# records its commit, and a sweep's next run imports the code as it is then):
#   git worktree add --detach ../wt-train HEAD && cd ../wt-train && ln -s ../main/runs runs
#   PTB=/path/to/ptb nohup bash research/tools/ptb_verdict_queue.sh a > runs/lane_a.log 2>&1 &
#   PTB=/path/to/ptb nohup bash research/tools/ptb_verdict_queue.sh b > runs/lane_b.log 2>&1 &
# To stop a lane, send its bash SIGTERM: it passes the signal to the sweep (whose runs
# checkpoint) and ends. Order: the contested rows without dropout (the RNN, the LSTM, gated-3), the grid's last
# edge (gated-3 at feedback 0.05), then FOFE-3, max-3, sum-3, then stage 22's dropout runs.
set -uo pipefail
lane=${1:?usage: ptb_verdict_queue.sh a|b}
ptb=${PTB:?set PTB to the folder of ptb.train.txt, ptb.valid.txt, ptb.test.txt}
chosen=configs/sweeps/ptb_chosen.toml
knobs=research/sweeps/ptb_recipe_equal_knobs.toml

child=""
stopping=0
trap 'stopping=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null' TERM INT

sweep() {  # one sweep command at one thread, niced; a run that fails leaves the lane going
  OMP_NUM_THREADS=1 nice -n 10 python -m hornn_dist.sweep "$@" --jobs 1 \
    --set data.path="$ptb" &
  child=$!
  wait "$child"  # returns early when the trap runs: wait again for the runs' checkpoints
  while kill -0 "$child" 2>/dev/null; do wait "$child"; done
  child=""
  if [ "$stopping" = 1 ]; then
    echo "lane $lane stopped: run it again to go on" >&2
    exit 143
  fi
}

case $lane in
  a)
    sweep $chosen --only 'rnn-tied-wd1e-05-alpha0.2-fixed7-seed123[56]' \
      --only 'lstm-tied-halve1-wd1e-05-c0.5-seed123[56]'
    sweep $chosen --only 'hornn3-fofe-tied-wd1e-05-alpha0.2-seed123[56]'
    sweep $chosen --only 'hornn3-sum-tied-wd1e-05-c0.2-seed123[56]'
    sweep $knobs --only 'hornn3-sum-tied-drop*'
    ;;
  b)
    sweep $knobs --only 'hornn3-gated-tied-wd1e-05-c0.05-seed1234'
    sweep $chosen --only 'hornn3-gated-tied-wd1e-05-c0.2-seed123[56]'
    sweep $chosen --only 'hornn3-max-tied-wd1e-05-c0.2-seed123[56]'
    sweep $knobs --only 'hornn3-max-tied-drop*'
    ;;
  *)
    echo "ptb_verdict_queue.sh: unknown lane '$lane'; use a or b" >&2
    exit 2
    ;;
esac
