#!/usr/bin/env bash
# Train sweeps of runs on one CUDA GPU, many at once, each run its own process (the sweep
# runner trains one run per GPU; one run at H 128, or H 400 at B 20, leaves an H100/H200 mostly
# idle), in a queue of priority with a deadline; then score the test split of the runs the
# deadline stopped, write the sweeps' reports and pack the record data into $OUT/grids.tgz
# (with $OUT/summary.txt beside it):
#
#   OUT=/some/folder bash research/gpu/gpu_grids.sh                       # hard stop at 480 s
#   GRIDS="demo_alpha demo_dropout" GRIDS_SECONDS=480 OUT=... bash research/gpu/gpu_grids.sh
#
# GRIDS: the queue, items "SWEEP" or "SWEEP:REGEX" (a sweep file under research/sweeps/ or
# configs/sweeps/; REGEX, bash's extended regex, picks the runs whose names match). Runs start in
# the queue's order, each at its first item; a sweep may appear in several items (its best runs
# first).
# GRIDS_JOBS: runs at once (0, the default: all of them); GRIDS_JOBS_NO_MPS: runs at once where
# MPS is not running (default GRIDS_JOBS): without MPS the processes' kernels take turns on the
# GPU, so fewer at once finish more of the first ones. GRIDS_MIN_RUN_SECONDS: no run starts
# with less than this left before the deadline (default 0).
# GRIDS_SET="k=v ..." adds overrides to every run (a quick try: GRIDS_SET="train.max_steps=5").
# GRIDS_MATCH="REGEX" trains only the runs whose name matches (the others' records come from
# elsewhere, e.g. a grid widened after part of it trained).
# GRIDS_SKIP_RECORDED="DIR ..." leaves out each run a record of an earlier call holds finished
# at the recipe planned now (DIR/SWEEP/NAME/, as research/tools/collect_runs.sh keeps runs): a
# fresh machine has none of the runs an earlier machine trained, and the summary names each run
# left out and the record that holds it.
# GRIDS_REFERENCE=1 also trains the order-1 RNN of configs/demo.toml (the reference a ratio
# needs) into runs/sweeps/gpu_reference/rnn, last in the queue.
# At GRIDS_SECONDS (from the script's start) every run still training gets SIGTERM: it
# checkpoints and stops (SIGKILL after GRIDS_STOP_GRACE seconds, default 30). With GRIDS_FINISH=1
# (default) each run stopped so gets the test split scored on its best checkpoint by validation
# so far (`evaluate RUN/checkpoints/best --split test`; console logs/SWEEP--NAME.test.console),
# at most GRIDS_FINISH_JOBS (default: the cores) at once within GRIDS_FINISH_SECONDS (default
# 60); the run itself stays unfinished, so no report takes it for a converged run, and the sweep
# command run later resumes it.
# GRIDS_REPORT_SECONDS (default 60) bounds the sweeps' reports, written all at once.
# The shards must be there already (carry them): the device image has no `datasets`. MPS, when
# the machine has it, lets the processes' kernels overlap. The commit recorded is
# `git rev-parse HEAD`, else the first line of GRIDS_COMMIT_FILE (default gpu_carry/commit.txt,
# written before the call where the copy has no .git; its further lines, git status, are kept).
set -u
OUT=${OUT:?set OUT to the folder for the results}
mkdir -p "$OUT"  # the device makes $OUT; a try on a CPU may name a folder not made yet
GRIDS=${GRIDS:-"demo_alpha demo_dropout"}
GRIDS_SECONDS=${GRIDS_SECONDS:-480}
GRIDS_REFERENCE=${GRIDS_REFERENCE:-1}
GRIDS_JOBS=${GRIDS_JOBS:-0}
GRIDS_JOBS_NO_MPS=${GRIDS_JOBS_NO_MPS:-$GRIDS_JOBS}
GRIDS_MIN_RUN_SECONDS=${GRIDS_MIN_RUN_SECONDS:-0}
GRIDS_STOP_GRACE=${GRIDS_STOP_GRACE:-30}
GRIDS_FINISH=${GRIDS_FINISH:-1}
GRIDS_FINISH_JOBS=${GRIDS_FINISH_JOBS:-$(nproc)}
GRIDS_FINISH_SECONDS=${GRIDS_FINISH_SECONDS:-60}
GRIDS_COMMIT_FILE=${GRIDS_COMMIT_FILE:-gpu_carry/commit.txt}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
sets=(); for kv in ${GRIDS_SET:-}; do sets+=(--set "$kv"); done
PY=${PYTHON:-python3}
started=$(date +%s)
work=$(mktemp -d)  # logs and the pack; only grids.tgz and summary.txt go to $OUT (8 files at most)
logs=$work/logs
mkdir -p "$logs"
summary=$OUT/summary.txt
elapsed() { echo "$(($(date +%s) - started))"; }
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY -c "import torch, accelerate; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'accelerate', accelerate.__version__)"
  echo "cpu cores: $(nproc --all)"
  if commit=$(git rev-parse HEAD 2> /dev/null); then
    echo "commit: $commit (git)"; git status --porcelain | sed 's/^/  status: /'
  elif [ -f "$GRIDS_COMMIT_FILE" ]; then
    echo "commit: $(head -1 "$GRIDS_COMMIT_FILE") ($GRIDS_COMMIT_FILE)"; tail -n +2 "$GRIDS_COMMIT_FILE" | sed 's/^/  status: /'
  else
    echo "commit: unknown (no .git, no $GRIDS_COMMIT_FILE)"
  fi
  echo "command: GRIDS=\"$GRIDS\" GRIDS_SECONDS=$GRIDS_SECONDS GRIDS_JOBS=$GRIDS_JOBS GRIDS_JOBS_NO_MPS=$GRIDS_JOBS_NO_MPS GRIDS_SET=\"${GRIDS_SET:-}\" GRIDS_MATCH=\"${GRIDS_MATCH:-}\" GRIDS_SKIP_RECORDED=\"${GRIDS_SKIP_RECORDED:-}\" GRIDS_REFERENCE=$GRIDS_REFERENCE GRIDS_FINISH=$GRIDS_FINISH bash research/gpu/gpu_grids.sh"
} > "$summary" 2>&1
nvidia-smi > "$logs/nvidia-smi.txt" 2>&1

