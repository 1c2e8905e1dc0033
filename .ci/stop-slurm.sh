#!/usr/bin/env bash
# Stop the cluster .ci/start-slurm.sh started and remove its directory:
#
#   .ci/stop-slurm.sh "$STREAMEVAL_SLURM_ROOT"
#
# Jobs are cancelled first (while the controller still runs), then the daemons are stopped
# by the PIDs the start script recorded, never by name. A job's processes outlive killed
# daemons, so any left after that are found through their slurmstepd and killed too.
set -euo pipefail

ROOT=${1:?usage: stop-slurm.sh STREAMEVAL_SLURM_ROOT}
[[ -d "$ROOT" ]] || exit 0
export SLURM_CONF="$ROOT/etc/slurm.conf"
log() { echo "stop-slurm: $*" >&2; }

# A PID counts as ours while it runs (zombies do not) with our directory on its command line:
# a recycled PID then never gets a signal.
ours() {
    local pid=$1 state
    [[ -n "$pid" ]] || return 1
    state=$(ps -o stat= -p "$pid" 2>/dev/null) && [[ ${state:0:1} != Z ]] || return 1
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF "$ROOT/"
}
daemon_pid() { cat "$ROOT/$1.bgpid" 2>/dev/null || true; }

# Cancel every job, so slurmd's step daemons end their processes in the ordinary way.
if ours "$(daemon_pid slurmctld)"; then
    jobs=$(squeue -h -o %A 2>/dev/null | sort -u || true)
    if [[ -n "$jobs" ]]; then
        # shellcheck disable=SC2086  # one argument per job id
        scancel --full $jobs 2>/dev/null || true
        for _ in $(seq 1 60); do
            [[ -z "$(squeue -h 2>/dev/null)" ]] && break
            sleep 0.25
        done
    fi
fi

# slurmd first (no new steps), then the controller, then munge, which both talk to.
for daemon in slurmd slurmctld munged; do
    pid=$(daemon_pid "$daemon")
    ours "$pid" || continue
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 1 40); do
        ours "$pid" || break
        sleep 0.25
    done
    if ours "$pid"; then
        log "$daemon ($pid) ignored SIGTERM; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
done

# Fallback for a controller that was already gone: slurmstepd processes of this cluster
# (they inherit slurmd's SLURM_CONF) and everything below them. The caller's own shell may
# carry the same SLURM_CONF, so only step daemons and their descendants are candidates.
descendants() {
    local child
    for child in $(pgrep -P "$1" || true); do
        echo "$child"
        descendants "$child"
    done
}
for environ in /proc/[0-9]*/environ; do
    pid=${environ#/proc/}
    pid=${pid%/environ}
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == slurmstepd ]] || continue
    tr '\0' '\n' 2>/dev/null <"$environ" | grep -qxF "SLURM_CONF=$SLURM_CONF" || continue
    log "killing leftover slurmstepd $pid and its processes"
    tree=" $(descendants "$pid" | tr '\n' ' ')"
    for child in $tree; do
        # The job's process groups too (a background process may have left the tree), but
        # only groups a job process leads: never one the daemons shared with our caller.
        pgid=$(ps -o pgid= -p "$child" 2>/dev/null | tr -d ' ' || true)
        if [[ -n "$pgid" && "$tree" == *" $pgid "* ]]; then
            kill -KILL -- "-$pgid" 2>/dev/null || true
        fi
        kill -KILL "$child" 2>/dev/null || true
    done
    kill -KILL "$pid" 2>/dev/null || true
done

rm -rf "$ROOT"
