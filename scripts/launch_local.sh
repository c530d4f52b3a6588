#!/usr/bin/env bash
# Start NPROC copies of a Python program or module as one distributed job on this machine,
# the way the classic launch scripts do: every process gets its RANK and LOCAL_RANK, all
# share WORLD_SIZE, MASTER_ADDR and MASTER_PORT. The script waits for them, and when one
# fails it stops the others.
#
#   scripts/launch_local.sh NPROC PROGRAM.py|MODULE [ARGS...]
#   scripts/launch_local.sh 2 programs/ddp_mnist.py
#   scripts/launch_local.sh 2 workers.ddp_mnist ddp --epochs 1
#
# PYTHON names the interpreter (default: python on the PATH, e.g. an activated virtualenv).
set -euo pipefail

((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 403)) || {  # wait -n came with bash 4.3
    echo "$0 needs bash 4.3 or newer (for wait -n), not $BASH_VERSION" >&2; exit 2; }
if [[ $# -lt 2 || ! $1 =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 NPROC PROGRAM.py|MODULE [ARGS...]  (NPROC a whole number of at least 1)" >&2
    exit 2
fi
nproc=$1
if [[ $2 == *.py ]]; then target=("$2"); else target=(-m "$2"); fi
shift 2

export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
export MASTER_PORT=${MASTER_PORT:-29500}
export WORLD_SIZE=$nproc LOCAL_WORLD_SIZE=$nproc
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export LAUNCHER_PID=$$  # the book's workers stop by themselves if this script is killed

# Ctrl-C or a plain kill (SIGTERM) of this script stops every rank it started;
# kill -9 runs no trap, and a program's ranks then run on.
trap 'kill -- $(jobs -p) 2>/dev/null' INT TERM

for ((rank = 0; rank < nproc; rank++)); do
    RANK=$rank LOCAL_RANK=$rank "${PYTHON:-python}" "${target[@]}" "$@" &
done

# wait -n returns as soon as any rank exits. A plain `wait` would wait for every rank, and
# one that waits for a failed peer would keep the job alive until its timeout.
status=0
for ((left = nproc; left > 0; left--)); do
    wait -n || { status=$?; break; }
done
if ((status != 0)); then
    echo "launch_local.sh: a rank exited with code $status; stopping the others" >&2
    kill -- $(jobs -p) 2>/dev/null || true
    wait || true
fi
exit "$status"
