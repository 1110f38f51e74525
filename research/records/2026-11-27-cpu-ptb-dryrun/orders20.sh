#!/usr/bin/env bash
# Orders 2 and 4 of each pooling at H 400 on PTB: train until the log's step-20 line, then SIGTERM
# (the trainer finishes its step, checkpoints, exits 0); two at a time. No final validation or
# test: on this CPU those take minutes at V = 10,000, and they are the same code for every model.
cd /tmp/devcopy
export PYTHONPATH=/tmp/devcopy:/tmp/nodatasets OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
python3 research/gpu/grid_runs.py list configs/sweeps/ptb_orders.toml --set data.path=gpu_carry/ptb \
  --set data.cache_dir=gpu_carry/data_cache --set log.every=20 --set log.tensorboard=false \
  | grep -P '\thornn[24]-' | grep -v -P '\thornn2-sum\t' > /tmp/ptbdry/orders20.tsv
one() {  # one NAME COMMAND: train to step 20, SIGTERM, report
  local name=$1 log=runs/sweeps/ptb_orders/$1/train.log
  eval "nice -n 10 $2 > /tmp/ptbdry/orders20-$name.console 2>&1 &"; local pid=$!
  until grep -q "INFO step 20:" "$log" 2> /dev/null || ! kill -0 $pid 2> /dev/null; do sleep 1; done
  kill -TERM $pid 2> /dev/null; wait $pid; local rc=$?
  echo "$name: exit $rc; $(grep -m1 'parameters' "$log" | grep -o 'hornn/[a-z]* order [0-9].*parameters' ); $(grep 'INFO step 20:' "$log" | cut -c10-); $(grep 'training ended' "$log" | cut -c10-)"
}
while IFS=$'\t' read -r sweep name command; do
  one "$name" "$command" &
  (( $(jobs -rp | wc -l) >= 2 )) && wait -n
done < /tmp/ptbdry/orders20.tsv
wait
