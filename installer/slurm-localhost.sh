#!/usr/bin/env bash
# A one-node Slurm cluster on this machine for the `slurm` tests: munged, slurmctld and slurmd
# with a minimal configuration (no cgroups: proctrack/linuxproc, task/none; no accounting),
# every state, spool, log and pid file under one folder.
#
#   installer/slurm-localhost.sh start DIR   # prints the line to eval: export SLURM_CONF=DIR/...
#   installer/slurm-localhost.sh stop DIR    # stops only the daemons this script started in DIR
#
# `start` exits 0 when `sinfo` sees the node idle, 77 when the daemons cannot start here (no
# Slurm installed, not root and no munge key, or a daemon refusing), with the reason and the
# daemon's log on stderr. Needs Debian's slurm-wlm and munge (installer/common.sh).
set -uo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
action="$1"
dir="$(mkdir -p "$2" && cd "$2" && pwd)" || exit 2

skip() { echo "slurm-localhost: cannot start a local Slurm: $*" >&2; exit 77; }

stop() {
  local name pid
  for name in slurmd slurmctld munged; do
    [ -f "$dir/$name.pid" ] || continue
    pid="$(cat "$dir/$name.pid" 2>/dev/null)"
    # Only a process we started: its pid file is ours and it still runs that program.
    if [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && grep -q "$name" "/proc/$pid/comm"; then
      kill "$pid" 2>/dev/null
      for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
      [ -d "/proc/$pid" ] && kill -9 "$pid" 2>/dev/null
    fi
    rm -f "$dir/$name.pid"
  done
}

start() {
  for program in munged slurmctld slurmd sinfo sbatch; do
    command -v "$program" >/dev/null 2>&1 || [ -x "/usr/sbin/$program" ] ||
      skip "$program is not installed (apt-get install slurm-wlm munge)"
  done
  export PATH="$PATH:/usr/sbin"
  [ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start jobs as the submitting user"
  local host user cpus memory
  host="$(hostname -s)"
  user="$(id -un)"
  cpus="$(nproc)"
  memory="$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
  chmod 700 "$dir/munge"

  # munge: a key of our own, its own socket, so nothing of the machine's munge is touched.
  if [ ! -s "$dir/munge/munge.key" ]; then
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$dir/munge/munge.key"
  fi
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" \
    >>"$dir/munged.log" 2>&1 || { cat "$dir/munged.log" >&2; skip "munged did not start"; }

  cat >"$dir/slurm.conf" <<CONF
# Written by installer/slurm-localhost.sh: a one-node test cluster.
ClusterName=fragscope-test
SlurmctldHost=$host
SlurmUser=$user
SlurmdUser=root
SlurmctldPort=${FRAGSCOPE_SLURMCTLD_PORT:-6917}
SlurmdPort=${FRAGSCOPE_SLURMD_PORT:-6918}
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
MinJobAge=3600
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -c -f "$SLURM_CONF" >>"$dir/slurmctld.log" 2>&1 ||
    { tail -20 "$dir/slurmctld.log" >&2; stop; skip "slurmctld did not start"; }
  slurmd -f "$SLURM_CONF" >>"$dir/slurmd.log" 2>&1 ||
    { tail -20 "$dir/slurmd.log" >&2; stop; skip "slurmd did not start"; }
  local state=""
  for _ in $(seq 100); do
    state="$(sinfo -h -N -o '%T' 2>/dev/null | head -1)"
    case "$state" in idle* | mixed* | allocated*) break ;; esac
    sleep 0.2
  done
  case "$state" in
    idle* | mixed* | allocated*) ;;
    *)
      tail -20 "$dir/slurmctld.log" "$dir/slurmd.log" >&2
      stop
      skip "the node did not come up (sinfo says '${state:-nothing}')"
      ;;
  esac
  echo "export SLURM_CONF=$dir/slurm.conf"
}

case "$action" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
