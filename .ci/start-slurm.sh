#!/usr/bin/env bash
# Start a throwaway single-node Slurm cluster for the scale-out test and print the variables
# to use it:
#
#   eval "$(.ci/start-slurm.sh)"    # sets SLURM_CONF and STREAMEVAL_SLURM_ROOT
#
# Installs Debian's slurm-wlm and munge with apt-get when missing, then runs munged,
# slurmctld and slurmd as root with everything they own (munge key and socket, slurm.conf,
# state, spool, logs, PIDs) in one temporary directory: nothing in /etc/slurm or /etc/munge
# is read or written, so it neither needs nor disturbs a system cluster. Ports: $SLURM_PORT
# (controller) and $SLURM_PORT+1 (node), by default the first free pair from 16817.
# Waits until `sinfo` shows the node idle. Stop it with `.ci/stop-slurm.sh "$STREAMEVAL_SLURM_ROOT"`.
# Facts this relies on: ../shared/slurm-here.md. Everything except the export lines goes to stderr.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
log() { echo "start-slurm: $*" >&2; }
[[ $(id -u) -eq 0 ]] || { log "slurmd needs root"; exit 1; }

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
    || ! command -v munged >/dev/null || ! command -v sbatch >/dev/null; then
    log "installing slurm-wlm and munge with apt-get"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurm-wlm munge >&2
fi

# Two consecutive free TCP ports, so that clusters started side by side do not collide.
# (Something answers a connection to 127.0.0.1:PORT: bash's /dev/tcp, no extra tool.)
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if [[ -n "${SLURM_PORT:-}" ]]; then
    PORT=$SLURM_PORT
else
    PORT=16817
    while port_taken "$PORT" || port_taken $((PORT + 1)); do
        PORT=$((PORT + 2))
        ((PORT < 17817)) || { log "no free port pair in 16817-17816; set SLURM_PORT"; exit 1; }
    done
fi

ROOT=$(mktemp -d /tmp/streameval-slurm.XXXXXX)
# munged refuses a socket directory (and its parents) that is not 755 or is group-writable;
# mktemp makes 700.
chmod 755 "$ROOT"
mkdir -p "$ROOT"/{munge,etc,state,spool,log}
chmod 755 "$ROOT/munge"
ready=0
# A start that fails half way leaves no daemon behind.
trap '((ready)) || "$HERE/stop-slurm.sh" "$ROOT" >&2' EXIT

# Daemons are started with </dev/null and their output in files: anything holding this
# script's stdout open would make `eval "$(...)"` wait for ever.
mungekey --create --keyfile="$ROOT/munge/munge.key"
munged --foreground --socket="$ROOT/munge/munge.sock" --key-file="$ROOT/munge/munge.key" \
    --pid-file="$ROOT/munge/munged.pid" --log-file="$ROOT/munge/munged.log" \
    --seed-file="$ROOT/munge/munged.seed" </dev/null >"$ROOT/log/munged.out" 2>&1 &
echo $! >"$ROOT/munged.bgpid"
for _ in $(seq 1 50); do [[ -S "$ROOT/munge/munge.sock" ]] && break; sleep 0.1; done
munge -S "$ROOT/munge/munge.sock" -n | unmunge -S "$ROOT/munge/munge.sock" >/dev/null \
    || { log "munged does not answer; its log:"; cat "$ROOT/log/munged.out" >&2; exit 1; }

# The node line comes from `slurmd -C` (the real sockets, cores and threads, or slurmd warns
# about hwloc and may drain the node); RealMemory is 90% of what is available now, so the
# node is not drained for having less memory than declared. Both daemons are addressed by
# 127.0.0.1, whether or not the host name resolves.
NODE=$(slurmd -C | head -n 1)
HOST=$(sed -E 's/^NodeName=([^ ]+).*/\1/' <<<"$NODE")
MEM=$(($(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo) * 9 / 10))
NODE=$(sed -E "s/ RealMemory=[0-9]+//; s/ UpTime=.*//" <<<"$NODE")
export SLURM_CONF="$ROOT/etc/slurm.conf"
cat >"$SLURM_CONF" <<CONF
ClusterName=streameval-ci
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$ROOT/munge/munge.sock
StateSaveLocation=$ROOT/state
SlurmdSpoolDir=$ROOT/spool
SlurmctldPidFile=$ROOT/slurmctld.pid
SlurmdPidFile=$ROOT/slurmd.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd.log
# No mail, cgroups, MPI or accounting daemon in a throwaway cluster.
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# Without accounting, this file keeps each job's final state (one line per job).
JobCompType=jobcomp/filetxt
JobCompLoc=$ROOT/log/jobcomp.txt
# Per core, so that 1-CPU array tasks run side by side (select/linear runs them one by one).
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# Schedule within a second of a submission; a cancelled job's processes get 5 s, not 30.
SchedulerParameters=sched_interval=1
KillWait=5
$NODE RealMemory=$MEM NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

slurmctld -D -f "$SLURM_CONF" </dev/null >"$ROOT/log/slurmctld.out" 2>&1 &
echo $! >"$ROOT/slurmctld.bgpid"
slurmd -D -f "$SLURM_CONF" </dev/null >"$ROOT/log/slurmd.out" 2>&1 &
echo $! >"$ROOT/slurmd.bgpid"

# A fresh start logs two harmless errors (no PMIx, no saved state): wait for the node's
# state instead of reading logs.
for _ in $(seq 1 60); do
    if [[ $(sinfo -h -o %T 2>/dev/null) == idle ]]; then
        # shellcheck disable=SC2034  # read by the EXIT trap
        ready=1
        log "cluster up in $ROOT (controller port $PORT, node $HOST: $(sinfo -h -o '%c CPUs, %m MB'))"
        echo "export SLURM_CONF=$SLURM_CONF"
        echo "export STREAMEVAL_SLURM_ROOT=$ROOT"
        exit 0
    fi
    sleep 0.5
done
log "the node did not become idle; the daemons' logs:"
tail -n 20 "$ROOT"/log/*.out "$ROOT"/log/*.log >&2 2>/dev/null || true
exit 1
