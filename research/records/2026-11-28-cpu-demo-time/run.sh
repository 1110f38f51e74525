#!/usr/bin/env bash
# Time README's demo command whole (install in a new venv on a clean clone, then the demo run),
# then the demo run alone twice more in that venv, on an otherwise idle machine; write each
# run's train.log and the times here. Usage: bash research/records/2026-11-28-cpu-demo-time/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
git clone -q "$repo" "$work/clone"
cd "$work/clone"
{
  echo "commit: $(git rev-parse HEAD)"
  echo "date: $(date -u +%FT%TZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') (family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), model $(grep -m1 '^model[[:space:]]' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')), $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "threads: train.cpu_threads auto (1 thread: OMP_NUM_THREADS unset)"
} > "$here/times.txt"
python -m venv .venv
source .venv/bin/activate
start=$(date +%s.%N)
pip install -q -c constraints.txt torch==2.13.0 && pip install -q -c constraints.txt -e . && python -m hornn_dist.train configs/demo.toml 2> "$here/whole_command.log"
end=$(date +%s.%N)
echo "README command whole (install + demo): $(python -c "print(f'{$end - $start:.0f} s')")" >> "$here/times.txt"
cp runs/demo/train.log "$here/train_whole.log"
for i in 1 2; do
  start=$(date +%s.%N)
  python -m hornn_dist.train configs/demo.toml --no-resume 2> "$here/demo_$i.log"
  end=$(date +%s.%N)
  echo "demo run alone, try $i: $(python -c "print(f'{$end - $start:.0f} s')")" >> "$here/times.txt"
done
grep -h "training ended\|test:" "$here"/demo_*.log "$here/whole_command.log" | sed 's/^/  /' >> "$here/times.txt"
rm -rf "$work"
