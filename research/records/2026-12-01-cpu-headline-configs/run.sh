#!/bin/bash
# One epoch of PTB for each shipped large-corpus config at its own size and recipe (only the
# corpus changed: PTB's files, every word kept as PTB has its own <unk>), one thread each, one
# at a time; each run's events, log, config and trainer state are copied beside this script.
#   bash research/records/2026-12-01-cpu-headline-configs/run.sh /work/shared/data/ptb
set -u
cd "$(dirname "$0")/../../.."
record="$(dirname "$0")"
ptb="$1"
echo "commit $(git rev-parse --short HEAD) ($(git status --porcelain -- hornn_dist configs | wc -l) changed package/config files), $(date -u '+%Y-%m-%d %H:%M UTC')" > "$record/machine.txt"
grep -m1 "model name" /proc/cpuinfo >> "$record/machine.txt"
python -c "import torch; print('torch', torch.__version__)" >> "$record/machine.txt"
for name in text8 text8_rnn text8_lstm wikitext103_rnn wikitext103_lstm wikitext103; do
  out="runs/headline/$name"
  OMP_NUM_THREADS=1 nice -n 15 python -m hornn_dist.train "configs/$name.toml" \
    --set 'data.preset="ptb"' --set "data.path=$ptb" --set data.min_count=1 \
    --set train.epochs=1 --set train.cpu_threads=1 --set "train.output_dir=$out" \
    --set train.checkpoint_every=0 > /dev/null 2>&1
  echo "$name exit $?" >> "$record/machine.txt"
  mkdir -p "$record/$name"
  cp "$out/metrics.jsonl" "$out/train.log" "$out/config.toml" "$record/$name/" 2>/dev/null
  newest=$(ls -d "$out"/checkpoints/step_* 2>/dev/null | tail -1)
  [ -n "$newest" ] && cp "$newest/trainer_state.json" "$record/$name/"
done
