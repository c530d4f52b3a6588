#!/usr/bin/env bash
# Start NPROC copies of a Python module as one distributed job on this machine, the way
# the classic launch scripts do: every process gets its RANK and LOCAL_RANK, all share
# WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and the script waits for every one of them.
#
#   scripts/launch_local.sh NPROC MODULE [ARGS...]
#   scripts/launch_local.sh 2 workers.ddp_mnist ddp --epochs 1
#
# PYTHON names the interpreter (default: python on the PATH, e.g. an activated virtualenv).
set -euo pipefail

if [[ $# -lt 2 || ! $1 =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 NPROC MODULE [ARGS...]  (NPROC a whole number of at least 1)" >&2
    exit 2
fi
nproc=$1
module=$2
shift 2

export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
export MASTER_PORT=${MASTER_PORT:-29500}
export WORLD_SIZE=$nproc LOCAL_WORLD_SIZE=$nproc
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export LAUNCHER_PID=$$  # the book's workers stop by themselves if this script is killed

# Ctrl-C or a kill of this script stops every rank it started.
trap 'kill -- $(jobs -p) 2>/dev/null' INT TERM

pids=()
for ((rank = 0; rank < nproc; rank++)); do
    RANK=$rank LOCAL_RANK=$rank "${PYTHON:-python}" -m "$module" "$@" &
    pids+=($!)
done

status=0
for pid in "${pids[@]}"; do
    wait "$pid" || status=$?  # remember a failure, but wait for every rank
done
exit "$status"
