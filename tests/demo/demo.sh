#!/usr/bin/env bash
# `make demo`: the incident headroom exists for, at small scale, on this machine.
#
# A memory cgroup of DEMO_LIMIT_MIB (made under this shell's own memory cgroup, removed at the
# end) holds a Curio-like neighbour with shared memory and a prover. The prover takes its
# budget from headroom and also holds memory its budget never covers: an mlock'd pool (like
# CUDA pinned buffers) and page tables from a sparse mapping. The agent watches. The first
# attempt is OOM-killed; `headroom report` explains the kill from the journal; `headroom run`
# grows the margin from the kernel's evidence and the next attempt fits.
#
# Binaries: HEADROOM_BINARY, HEADROOM_TEST_PROVER, HEADROOM_WORKLOAD (default: build/bench).
# DEMO_OUT keeps the journal, the logs and the HTML report (default build/demo).
# Root only. It touches nothing but the cgroups it makes and the processes it starts.
set -euo pipefail

bin_dir=${HEADROOM_BIN_DIR:-build/bench}
headroom=${HEADROOM_BINARY:-$bin_dir/headroom}
prover=${HEADROOM_TEST_PROVER:-$bin_dir/tests/headroom-test-prover}
workload=${HEADROOM_WORKLOAD:-$bin_dir/tests/headroom-workload}
out=${DEMO_OUT:-build/demo}
limit_mib=${DEMO_LIMIT_MIB:-512}
neighbour_mib=${DEMO_NEIGHBOUR_MIB:-128}
pool=${DEMO_POOL:-64MiB}        # the prover's pinned-like pool, outside its budget
sparse=${DEMO_SPARSE:-16GiB}    # address space touched once per 2 MiB: ~32 MiB of page tables

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (it makes a memory cgroup and loads BPF programs)"
for b in "$headroom" "$prover" "$workload"; do
  [ -x "$b" ] || die "$b: not built (make demo builds it)"
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/oom-journal.hrj* "$out"/*.json "$out"/*.log "$out"/kill.html

# This shell's own memory cgroup: v1 (memory controller on its own hierarchy) or v2.
if [ -e /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
  mount_dir=/sys/fs/cgroup/memory
  own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3 }' /proc/self/cgroup)
  limit_file=memory.limit_in_bytes
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  mount_dir=/sys/fs/cgroup
  own=$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup)
  limit_file=memory.max
else
  die "no memory cgroup controller mounted"
fi
[ -n "$own" ] || die "this shell is in no memory cgroup"
own=${own%/}
# cgroup v2 gives children a controller only from a parent without processes of its own: where
# this shell's cgroup holds processes (a container's, a CI runner's), they move to a leaf below
# it first, as the test sandbox does (tests/testing/cgroup_sandbox.cpp).
delegate_memory() {
  local dir=$mount_dir$own leaf=$mount_dir$own/headroom-test-leaf
  grep -qw memory "$dir/cgroup.subtree_control" && return 0
  echo +memory > "$dir/cgroup.subtree_control" 2>/dev/null && return 0
  mkdir -p "$leaf"
  for _ in $(seq 100); do
    local pids
    pids=$(cat "$dir/cgroup.procs")
    [ -z "$pids" ] && break
    for p in $pids; do echo "$p" > "$leaf/cgroup.procs" 2>/dev/null || true; done
  done
  echo +memory > "$dir/cgroup.subtree_control" || die "cannot give the memory controller to cgroups below $own"
}
[ "$mount_dir" = /sys/fs/cgroup ] && delegate_memory
demo="$own/headroom-demo-$$"          # paths inside the hierarchy, as headroom names cgroups
prover_cg="$demo/prover"
neighbour_cg="$demo/curio"
shm=/dev/shm/headroom-demo-$$
agent_pid=""
neighbour_pid=""

cleanup() {
  local rc=$?
  set +e
  [ -n "$agent_pid" ] && kill -TERM "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
  exec 7>&- 2>/dev/null   # the neighbour ends when its stdin closes
  [ -n "$neighbour_pid" ] && kill -KILL "$neighbour_pid" 2>/dev/null && wait "$neighbour_pid" 2>/dev/null
  rm -f "$shm" "$out/neighbour.in"
  # Anything still in the demo's cgroups was started by this demo: end it, then remove them.
  for cg in "$prover_cg" "$neighbour_cg" "$demo"; do
    local dir=$mount_dir$cg
    [ -d "$dir" ] || continue
    for _ in $(seq 50); do
      local pids
      pids=$(cat "$dir/cgroup.procs" 2>/dev/null)
      [ -z "$pids" ] && break
      kill -KILL $pids 2>/dev/null
      sleep 0.1
    done
    rmdir "$dir" 2>/dev/null || echo "demo: could not remove $dir" >&2
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$(date +%s.%N)
say "A ${limit_mib} MiB memory cgroup: $demo"
mkdir "$mount_dir$demo"
[ "$mount_dir" = /sys/fs/cgroup ] && echo +memory > "$mount_dir$demo/cgroup.subtree_control"
echo $((limit_mib << 20)) > "$mount_dir$demo/$limit_file"
mkdir "$mount_dir$prover_cg" "$mount_dir$neighbour_cg"

say "The agent: OOM sensors, journal, budget for $prover_cg"
"$headroom" --log-level info agent --listen 127.0.0.1:0 --interval 500ms --cgroup "$demo" \
  --role-rule "prover=cgroup:$prover_cg" --role-rule "colocated=cgroup:$neighbour_cg" \
  --budget.cgroup "$prover_cg" --budget.margin-floor 16MiB --budget.state-file "$out/agent-budget.json" \
  --journal "$out/oom-journal.hrj" >"$out/agent.log" 2>&1 &
agent_pid=$!
address=""
for _ in $(seq 300); do
  address=$(sed -n 's#.*serving on http://\([0-9.]*:[0-9]*\).*#\1#p' "$out/agent.log" | head -1)
  [ -n "$address" ] && break
  kill -0 "$agent_pid" 2>/dev/null || { cat "$out/agent.log" >&2; die "the agent did not start"; }
  sleep 0.1
done
[ -n "$address" ] || die "the agent did not say where it serves ($out/agent.log)"
grep -E 'sensor|attached' "$out/agent.log" | sed 's/^/  agent: /' | head -8 || true
echo "  agent pid $agent_pid; metrics: http://$address/metrics   budget: http://$address/v1/budget"

say "A Curio-like neighbour: ${neighbour_mib} MiB of shared memory in $neighbour_cg"
mkfifo "$out/neighbour.in"
sh -c 'echo $$ > "$1"; shift; exec "$@"' sh "$mount_dir$neighbour_cg/cgroup.procs" \
  "$workload" --shm-create "$shm" "$((neighbour_mib << 20))" <"$out/neighbour.in" >"$out/neighbour.log" 2>&1 &
neighbour_pid=$!
exec 7>"$out/neighbour.in"
echo "  neighbour pid $neighbour_pid"
for _ in $(seq 100); do grep -q ready "$out/neighbour.log" && break; sleep 0.1; done
grep -q ready "$out/neighbour.log" || die "the neighbour did not start: $(cat "$out/neighbour.log")"
sleep 1.5   # two samples, so the agent has seen it
echo "  the agent's budget for the prover now: $("$headroom" budget --agent "http://$address" --format mib) MiB"

say "The prover under headroom run: budget in \$PROVER_BUDGET, plus a $pool pool and ~$((${sparse%GiB} * 2)) MiB of page tables it does not count"
set +e
"$headroom" --log-level info run --cgroup "$prover_cg" --margin-floor 16MiB --margin-step 16MiB \
  --state-file "$out/run-budget.json" --budget-env PROVER_BUDGET -- \
  "$prover" --budget-env PROVER_BUDGET --pool "$pool" --sparse "$sparse" --hold 500 2>&1 | tee "$out/run.log"
run_rc=${PIPESTATUS[0]}
set -e
[ "$run_rc" -eq 0 ] || die "headroom run did not converge (exit $run_rc; $out/run.log)"

# The agent journals the kill once its record is fsync'd; give it a moment.
for _ in $(seq 50); do grep -q 'recorded as record' "$out/agent.log" && break; sleep 0.1; done
grep -q 'recorded as record' "$out/agent.log" || die "the agent journaled no OOM kill ($out/agent.log)"

say "headroom report: why attempt 1 died (from the agent's journal)"
"$headroom" report --journal "$out/oom-journal.hrj"
"$headroom" report --journal "$out/oom-journal.hrj" --html "$out/kill.html" >/dev/null

say "What the agent exports about it"
curl_metrics=$(exec 3<>"/dev/tcp/${address%:*}/${address#*:}" && printf 'GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n' >&3 && cat <&3)
grep -E '^headroom_(oom_kills_total|budget_bytes|margin_bytes|budget_generation|cgroup_invisible_bytes)\{' <<<"$curl_metrics" |
  grep -F "$demo" | sed 's/^/  /' || true

end=$(date +%s.%N)
say "Done in $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s; the cgroups and processes are removed"
cat <<EOF
  The post-mortem:   $headroom report --journal $out/oom-journal.hrj   (--html, --svg, --json)
  The HTML report:   $out/kill.html
  The logs:          $out/agent.log, $out/run.log
  Live metrics:      make run, then http://127.0.0.1:9464/metrics and /v1/budget
                     (Grafana: dashboards/grafana/headroom.json; alerts: dashboards/prometheus/)
EOF
