#!/bin/bash
# A kernel-matrix guest after the initramfs (tests/kernels/init): PID 1 on the host's / (read
# only, over 9p). Mounts what a booted machine has, builds the run's cgroup layout, runs the
# steps of RESULTS/plan.sh one by one (each under `timeout`, its output in RESULTS/NAME.log, a
# line "name rc seconds" in RESULTS/steps.tsv) and powers off.
#
# env.sh sets LAYOUT (v2-bare | v2-systemd | v1); plan.sh calls `step NAME SECONDS CMD...`.
R=$1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp/home LANG=C.UTF-8 TMPDIR=/tmp
mkdir -p "$HOME"
say() { echo "headroom-guest: $*" > /dev/console; }
off() {
  sync
  say "powering off"
  echo o > /proc/sysrq-trigger
  sleep 60
}
trap off EXIT

mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t mqueue mqueue /dev/mqueue
mount -t tracefs tracefs /sys/kernel/tracing
mount -t bpf -o mode=700 bpf /sys/fs/bpf
ln -sf /proc/self/fd /dev/fd; ln -sf /proc/self/fd/0 /dev/stdin; ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mkdir -p /var/tmp /var/lib /var/log /var/cache /var/run /run/lock
chmod 1777 /var/tmp
ip link set lo up
hostname headroom-guest

# shellcheck source=/dev/null
source "$R/env.sh"

# Where the steps run: the leaf cgroup the layout gives them.
RUNNER_CG=""
enable_all() {  # every controller of the parent for its children
  local dir=$1 c
  for c in $(cat "$dir/cgroup.controllers"); do echo "+$c" > "$dir/cgroup.subtree_control" || return 1; done
}
case "$LAYOUT" in
  v2-bare|v2-systemd)
    mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup || say "mount cgroup2 failed"
    enable_all /sys/fs/cgroup
    ;;
esac
case "$LAYOUT" in
  v2-bare) RUNNER_CG=/sys/fs/cgroup ;;
  v2-systemd)
    # systemd's tree: PID 1 in /init.scope, a service beside, and the steps inside a Kubernetes
    # pod's container two slices down, with memory limits on the ancestors (kubelet's layout with
    # the systemd driver and containerd).
    cg=/sys/fs/cgroup
    mkdir -p $cg/init.scope $cg/system.slice/curio.service $cg/user.slice/user-0.slice/session-1.scope
    echo $$ > $cg/init.scope/cgroup.procs
    enable_all $cg/system.slice; enable_all $cg/user.slice; enable_all $cg/user.slice/user-0.slice
    kp=$cg/kubepods.slice
    pod=$kp/kubepods-burstable.slice/kubepods-burstable-pod0c1f6c1e_5b7d_4c1a_9f2e_6a8b8d3c4e21.slice
    ctr=$pod/cri-containerd-4f7d1c2b9a8e6d5c3b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c.scope
    mkdir -p $ctr
    enable_all $kp; enable_all $kp/kubepods-burstable.slice; enable_all $pod
    total=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) * 1024 ))
    echo $(( total * 7 / 8 )) > $kp/memory.max
    echo $(( total * 3 / 4 )) > $pod/memory.max
    RUNNER_CG=$ctr
    ;;
  v1)
    # A plain v1 machine (no v2 beside it): every controller on its own hierarchy, and systemd's
    # own named one, without which systemd's programs (journald) refuse a v1 machine.
    mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
    for c in memory pids cpu,cpuacct cpuset devices freezer blkio; do
      mkdir -p /sys/fs/cgroup/$c
      mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c
    done
    mkdir -p /sys/fs/cgroup/systemd
    mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
    echo 1 > /sys/fs/cgroup/memory/memory.use_hierarchy 2>/dev/null
    RUNNER_CG=/sys/fs/cgroup/memory
    ;;
  *) say "unknown layout '$LAYOUT'"; exit 1 ;;
esac
export RUNNER_CG
if [ -z "$RUNNER_CG" ] || [ ! -w "$RUNNER_CG/cgroup.procs" ]; then
  printf 'layout\t1\t0.0\n' > "$R/steps.tsv"
  say "layout $LAYOUT: no cgroup to run the steps in (RUNNER_CG='$RUNNER_CG')"
  exit 1
fi

{
  echo "kernel $(uname -r)"
  echo "layout $LAYOUT"
  echo "thp $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
  echo "memtotal_kib $(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
  echo "cpus $(nproc)"
  echo "runner_cgroup ${RUNNER_CG#/sys/fs/cgroup}"
} > "$R/guest-info.txt"
say "up: $(uname -r), layout $LAYOUT, $(cut -d' ' -f1 /proc/uptime) s after boot"

: > "$R/steps.tsv"
step() {
  local name=$1 limit=$2
  shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  say "step $name: $*"
  # The step in the layout's leaf cgroup; its own process group so that a timeout takes all.
  # Once a test sandbox has delegated the memory controller below the runner's cgroup, v2 lets
  # no process join it again: the steps after that run in the leaf the sandbox made for its own
  # processes (tests/testing/cgroup_sandbox.cpp).
  # The demo does the same one level down, so the leaf is looked for as deep as it goes.
  ( d=$RUNNER_CG
    for _ in 1 2 3 4 5 6 7 8; do
      { echo $BASHPID > "$d/cgroup.procs"; } 2> /dev/null && break
      d=$d/headroom-test-leaf
      mkdir -p "$d"
    done
    p=${d#/sys/fs/cgroup}
    [ "$LAYOUT" = v1 ] || grep -qx "0::${p:-/}" /proc/self/cgroup || { echo "cannot join $d" >&2; exit 125; }
    exec timeout -k 10 "$limit" "$@" ) > "$R/$name.log" 2>&1 < /dev/null
  rc=$?
  t1=$(date +%s.%N)
  awk -v n="$name" -v rc=$rc -v a="$t0" -v b="$t1" 'BEGIN {printf "%s\t%d\t%.1f\n", n, rc, b - a}' >> "$R/steps.tsv"
  say "step $name: rc=$rc"
  sync
}
# shellcheck source=/dev/null
source "$R/plan.sh"
say "all steps done"
