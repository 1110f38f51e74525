#!/bin/bash
# Train across Slurm nodes: one `accelerate launch` per node, each starting one rank per GPU.
#
#   sbatch launch/slurm.sh configs/wikitext103.toml [--set section.key=value ...]
#   sbatch --nodes=4 --time=48:00:00 launch/slurm.sh configs/text8.toml
#
# Requeue-friendly. 120 s before the time limit Slurm sends SIGTERM to every rank
# (--signal=TERM@120); the trainer finishes its step, writes a checkpoint and exits. This
# script then sees the limit is near and requeues the job, and the rerun, which is the same
# command, resumes from the newest complete checkpoint in train.output_dir. A run that ends
# normally (or fails) early is not requeued.
# The job may come back with another number of nodes or GPUs when it divides
# train.batch_size: the carried hidden histories are re-split across the new ranks.
# Within the job, a rank that dies (a crash, an out-of-memory kill) is restarted with the
# others of its node up to MAX_RESTARTS times (torchrun's --max_restarts, default 2): they
# resume from the newest complete checkpoint by themselves.
#
# Needs: train.output_dir (and data.cache_dir) on a filesystem every node shares; the
# environment with hornn_dist installed active in the shell that calls sbatch (exported to
# the job), or activate it below.
#
#SBATCH --job-name=hornn
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=32
#SBATCH --time=24:00:00
#SBATCH --signal=TERM@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out

set -euo pipefail

CONFIG=${1:?usage: sbatch launch/slurm.sh CONFIG.toml [--set section.key=value ...]}
shift

if [[ ! -f launch/multinode.yaml ]]; then
    echo "error: submit from the hornn_dist repository root (no launch/multinode.yaml in $PWD)" >&2
    exit 2
fi

GPUS_PER_NODE=${GPUS_PER_NODE:-8}
MAX_REQUEUES=${MAX_REQUEUES:-50}
export MAX_RESTARTS=${MAX_RESTARTS:-2}  # torchrun's restarts of a node's ranks within the job
# Requeue when srun returns with at most this many seconds left (the signal comes at 120).
REQUEUE_WINDOW=${REQUEUE_WINDOW:-300}

# `accelerate launch` runs torchrun's agent, which forwards SIGTERM to its ranks and kills
# them with SIGKILL this many seconds later (torch's default is 30). Leave the trainer
# nearly all of the 120 s to finish its step and write the checkpoint.
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=${TORCH_ELASTIC_SHUTDOWN_TIMEOUT:-110}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
export TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1

mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
export MAIN_IP=${MAIN_IP:-${NODES[0]}}
export MAIN_PORT=${MAIN_PORT:-$((20000 + SLURM_JOB_ID % 20000))}
export NUM_MACHINES=${SLURM_NNODES:-${#NODES[@]}}
export NUM_PROCESSES=$((NUM_MACHINES * GPUS_PER_NODE))

echo "$(date -Is) job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}):" \
    "$NUM_MACHINES nodes x $GPUS_PER_NODE GPUs, main $MAIN_IP:$MAIN_PORT, config $CONFIG $*"

# Seconds until the job's time limit, from squeue's %L ([days-][hours:]minutes:seconds);
# a large number when Slurm reports none (UNLIMITED, NOT_SET).
seconds_left() {
    local left
    left=$(squeue -h -j "$SLURM_JOB_ID" -o %L 2>/dev/null || true)
    if [[ $left =~ ^(([0-9]+)-)?(([0-9]+):)?([0-9]+):([0-9]+)$ ]]; then
        echo $((10#${BASH_REMATCH[2]:-0} * 86400 + 10#${BASH_REMATCH[4]:-0} * 3600 \
            + 10#${BASH_REMATCH[5]} * 60 + 10#${BASH_REMATCH[6]}))
    else
        echo 999999
    fi
}

# One task per node; $SLURM_NODEID is expanded inside each task, so every node gets its own
# --machine_rank. The command-line flags override multinode.yaml's 2 x 8 shape and its
# placeholder address. --cpus-per-task is repeated because srun 22.05+ does not inherit it.
# --kill-on-bad-exit=0: on SIGTERM torchrun's agent exits 1 (SignalException) even when its
# ranks checkpointed and exited 0; do not let that kill other nodes mid-save. Whether to
# requeue is read from the time left below, never from that status
# (tests/test_slurm_script.py).
set +e
srun --kill-on-bad-exit=0 --ntasks-per-node=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" bash -c '
    exec accelerate launch --config_file launch/multinode.yaml \
        --num_machines "$NUM_MACHINES" --num_processes "$NUM_PROCESSES" \
        --machine_rank "$SLURM_NODEID" \
        --main_process_ip "$MAIN_IP" --main_process_port "$MAIN_PORT" \
        --max_restarts "$MAX_RESTARTS" -m hornn_dist.train "$@"
' bash "$CONFIG" "$@"
status=$?
set -e

left=$(seconds_left)
if ((left <= REQUEUE_WINDOW)); then
    if ((${SLURM_RESTART_COUNT:-0} < MAX_REQUEUES)); then
        echo "$(date -Is) ${left}s left: requeueing job $SLURM_JOB_ID to resume from its checkpoint"
        scontrol requeue "$SLURM_JOB_ID"
        exit 0
    fi
    echo "$(date -Is) not requeueing: already restarted ${SLURM_RESTART_COUNT:-0} times" >&2
fi
echo "$(date -Is) training exited with status $status (${left}s of the time limit left)"
exit "$status"