mps=0
if command -v nvidia-cuda-mps-control > /dev/null && nvidia-cuda-mps-control -d 2> /dev/null; then
  if $PY -c "import torch; torch.zeros(1, device='cuda')" 2> /dev/null; then
    mps=1; echo "mps: on" >> "$summary"
  else
    echo quit | nvidia-cuda-mps-control; echo "mps: failed its check, off" >> "$summary"
  fi
else
  echo "mps: not available" >> "$summary"
fi
jobs=$GRIDS_JOBS; [ "$mps" = 1 ] || jobs=$GRIDS_JOBS_NO_MPS

# The queue: every item's runs in the planner's order, each run once, at its first item.
read -rd '' -a items <<< "$GRIDS"  # split on blanks and lines, never globbed (REGEX: [ ] * ?)
sweeps=(); for item in "${items[@]}"; do
  s=${item%%:*}; [[ " ${sweeps[*]} " == *" $s "* ]] || sweeps+=("$s")
done
files=(); for s in "${sweeps[@]}"; do  # the search's sweep file, else the product's
  f=research/sweeps/$s.toml; [ -f "$f" ] || f=configs/sweeps/$s.toml; files+=("$f")
done
skip=(); for d in ${GRIDS_SKIP_RECORDED:-}; do skip+=(--skip-recorded "$d"); done
$PY research/gpu/grid_runs.py list "${files[@]}" "${sets[@]}" "${skip[@]}" > "$logs/runs.tsv" 2> "$logs/list.err" \
  || echo "listing the runs failed: $(tail -1 "$logs/list.err")" >> "$summary"
