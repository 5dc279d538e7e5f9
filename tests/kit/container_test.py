#!/usr/bin/env python3
"""headroom in an unprivileged container, where the seeds' provers ran: no CAP_BPF, no
CAP_SYSLOG, no /dev/kmsg, a private cgroup namespace whose root is the container's cgroup, the
memory limit on that root.

The container is a real podman one (`podman run --rootfs /`, default capabilities, --memory,
--cgroupns private, no network) where podman runs: the kernel matrix's guests, cgroup v2 and
plain v1. On a host where it does not start (this project's CI machine: a hybrid hierarchy,
which crun rejects and on which runc cannot mount the cpu cgroup), the same properties are built
by hand: a memory cgroup of our own with the limit, `unshare --cgroup --mount --pid`, the cgroup
file system mounted again read-only inside (its root is the container's cgroup), a /dev without
kmsg, and podman's default capability set (setpriv).

Scenarios, each in a container of its own:
- snapshot: `headroom snapshot --json` names the container's limit as the bound; every BPF sensor
  and kmsg is degraded with its reason, the rest works.
- retry: `headroom run` of a prover that overshoots its budget: the OOM kill is confirmed by the
  cgroup's oom_kill counter alone (the only evidence there is), the retry converges.
- kill9: `headroom run` of a prover that kills itself with SIGKILL: exit 137, said to be no OOM
  kill, not retried.
- sidecar: `headroom agent` beside the prover in its container (one pid namespace): it counts the
  OOM kill (metrics, /v1/ooms), journals it, and says each degraded sensor once in its log and in
  /healthz.

Environment: HEADROOM_BINARY, HEADROOM_TEST_PROVER, HEADROOM_WORKLOAD (as the other kit tests); root. Exit 77 when
not root. `--inside SCENARIO` is what runs in the container.
"""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import kitlib  # noqa: E402

MiB = 1 << 20
LIMIT = 640 * MiB
# podman's default capabilities (containers.conf, podman 4): what a container has unless told.
PODMAN_CAPS = ["chown", "dac_override", "fowner", "fsetid", "kill", "net_bind_service", "setfcap", "setgid", "setpcap",
               "setuid", "sys_chroot"]
SCENARIOS = ["snapshot", "retry", "kill9", "sidecar"]

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)
    return ok


# ---------------------------------------------------------------- inside the container

