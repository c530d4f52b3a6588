#!/usr/bin/env bash
# A two-node Slurm cluster on this one machine, to try the book's Slurm script for real:
# munged (with a key of its own), the controller slurmctld, and two slurmd, "node1" and
# "node2", both on 127.0.0.1. A Slurm or munge already set up here is left alone: every
# file lives in $LOCAL_SLURM_DIR (default /run/local-slurm), the commands find this cluster
# through SLURM_CONF, and it listens on port $LOCAL_SLURM_PORT (default 17000, the
# controller) and the two after it (the nodes).
#
#   scripts/local_slurm.sh start    start it; says which SLURM_CONF to export
#   scripts/local_slurm.sh stop     end its jobs, stop every daemon: nothing is left running
#   scripts/local_slurm.sh status   its nodes, or one line saying no controller answers
#   scripts/local_slurm.sh check    exit 0 if this machine can run it, else say why (a line)
#   scripts/local_slurm.sh run JOB.sbatch [ARGS...]
#       sbatch JOB.sbatch ARGS in the clone's root, show the job's output as it is written
#       and its final state, and exit 0 only if it COMPLETED; starts the cluster first and
#       stops it after when it was not running
#
# Needs root (slurmd starts each job as the user who submitted it) and Slurm built with
# multiple-slurmd support, as Debian's is (Debian 12 has Slurm 22.05):
#
#   apt-get install --no-install-recommends slurmctld slurmd slurm-client munge
#   scripts/local_slurm.sh run scripts/slurm_ddp_mnist.sbatch --epochs 1
#
# or, to submit jobs yourself:
#
#   scripts/local_slurm.sh start && export SLURM_CONF=/run/local-slurm/slurm.conf
#   sbatch scripts/slurm_ddp_mnist.sbatch --epochs 1; squeue; cat ddp-mnist-*.out
#   scripts/local_slurm.sh stop
set -uo pipefail

dir=${LOCAL_SLURM_DIR:-/run/local-slurm}
port=${LOCAL_SLURM_PORT:-17000}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)  # the clone
export SLURM_CONF=$dir/slurm.conf
daemons=(munged slurmctld slurmd-node1 slurmd-node2)  # each writes $dir/NAME.pid

say() { echo "local_slurm: $*"; }
fail() { echo "local_slurm: $*" >&2; exit 1; }