grep '^recorded: ' "$logs/list.err" | sed 's|$| (finished there: not trained again)|' >> "$summary"
names=(); commands=()
declare -A queued=()
for item in "${items[@]}"; do
  s=${item%%:*}; pattern=.; [[ $item == *:* ]] && pattern=${item#*:}
  while IFS=$'\t' read -r sweep name command; do
    [ "$sweep" = "$s" ] && [[ $name =~ $pattern ]] && [[ $name =~ ${GRIDS_MATCH:-.} ]] || continue
    [ -z "${queued[$s/$name]:-}" ] || continue
    queued[$s/$name]=1; names+=("$s/$name"); commands+=("$command")
  done < "$logs/runs.tsv"
done
if [ "$GRIDS_REFERENCE" = 1 ]; then
  names+=(gpu_reference/rnn)
  commands+=("$PY -m hornn_dist.train configs/demo.toml --set train.epochs=60 --set train.checkpoint_every=0 --set log.every=400 --set model.order=1 --set 'model.pooling=\"sum\"' --set train.output_dir=runs/sweeps/gpu_reference/rnn ${sets[*]@Q}")
fi
echo "queue: ${#names[@]} runs, ${jobs/#0/all} at once, listed at $(elapsed) s" >> "$summary"

# run_queue DEADLINE JOBS MIN_LEFT SUFFIX: start names/commands in order, at most JOBS alive
# (0: no limit), none with less than MIN_LEFT s to DEADLINE; at DEADLINE SIGTERM, after
# GRIDS_STOP_GRACE s SIGKILL; each exit code goes to the summary.
run_queue() {
  local deadline=$1 most=$2 min_left=$3 suffix=$4 next=0 alive now pid i
  local -a pids=() started_names=()
  while :; do
    now=$(date +%s); alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2> /dev/null && alive=$((alive + 1)); done
    while ((next < ${#names[@]} && now < deadline && deadline - now >= min_left)) \
      && ((most == 0 || alive < most)); do
      # the command's own words after eval; a simple command, so $! is the run's own process
      eval "${commands[next]} > \"\$logs/\${names[next]//\//--}$suffix.console\" 2>&1 &"
      pids+=($!); started_names+=("${names[next]}"); next=$((next + 1)); alive=$((alive + 1))
      echo "start ${names[next - 1]}$suffix at $(elapsed) s" >> "$summary"
    done
    ((alive == 0 && (next >= ${#names[@]} || deadline - now < min_left))) && break
    if ((now >= deadline)); then
      echo "deadline at $(elapsed) s: SIGTERM to $alive run(s)" >> "$summary"
      for pid in "${pids[@]}"; do kill -TERM "$pid" 2> /dev/null; done
      for ((i = 0; i < GRIDS_STOP_GRACE; i++)); do
        alive=0; for pid in "${pids[@]}"; do kill -0 "$pid" 2> /dev/null && alive=$((alive + 1)); done
        ((alive == 0)) && break; sleep 1
      done
      for pid in "${pids[@]}"; do kill -KILL "$pid" 2> /dev/null && echo "SIGKILL $pid" >> "$summary"; done
      break
    fi
    sleep 1
  done
  for i in "${!pids[@]}"; do
    wait "${pids[i]}"; echo "end ${started_names[i]}$suffix: exit $? at $(elapsed) s" >> "$summary"
  done
  for ((i = next; i < ${#names[@]}; i++)); do echo "not started: ${names[i]}$suffix" >> "$summary"; done
}
run_queue $((started + GRIDS_SECONDS)) "$jobs" "$GRIDS_MIN_RUN_SECONDS" ""
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv >> "$summary" 2>&1

if [ "$GRIDS_FINISH" = 1 ]; then  # the stopped runs: the test split on their best checkpoint
  names=(); commands=()
  while IFS=$'\t' read -r s name folder step; do
    names+=("$s/$name"); commands+=("$PY -m hornn_dist.evaluate $folder/checkpoints/best --split test")
    echo "stopped $s/$name at step $step" >> "$summary"
  done < <($PY research/gpu/grid_runs.py stopped "${files[@]}" "${sets[@]}" 2>> "$logs/list.err")
  echo "scoring ${#names[@]} stopped run(s) at $(elapsed) s" >> "$summary"
  run_queue $(($(date +%s) + GRIDS_FINISH_SECONDS)) "$GRIDS_FINISH_JOBS" 0 ".test"
fi
[ "$mps" = 1 ] && echo quit | nvidia-cuda-mps-control

pack=$work/pack
mkdir -p "$pack"
reports=()  # all at once, each within GRIDS_REPORT_SECONDS, so that the script's end stays known
for sweep in "${sweeps[@]}"; do
  [ -f "runs/sweeps/$sweep/sweep.json" ] || continue  # its listing failed (summary.txt says why)
  timeout "${GRIDS_REPORT_SECONDS:-60}" $PY -m hornn_dist.report "runs/sweeps/$sweep" \
    > "$logs/report-$sweep.log" 2>&1 &
  reports+=("$!:$sweep")
done
for item in "${reports[@]}"; do
  wait "${item%%:*}"; echo "report ${item#*:}: exit $? at $(elapsed) s" >> "$summary"
  $PY research/records/2026-11-27-cpu-converged/collect.py "runs/sweeps/${item#*:}" "$pack/${item#*:}"
done
if [ "$GRIDS_REFERENCE" = 1 ] && [ -d runs/sweeps/gpu_reference/rnn ]; then
  mkdir -p "$pack/gpu_reference/runs/rnn"
  run=runs/sweeps/gpu_reference/rnn
  cp "$run/config.toml" "$run/metrics.jsonl" "$run/train.log" "$pack/gpu_reference/runs/rnn/"
  cp "$(ls -d "$run"/checkpoints/step_* | sort | tail -1)/trainer_state.json" "$pack/gpu_reference/runs/rnn/"
fi
cp "$0" research/gpu/grid_runs.py "$pack/"
for script in ${GRIDS_PACK_SCRIPTS:-}; do cp "$script" "$pack/"; done
[ -f "$GRIDS_COMMIT_FILE" ] && cp "$GRIDS_COMMIT_FILE" "$pack/"
echo "done at $(elapsed) s, $(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$summary"
cp -r "$logs" "$pack/logs"
cp "$summary" "$pack/"
tar czf "$OUT/grids.tgz" -C "$pack" .
rm -rf "$work"
cat "$summary"