def inside(scenario: str) -> dict:
    binary = os.environ["HEADROOM_BINARY"]
    prover = os.environ["HEADROOM_TEST_PROVER"]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="headroom-ctr-"))
    out = {"scenario": scenario, "cgroup": open("/proc/self/cgroup").read(),
           "capeff": next(l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff:")),
           "kmsg": os.path.exists("/dev/kmsg")}
    if scenario == "snapshot":
        r = subprocess.run([binary, "snapshot", "--json"], capture_output=True, text=True, timeout=120)
        out.update(rc=r.returncode, stderr=r.stderr[-4000:])
        if r.returncode == 0:
            out["snapshot"] = json.loads(r.stdout)
    elif scenario in ("retry", "kill9"):
        # 64 MiB more than any budget (no mlock: the container may lock only a few pages)
        tail = (["--grab", "64MiB", "--hold", "200"] if scenario == "retry"
                else ["--budget", "1MiB", "--then", "kill:9"])
        r = subprocess.run([binary, "run", "--state-file", str(tmp / "state.json"), "--margin-floor", "16MiB",
                            "--margin-step", "16MiB", "--", prover, *tail], capture_output=True, text=True, timeout=300)
        out.update(rc=r.returncode, stderr=r.stderr[-8000:])
        if (tmp / "state.json").exists():
            out["state"] = json.loads((tmp / "state.json").read_text())
    elif scenario == "sidecar":
        port = kitlib.free_port()
        log = tmp / "agent.log"
        agent = kitlib.AgentRun(binary, ["agent", "--listen", f"127.0.0.1:{port}", "--interval", "250ms",
                                         "--journal", str(tmp / "oom.hrj"), "--budget.state-file", str(tmp / "state.json"),
                                         "--role-rule", "prover=comm:headroom-worklo"], log,
                                deadline=time.monotonic() + 120)
        try:
            url = f"http://127.0.0.1:{port}"
            end = time.monotonic() + 60
            while time.monotonic() < end and http(url + "/healthz")[0] != 200:
                time.sleep(0.2)
            out["healthz_before"] = json.loads(http(url + "/healthz")[1] or "null")
            # The prover climbs past what the container has, once the agent has sampled it (the
            # victim is inferred from the last sample that had it): the OOM killer's pick.
            # One thread touching (4 MiB a line): a killed thread group whose other threads still
            # hold its memory can make the next allocator, the agent, a second victim.
            p = subprocess.Popen([os.environ["HEADROOM_WORKLOAD"], "--touch-per-line", str(4 * MiB)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            p.stdout.readline()  # "ready PID"
            end = time.monotonic() + 60
            while time.monotonic() < end:
                code, body = http(url + "/v1/snapshot")
                if code == 200 and any(q.get("pid") == p.pid for q in json.loads(body).get("processes", [])):
                    break
                time.sleep(0.1)
            # Nothing asked of the agent until the kill is over: a request's allocations at the
            # limit would make the agent the trigger of an OOM.
            try:
                for _ in range(2 * LIMIT // (4 * MiB)):
                    p.stdin.write("\n")
                    p.stdin.flush()
                    if not p.stdout.readline():
                        break
            except BrokenPipeError:
                pass
            out["prover_status"] = p.wait(timeout=300)
            end = time.monotonic() + 60
            ooms = None
            while time.monotonic() < end:
                code, body = http(url + "/v1/ooms")
                if code == 200 and json.loads(body).get("events"):
                    ooms = json.loads(body)
                    break
                time.sleep(0.25)
            out["ooms"] = ooms
            # The metrics follow at the end of the sample that found the kill: wait for them.
            end = time.monotonic() + 30
            while True:
                out["metrics"] = http(url + "/metrics")[1]
                counted = [l for l in out["metrics"].splitlines()
                           if l.startswith(("headroom_oom_kills_total{", "headroom_cgroup_oom_kills_total{"))
                           and not l.rstrip().endswith(" 0")]
                if len({l.split("{")[0] for l in counted}) == 2 or time.monotonic() > end:
                    break
                time.sleep(0.25)
            out["healthz_after"] = json.loads(http(url + "/healthz")[1] or "null")
            rep = subprocess.run([binary, "report", "--journal", str(tmp / "oom.hrj"), "--json"], capture_output=True,
                                 text=True, timeout=60)
            out["report_rc"] = rep.returncode
            out["report"] = json.loads(rep.stdout) if rep.returncode == 0 else rep.stderr[-2000:]
        finally:
            out["agent_rc"] = agent.stop(name="agent")
            out["agent_log"] = log.read_text(errors="replace")[-20000:]
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def http(url: str) -> tuple:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


# ---------------------------------------------------------------- the container, from outside

class Podman:
    """A real podman container whose root file system is this machine's own /."""
    name = "podman"

    def __init__(self):
        # crun cannot pivot_root into the root it runs in: / bound again elsewhere is a root of
        # its own (with everything mounted below it).
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="headroom-ctr-root-", dir="/run"))
        subprocess.run(["mount", "--rbind", "/", str(self.root)], check=True)
        subprocess.run(["mount", "--make-rslave", str(self.root)], check=True)

    def close(self):
        subprocess.run(["umount", "-R", "-l", str(self.root)], check=False)
        self.root.rmdir()

    def run(self, scenario: str) -> subprocess.CompletedProcess:
        env = {k: os.environ[k] for k in ("HEADROOM_BINARY", "HEADROOM_TEST_PROVER", "HEADROOM_WORKLOAD")}
        # No systemd and no journald in the guests, and their /var is a tmpfs, which overlay
        # cannot sit on: cgroupfs, a file for events, vfs for the (unused) image store. Every
        # option comes before --rootfs PATH: what follows the path is the command.
        argv = ["podman", "--cgroup-manager", "cgroupfs", "--events-backend", "file", "--storage-driver", "vfs",
                "run", "--rm", "--memory", str(LIMIT), "--memory-swap", str(LIMIT), "--cgroupns", "private",
                "--network", "none", "--pid", "private", "--workdir", "/tmp"]
        for k, v in env.items():
            argv += ["--env", f"{k}={v}"]
        argv += ["--rootfs", str(self.root), "/usr/bin/python3", str(pathlib.Path(__file__).resolve()), "--inside",
                 scenario]
        return subprocess.run(argv, capture_output=True, text=True, timeout=600)


class HandBuilt:
    """The same properties without a container runtime, for a host podman does not start on."""
    name = "hand-built (unshare, setpriv)"

    def close(self):
        pass

    def __init__(self):
        own = kitlib.own_memory_cgroup()
        self.mount = "/sys/fs/cgroup/memory" if kitlib.memory_layout() != "v2" else "/sys/fs/cgroup"
        self.v2 = kitlib.memory_layout() == "v2"
        self.dir = pathlib.Path(f"{self.mount}{own}/headroom-container-{os.getpid()}")

    def run(self, scenario: str) -> subprocess.CompletedProcess:
        self.dir.mkdir()
        try:
            (self.dir / ("memory.max" if self.v2 else "memory.limit_in_bytes")).write_text(str(LIMIT))
            script = HANDBUILT_SETUP.format(
                # v1: the container's own directory bound over the hierarchy, as runtimes do on v1
                cgfs="-t cgroup2 -o nsdelegate none /sys/fs/cgroup" if self.v2 else f"--bind {self.dir} /sys/fs/cgroup/memory",
                cgdir="/sys/fs/cgroup" if self.v2 else "/sys/fs/cgroup/memory",
                caps=",".join("+" + c for c in PODMAN_CAPS))
            argv = ["unshare", "--cgroup", "--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private",
                    "/bin/bash", "-c", script, "container", "/usr/bin/python3", str(pathlib.Path(__file__).resolve()),
                    "--inside", scenario]
            procs = self.dir / "cgroup.procs"

            def enter():
                procs.write_text(str(os.getpid()))  # before unshare: the namespace's root is this cgroup
            return subprocess.run(argv, capture_output=True, text=True, timeout=600, preexec_fn=enter)
        finally:
            for _ in range(200):
                for p in (self.dir / "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(p), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                try:
                    self.dir.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)


# In the new mount, pid and cgroup namespaces: the cgroup file system as the container sees it,
# a /dev like podman's (no kmsg), then podman's capability set for the command.
HANDBUILT_SETUP = r"""
set -euo pipefail
mount {cgfs}
mount -o remount,bind,ro {cgdir}   # read-only, as a container runtime mounts it
dev=$(mktemp -d /run/headroom-ctr-dev.XXXXXX)
mount -t tmpfs -o mode=755,nosuid tmpfs "$dev"
for d in null zero full random urandom tty; do touch "$dev/$d"; mount --bind "/dev/$d" "$dev/$d"; done
mkdir "$dev/pts" "$dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$dev/pts"
mount -t tmpfs -o mode=1777 tmpfs "$dev/shm"
ln -s /proc/self/fd "$dev/fd"
mount --move "$dev" /dev
rmdir "$dev" 2>/dev/null || true
exec setpriv --bounding-set=-all,{caps} --inh-caps=-all -- "$@"
"""


def runtime():
    layout = kitlib.memory_layout()
    if layout != "hybrid" and shutil.which("podman"):
        return Podman()
    return HandBuilt()


def result_of(rt, scenario: str) -> dict | None:
    r = rt.run(scenario)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if not check(r.returncode == 0 and lines, f"{scenario}: the container failed (rc {r.returncode}): "
                                              f"{r.stderr[-3000:]}{r.stdout[-2000:]}"):
        return None
    return json.loads(lines[-1])


def sensors_of(doc) -> dict:
    return {s["name"]: s for s in doc}


def check_unprivileged(scenario: str, res: dict) -> None:
    caps = int(res["capeff"], 16)
    check(caps & (1 << 39) == 0 and caps & (1 << 38) == 0 and caps & (1 << 21) == 0,
          f"{scenario}: the container has CAP_BPF, CAP_PERFMON or CAP_SYS_ADMIN (CapEff {res['capeff']})")
    check(caps & (1 << 34) == 0, f"{scenario}: the container has CAP_SYSLOG")
    check(not res["kmsg"], f"{scenario}: the container has a /dev/kmsg")
    check(any(l.endswith(":/") for l in res["cgroup"].splitlines()),
          f"{scenario}: its cgroup namespace's root is not its own cgroup: {res['cgroup']}")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--inside":
        print(json.dumps(inside(sys.argv[2])), flush=True)
        return 0
    if os.geteuid() != 0:
        print("skipped: needs root (a memory cgroup and namespaces of its own)")
        return 77
    for v in ("HEADROOM_BINARY", "HEADROOM_TEST_PROVER", "HEADROOM_WORKLOAD"):
        if not os.environ.get(v):
            print(f"{v} is not set", file=sys.stderr)
            return 2
    rt = runtime()
    print(f"container: {rt.name}, memory cgroup layout {kitlib.memory_layout()}, limit {LIMIT // MiB} MiB", flush=True)
    wanted = sys.argv[1:] or SCENARIOS

    try:
        if "snapshot" in wanted and (res := result_of(rt, "snapshot")):
            check_unprivileged("snapshot", res)
            if check(res["rc"] == 0, f"snapshot: headroom snapshot failed: {res['stderr']}"):
                snap = res["snapshot"]
                root = next((c for c in snap["cgroups"] if c["memory"]["path"] == "/"), None)
                if check(root is not None, f"snapshot: no cgroup / (the container's own) among {[c['memory']['path'] for c in snap['cgroups']]}"):
                    check(root["memory"]["limit_bytes"] == LIMIT, f"snapshot: / has limit {root['memory']['limit_bytes']}, not {LIMIT}")
                    check(root["tightest_bound"]["name"] == "/" and root["tightest_bound"]["limit_bytes"] == LIMIT,
                          f"snapshot: the bound is {root['tightest_bound']}, not the container's limit")
                s = sensors_of(snap["sensors"])
                for name in ("oom", "exits", "faults", "rss"):
                    check(s[name]["state"] == "degraded" and "CAP_BPF" in s[name]["reason"],
                          f"snapshot: sensor {name} is {s[name]}, not degraded for want of CAP_BPF")
                check(s["kmsg"]["state"] == "degraded" and "/dev/kmsg" in s["kmsg"]["reason"],
                      f"snapshot: sensor kmsg is {s['kmsg']}, not degraded for want of /dev/kmsg")
                check(snap["processes"], "snapshot: no processes")

        if "retry" in wanted and (res := result_of(rt, "retry")):
            check_unprivileged("retry", res)
            err = res["stderr"]
            check(res["rc"] == 0, f"retry: headroom run exited {res['rc']}: {err}")
            evidence = next((l for l in err.splitlines() if "OOM evidence from:" in l), "")
            check("oom_kill counter" in evidence and "mark_victim" not in evidence and "kmsg" not in evidence,
                  f"retry: the OOM evidence should be the counter alone: {evidence!r}")
            attempts = [l for l in err.splitlines() if " -> " in l and "attempt " in l]
            check(len(attempts) >= 2 and "oom_killed" in attempts[0] and "counter" in attempts[0],
                  f"retry: the first attempt's kill is not confirmed by the counter: {attempts}")
            check(attempts and "exited(0)" in attempts[-1], f"retry: the last attempt did not succeed: {attempts}")
            check(res.get("state", {}).get("oom_kills", 0) >= 1, f"retry: the state file counts no kill: {res.get('state')}")

        if "kill9" in wanted and (res := result_of(rt, "kill9")):
            check_unprivileged("kill9", res)
            err = res["stderr"]
            check(res["rc"] == 137, f"kill9: headroom run exited {res['rc']}, not the prover's 137: {err}")
            check("not an OOM kill" in err, f"kill9: a SIGKILL was not told apart from an OOM kill: {err}")
            check(err.count(" starts: pid ") == 1, f"kill9: it was retried: {err}")
            check(res.get("state", {}).get("oom_kills", 0) == 0, f"kill9: counted as an OOM kill: {res.get('state')}")

        if "sidecar" in wanted and (res := result_of(rt, "sidecar")):
            check_unprivileged("sidecar", res)
            log = res["agent_log"]
            check(res["prover_status"] in (-9, 137), f"sidecar: the prover was not killed: status {res['prover_status']}")
            ooms = (res.get("ooms") or {}).get("events") or []
            if check(ooms, f"sidecar: /v1/ooms lists no kill; agent log:\n{log}"):
                check(ooms[0]["sources"].get("counter"), f"sidecar: the kill's source is not the cgroup's counter: {ooms[0]['sources']}")
                victims = ooms[0].get("victims") or []
                check(victims and victims[0]["comm"] == "headroom-worklo" and victims[0]["inferred"],
                      f"sidecar: the victim is not the prover, inferred: {victims}")
            for metric in ("headroom_oom_kills_total{", "headroom_cgroup_oom_kills_total{"):
                check(any(l.startswith(metric) and not l.rstrip().endswith(" 0") for l in res["metrics"].splitlines()),
                      f"sidecar: {metric[:-1]} did not count it")
            if check(res["report_rc"] == 0 and isinstance(res["report"], dict), f"sidecar: no journal record: {res['report']}"):
                ev = res["report"].get("event") or {}
                check((ev.get("sources") or {}).get("counter"), f"sidecar: the journal's record is not the counter's: {ev}")
            check(sum("counted from the cgroups' OOM-kill counters" in l for l in log.splitlines()) == 1,
                  "sidecar: the agent did not say once that OOM kills come from the counters only")
            for name in ("oom", "kmsg"):
                said = [l for l in log.splitlines() if f"sensor {name} degraded" in l]
                check(len(said) == 1, f"sidecar: sensor {name}'s degradation said {len(said)} times in the log, not once")
            hz = res.get("healthz_after") or {}
            hs = sensors_of(hz.get("sensors", []))
            check(hs.get("oom", {}).get("state") == "degraded" and hs.get("kmsg", {}).get("state") == "degraded",
                  f"sidecar: /healthz does not say the degraded sensors: {hz}")
            check(res["agent_rc"] == 0, f"sidecar: the agent exited {res['agent_rc']}")

    finally:
        rt.close()
    print(f"container: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
