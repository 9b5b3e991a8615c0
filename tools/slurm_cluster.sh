#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests/test_slurm.py and CI (.ci/run): munged, slurmctld and slurmd
# of Debian's packages (`apt-get install slurmctld slurmd slurm-client munge`), run as root, one node with the
# machine's CPUs and memory as `slurmd -C` reports them, one default partition, no cgroups, no accounting.
#
#   tools/slurm_cluster.sh start    # configure and start; waits (at most SLURM_START_TIMEOUT s, default 60) until
#                                   # sinfo shows the node idle, and says how long that took
#   tools/slurm_cluster.sh status   # sinfo of the cluster (exit 1 when it does not answer)
#   tools/slurm_cluster.sh stop     # stop the daemons this script started (by their pid files)
#
# Everything lives under LEARNGENE_SLURM_DIR (default /tmp/learngene-slurm): slurm.conf, spool, state, logs. The
# Slurm commands find the configuration through SLURM_CONF: `start` prints the line to export. Where
# /etc/slurm/slurm.conf does not exist, `start` also links it there, so that plain `sinfo` and `sbatch` (and the
# tests) find it without SLURM_CONF; an existing /etc/slurm/slurm.conf (a real cluster's) is never touched.
# Any failure ends with exit status 1 and one line on stderr saying why.
set -uo pipefail

DIR=${LEARNGENE_SLURM_DIR:-/tmp/learngene-slurm}
CONF=$DIR/slurm.conf
SYSTEM_CONF=/etc/slurm/slurm.conf
TIMEOUT=${SLURM_START_TIMEOUT:-60}
export SLURM_CONF=$CONF

fail() { echo "slurm_cluster.sh: $*" >&2; exit 1; }

need() {
    for cmd in munged slurmctld slurmd sinfo scontrol; do
        command -v "$cmd" >/dev/null || [ -x "/usr/sbin/$cmd" ] ||
            fail "$cmd not found; install Debian's packages: apt-get install -y slurmctld slurmd slurm-client munge"
    done
    [ "$(id -u)" = 0 ] || fail "run as root: the daemons run as root here (no slurm or munge user is set up)"
}

start_munge() {
    local key=/etc/munge/munge.key
    if [ ! -s "$key" ]; then
        mkdir -p /etc/munge
        dd if=/dev/urandom of="$key" bs=1 count=1024 status=none || fail "cannot write the munge key $key"
    fi
    chmod 400 "$key"
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        return  # a munged answers already (the system's, or ours from an earlier start)
    fi
    PATH=$PATH:/usr/sbin munged --force --pid-file="$DIR/munged.pid" --socket=/run/munge/munge.socket.2 \
        --log-file="$DIR/log/munged.log" 2>"$DIR/log/munged.err" ||
        fail "munged did not start: $(tail -n 1 "$DIR/log/munged.err" "$DIR/log/munged.log" 2>/dev/null | tr '\n' ' ')"
    for _ in $(seq 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return
        sleep 0.1
    done
    fail "munged does not answer (see $DIR/log/munged.log)"
}

write_conf() {
    local host node
    host=$(hostname -s)
    # the node line as slurmd measures it (CPUs, sockets, cores, threads, RealMemory), less its UpTime
    node=$(PATH=$PATH:/usr/sbin slurmd -C | sed -n 's/ *UpTime=.*//; /^NodeName=/p')
    [ -n "$node" ] || fail "slurmd -C did not describe this machine"
    cat >"$CONF.tmp" <<EOF
# written by tools/slurm_cluster.sh: a one-node cluster for learngene's tests
ClusterName=learngene
SlurmctldHost=$host
AuthType=auth/munge
# a requeued job waits for its credentials to expire before it may start again (default 120 s)
AuthInfo=cred_expire=30
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
# a cancelled task gets SIGKILL 5 s after SIGTERM (default 30): its training loop checkpoints within a step
KillWait=5
MinJobAge=600
SchedulerParameters=sched_interval=2
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
$node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$CONF.tmp" "$CONF"
    if [ ! -e "$SYSTEM_CONF" ] || [ "$(readlink "$SYSTEM_CONF")" = "$CONF" ]; then
        mkdir -p /etc/slurm && ln -sfn "$CONF" "$SYSTEM_CONF"
    fi
}

node_idle() { sinfo -h -N -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; }

start() {
    need
    local began=$SECONDS began_ns
    began_ns=$(date +%s%N)
    if [ -e "$DIR/slurmctld.pid" ] && node_idle; then
        echo "slurm_cluster.sh: already running ($(sinfo -h -N -o '%N %t %c CPUs'))"
        return 0
    fi
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" || fail "cannot create $DIR"
    start_munge
    write_conf
    PATH=$PATH:/usr/sbin slurmctld -i 2>"$DIR/log/slurmctld.err" ||
        fail "slurmctld did not start: $(tail -n 2 "$DIR/log/slurmctld.log" "$DIR/log/slurmctld.err" 2>/dev/null | tr '\n' ' ')"
    PATH=$PATH:/usr/sbin slurmd 2>"$DIR/log/slurmd.err" ||
        fail "slurmd did not start: $(tail -n 2 "$DIR/log/slurmd.log" "$DIR/log/slurmd.err" 2>/dev/null | tr '\n' ' ')"
    while ! node_idle; do
        if [ $((SECONDS - began)) -ge "$TIMEOUT" ]; then
            fail "the node is not idle after ${TIMEOUT} s ($(sinfo -h -N -o '%N %t' 2>&1 | head -n 1)); see $DIR/log/"
        fi
        sleep 0.5
    done
    local ms=$((($(date +%s%N) - began_ns) / 1000000))
    echo "slurm_cluster.sh: one node up in $((ms / 1000)).$(printf %03d $((ms % 1000))) s: $(sinfo -h -N -o '%N %t, %c CPUs, %m MB')"
    echo "export SLURM_CONF=$CONF"
}

stop() {
    local name pid
    for name in slurmd slurmctld munged; do
        [ -f "$DIR/$name.pid" ] || continue
        pid=$(cat "$DIR/$name.pid")
        if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
        rm -f "$DIR/$name.pid"
    done
    echo "slurm_cluster.sh: stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) sinfo -N -o '%N %t %c %m' || fail "no cluster answers (SLURM_CONF=$SLURM_CONF)" ;;
    *) fail "usage: tools/slurm_cluster.sh start|stop|status" ;;
esac
