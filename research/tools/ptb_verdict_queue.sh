#!/usr/bin/env bash
# The PTB verdict's CPU trainings in the order the verdict needs them, two at a time (one
# thread each) on two cores. Each line is a sweep command that resumes its runs where they
# stopped and skips finished ones, so after a stop (a session's end, a SIGTERM) the same
# command goes on. One sweep at a time: a sweep's output_dir takes one sweep. Run it from a
# checkout of a committed tree (a run records its commit, and a sweep's next run imports the
# code as it is then):
#   git worktree add --detach ../wt-train HEAD && cd ../wt-train && ln -s ../main/runs runs
#   PTB=/path/to/ptb nohup bash research/tools/ptb_verdict_queue.sh > runs/verdict_queue.log 2>&1 &
# To stop it, send its bash SIGTERM: it passes the signal to the sweep (whose runs checkpoint)
# and ends. Order: seeds 1235-1236 of every row without dropout (configs/sweeps/ptb_chosen.toml
# lists the groups in the verdict's order: the RNN, the LSTM, gated-3, max-3, FOFE-3, sum-3),
# then stage 23 (the feedback scale on gated-3 and the LSTM with dropout), seeds 1235-1236 of
# the RNN and FOFE-3 with dropout (alpha 0.2), then stage 22's dropout runs of max-3 and sum-3.
set -uo pipefail
ptb=${PTB:?set PTB to the folder of ptb.train.txt, ptb.valid.txt, ptb.test.txt}
child=""
stopping=0
trap 'stopping=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null' TERM INT

sweep() {  # one sweep command, niced; a run that fails leaves the queue going
  OMP_NUM_THREADS=1 nice -n 10 python -m hornn_dist.sweep "$@" --jobs 2 \
    --set data.path="$ptb" &
  child=$!
  wait "$child"  # returns early when the trap runs: wait again for the runs' checkpoints
  while kill -0 "$child" 2>/dev/null; do wait "$child"; done
  child=""
  if [ "$stopping" = 1 ]; then
    echo "ptb_verdict_queue.sh stopped: run it again to go on" >&2
    exit 143
  fi
}

sweep configs/sweeps/ptb_chosen.toml \
  --only 'rnn-tied-wd1e-05-alpha0.2-fixed7-seed123[56]' \
  --only 'lstm-tied-halve1-wd1e-05-c0.5-seed123[56]' \
  --only 'hornn3-*-tied-wd1e-05-*-seed123[56]'
sweep research/sweeps/ptb_recipe_dropout_knobs.toml
sweep configs/sweeps/ptb_chosen.toml \
  --only 'rnn-drop0.2-tied-fixed10-alpha0.2-seed123[56]' \
  --only 'hornn3-fofe-tied-drop0.2-fixed10-alpha0.2-seed123[56]'
sweep research/sweeps/ptb_recipe_equal_knobs.toml