why_not() {  # one line saying why this machine cannot run the cluster, or nothing
    local missing=()
    for command in munged slurmctld slurmd sbatch; do
        # the daemons live in /usr/sbin, which a user's PATH often leaves out
        PATH="$PATH:/usr/sbin:/sbin" command -v "$command" >/dev/null 2>&1 \
            || missing+=("$command")
    done
    if (( ${#missing[@]} )); then
        echo "Slurm is not installed here (no ${missing[*]}): see scripts/local_slurm.sh"
    elif (( EUID != 0 )); then
        echo "Slurm is installed, but a local cluster needs root" \
             "(slurmd starts each job as its user)"
    fi
}

running() {  # the pid of daemon $1 if it runs, else nothing
    local pid
    pid=$(cat "$dir/$1.pid" 2>/dev/null) || return 1
    [[ -n $pid && -d /proc/$pid ]] && grep -q "^${1%%-*}" "/proc/$pid/comm" && echo "$pid"
}

answers() { [[ -f $SLURM_CONF ]] && scontrol ping 2>/dev/null | grep -q "is UP"; }

write_config() {
    local host cpus
    host=$(hostname -s)
    cpus=$(( $(nproc) > 2 ? $(nproc) : 2 ))  # the book's script asks for 2 per node
    cat >"$dir/slurm.conf" <<EOF
# written by scripts/local_slurm.sh: two nodes on this one host ($host)
ClusterName=local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=300
MessageTimeout=5
InactiveLimit=0
KillWait=5
MinJobAge=300
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=node[1-2] NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 1))-$((port + 2)) \
    CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
    local reason
    reason=$(why_not)
    [[ -z $reason ]] || fail "$reason"
    # a node daemon makes a Unix socket per job step under $dir/spool-NODE/, named like
    # node1_1234567.4294967291, and such a path may not exceed 107 bytes
    (( ${#dir} <= 64 )) || fail "LOCAL_SLURM_DIR is ${#dir} characters ($dir): the node" \
        "daemons' socket paths under it would pass Linux's 108-byte limit; name a folder of" \
        "at most 64"
    if answers; then say "already running (export SLURM_CONF=$SLURM_CONF)"; return 0; fi
    stop >/dev/null  # whatever is left of an earlier cluster
    rm -rf "$dir"/{state,spool-node1,spool-node2,jobs} "$dir"/*.{log,pid,out} "$dir"/munge.*
    mkdir -p -m 0755 "$dir" "$dir/state" || fail "cannot create $dir"
    write_config
    # munge: a fresh key, and its own socket, so a munged already running is left alone
    dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
    chmod 0400 "$dir/munge.key"
    # The daemons' own output goes to files: none may keep the caller's pipes open.
    munged --force --key-file="$dir/munge.key" --socket="$dir/munge.socket" \
        --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" \
        --seed-file="$dir/munged.seed" </dev/null >"$dir/munged.out" 2>&1 \
        || not_started "munged did not start: $(tail -n 1 "$dir/munged.out")"
    slurmctld -i </dev/null >"$dir/slurmctld.out" 2>&1 \
        || not_started "slurmctld did not start: see $dir/slurmctld.log"
    for node in node1 node2; do
        slurmd -N "$node" </dev/null >"$dir/slurmd-$node.out" 2>&1 \
            || not_started "slurmd -N $node did not start: see $dir/slurmd-$node.log"
    done
    # ready when both nodes are idle (each slurmd registers with the controller)
    for _ in $(seq 300); do
        if [[ $(sinfo --noheader --states=idle --format=%D 2>/dev/null) == 2 ]]; then
            say "two nodes up (node1, node2); export SLURM_CONF=$SLURM_CONF"
            return 0
        fi
        sleep 0.1
    done
    not_started "the nodes did not come up in 30 s: see $dir/*.log"
}

not_started() { stop >/dev/null; fail "$1"; }

stop() {  # "stop now": kill at once (a run interrupted), else end jobs, then daemons
    local now=${1:-} pids=() pid name
    if [[ -n $now ]]; then
        for name in "${daemons[@]}"; do
            pid=$(running "$name") && kill -KILL "$pid" 2>/dev/null
        done
        # again until none is left: a rank that its agent started while the first list
        # was read is not in it
        for _ in $(seq 30); do
            pids=($(steps))
            (( ${#pids[@]} )) || break
            kill -KILL "${pids[@]}" 2>/dev/null
            sleep 0.1
        done
        return 0
    fi
    if answers; then  # a slurmd that stops leaves its jobs running
        scancel --partition=local 2>/dev/null
        for _ in $(seq 100); do
            [[ -z $(squeue --noheader --format=%i 2>/dev/null) ]] && break
            sleep 0.1
        done
    fi
    for name in "${daemons[@]}"; do
        pid=$(running "$name") && pids+=("$pid")
    done
    pids+=($(steps))  # job steps and jobs, whose slurmd is gone or stopping
    (( ${#pids[@]} )) || { say "not running"; return 0; }
    kill -TERM "${pids[@]}" 2>/dev/null
    for _ in $(seq 50); do
        alive "${pids[@]}" || break
        sleep 0.1
    done
    for name in "${daemons[@]}"; do  # any that did not stop
        pid=$(running "$name") && kill -KILL "$pid" 2>/dev/null
    done
    kill -KILL $(steps) 2>/dev/null  # and whatever is left of a job
    say "stopped (${#pids[@]} processes)"
}

alive() {  # whether any of the pids still runs
    local pid
    for pid; do [[ -d /proc/$pid ]] && return 0; done
    return 1
}

steps() {  # this cluster's job steps and jobs: slurmstepd, and every process of a job
    local file pid
    # they inherit SLURM_CONF (slurmstepd from slurmd, a job from sbatch); a job's have a
    # SLURM_JOB_ID too, which a shell that exported SLURM_CONF to submit jobs has not
    for file in $(grep -lzx "SLURM_CONF=$SLURM_CONF" /proc/[0-9]*/environ 2>/dev/null); do
        pid=${file#/proc/}
        pid=${pid%/environ}
        (( pid == $$ )) && continue
        if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == slurmstepd ]] \
            || grep -qz "^SLURM_JOB_ID=" "$file" 2>/dev/null; then
            echo "$pid"
        fi
    done
}

status() {
    answers || fail "no Slurm controller answers at $SLURM_CONF (start one: $0 start)"
    sinfo --Node --format="%N %T %c"
}

job_state() {  # PENDING (Resources), RUNNING, ...: a job's state and why
    squeue --noheader --jobs="$1" --format='%T (%r)' 2>/dev/null || echo unknown
}

run_job() {
    local job=$1 started_here=0 jobid output state code tail_pid waited
    shift
    [[ -f $job ]] || job=$root/$job  # a path from here, or from the clone's root
    [[ -f $job ]] || fail "no job script $job"
    if ! answers; then
        start >/dev/null || exit 1
        started_here=1
    fi
    # the job runs in the clone's root with its environment, as if activated before sbatch
    [[ -x $root/.venv/bin/torchrun ]] && export PATH=$root/.venv/bin:$PATH
    mkdir -p "$dir/jobs"
    jobid=$(sbatch --parsable --chdir="$root" --output="$dir/jobs/%x-%j.out" "$job" "$@") \
        || { (( started_here )) && stop >/dev/null; exit 1; }
    jobid=${jobid%%;*}
    # interrupted (Ctrl-C, or a notebook's timeout, which allows 3 s): end it all at once
    trap 'say "interrupted while job $jobid was $(job_state "$jobid")"
          if (( started_here )); then stop now; else scancel "$jobid"; fi; exit 143' TERM INT
    say "submitted job $jobid: $(sinfo --noheader --format='%D nodes (%N), %c CPUs each')"
    output=$(scontrol show job "$jobid" | sed -n 's/^ *StdOut=//p')
    tail -n +1 -F "$output" 2>/dev/null &  # the job's output while it is written
    tail_pid=$!
    waited=0
    while [[ -n $(squeue --noheader --jobs="$jobid" --format=%i 2>/dev/null) ]]; do
        sleep 0.2
        (( ++waited % 25 == 0 )) || continue  # every 5 s: is it held, or waiting on nodes?
        state=$(job_state "$jobid")
        if [[ $state == *"launch failed"* ]]; then  # held: it would wait for ever
            say "job $jobid could not be launched; the node daemon said:" \
                "$(grep -h "\[$jobid\.batch\] \(error\|fatal\)" "$dir"/slurmd-*.log \
                   | head -n 1 | sed 's/^\[[^]]*\] //')" >&2
            scancel "$jobid"
        elif (( waited == 150 )) && [[ $state == PENDING* ]]; then
            say "job $jobid is still $state after 30 s; the nodes:" \
                "$(sinfo --noheader --Node --format='%N %T %E' | paste -sd';')" >&2
        fi
    done
    sleep 0.3  # tail's last lines
    kill "$tail_pid" 2>/dev/null
    wait "$tail_pid" 2>/dev/null
    read -r state code < <(scontrol show job "$jobid" 2>/dev/null \
        | grep -o 'JobState=[A-Z_]*\|ExitCode=[0-9:]*' | cut -d= -f2 | paste -sd' ')
    say "job $jobid ended: ${state:-unknown}, exit code ${code:-unknown}"
    (( started_here )) && stop >/dev/null
    [[ $state == COMPLETED ]] || exit 1
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    status) status ;;
    check) reason=$(why_not); [[ -z $reason ]] || { echo "$reason"; exit 1; } ;;
    run) [[ $# -ge 2 ]] || fail "usage: $0 run JOB.sbatch [ARGS...]"; shift; run_job "$@" ;;
    *) echo "usage: $0 start|stop|status|check|run JOB.sbatch [ARGS...]" >&2; exit 2 ;;
esac
