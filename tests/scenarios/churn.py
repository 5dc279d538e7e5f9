#!/usr/bin/env python3
"""Churn: the real agent while short-lived processes come and go as fast as asked, across
several cgroups, while cgroups are created and removed under it and OOM kills are caused every
few seconds (root).

    python3 tests/scenarios/churn.py BUILD [--seconds 600] [--rate 2000] [--groups 4]

BUILD holds `headroom` and `tests/headroom-workload` (`make churn` runs it on the debug build for
CHURN_SECONDS, 600 by default; `make test` runs 40 s of it through ctest, the `churn` test). Every cgroup is made
under this script's own memory cgroup and removed after; only the processes it started are
signalled. What it checks, and exits 1 when one fails:
- no crash: the agent answers /healthz "ok" at the end and exits 0 on SIGTERM;
- no error storm: warning and error lines after start-up, apart from the one warning each OOM
  kill gets, stay under a bound that does not grow with the run's length or the process count;
- RSS flat: the agent's VmRSS at the end of the warm-up (a fifth of the run, at most 60 s)
  against the end, within 10% + 8 MiB;
- every OOM kill caused (a workload over its cgroup's limit, dead of SIGKILL with the cgroup's
  oom_kill counter risen) is in the journal, its victim's pid named.
The rate achieved is measured, not assumed: the spawners count the processes they started.

A sanitizer build's ASan keeps freed memory in a quarantine of 256 MiB by default, which would
look like growth; the agent runs with a 16 MiB quarantine so that its RSS measures the agent.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SKIP = 77
WARMUP_FRACTION = 0.2
WARMUP_MAX = 60
RSS_TOLERANCE = (0.10, 8 << 20)  # relative, absolute
# Warnings and errors after start-up, OOM kills' own aside: a bound for any length of run.
LOG_BOUND = 20
OOM_LIMIT = 64 << 20


def own_memory_cgroup():
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrl, path = line.rstrip("\n").split(":", 2)
            if "memory" in ctrl.split(","):
                return "/sys/fs/cgroup/memory" + path.rstrip("/"), 1
            if ctrl == "" and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
                base = "/sys/fs/cgroup" + path.rstrip("/")
                return base, 2
    raise SystemExit("churn: no memory cgroup")


class Cgroups:
    """Cgroups made under our own memory cgroup; removed (their processes killed) at the end."""

    def __init__(self):
        self.base, self.version = own_memory_cgroup()
        if self.version == 2:
            # Our processes move to a leaf so that the controller can be delegated below.
            leaf = os.path.join(self.base, "headroom-test-leaf")
            os.makedirs(leaf, exist_ok=True)
            for pid in open(os.path.join(self.base, "cgroup.procs")).read().split():
                try:
                    with open(os.path.join(leaf, "cgroup.procs"), "w") as f:
                        f.write(pid)
                except OSError:
                    pass
            with open(os.path.join(self.base, "cgroup.subtree_control"), "w") as f:
                f.write("+memory")
        self.made = []

    def make(self, name, limit=None):
        d = os.path.join(self.base, f"headroom-churn-{os.getpid()}-{name}")
        os.makedirs(d, exist_ok=True)
        if limit:
            with open(os.path.join(d, "memory.max" if self.version == 2 else "memory.limit_in_bytes"), "w") as f:
                f.write(str(limit))
        self.made.append(d)
        return d

    def oom_kills(self, d):
        path = os.path.join(d, "memory.events" if self.version == 2 else "memory.oom_control")
        for line in open(path):
            k, v = line.split()
            if k == "oom_kill":
                return int(v)
        return 0

    def remove(self, d):
        for _ in range(500):
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError:
                for pid in open(os.path.join(d, "cgroup.procs")).read().split():
                    kill_own(int(pid))
                time.sleep(0.01)
        if d in self.made:
            self.made.remove(d)

    def remove_all(self):
        for d in list(self.made):
            self.remove(d)


OWN = set()  # pids this script started (and their children, which only it can have made)


def kill_own(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def spawn_in(cgroup, argv, **kw):
    procs = os.path.join(cgroup, "cgroup.procs")

    def enter():
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    p = subprocess.Popen(argv, preexec_fn=enter, **kw)
    OWN.add(p.pid)
    return p


def http(port, path, timeout=10):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def rss_of(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class Agent:
    def __init__(self, build, tmp):
        self.journal = os.path.join(tmp, "oom.hrj")
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=16").lstrip(":")
        self.proc = subprocess.Popen(
            [os.path.join(build, "headroom"), "--log-level", "info", "agent", "--log-format", "json",
             "--listen", "127.0.0.1:0", "--journal", self.journal, "--budget.enabled", "false",
             "--budget.state-file", os.path.join(tmp, "state.json")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        OWN.add(self.proc.pid)
        self.lines = []
        self.port = None
        ready = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"serving on http://127\.0\.0\.1:([0-9]+)", line)
                if m and not self.port:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(60) or not self.port:
            raise SystemExit("churn: the agent did not start:\n" + "\n".join(self.lines[-30:]))

    def healthy(self, limit=30):
        end = time.monotonic() + limit
        while time.monotonic() < end:
            code, body = http(self.port, "/healthz")
            if code == 200 and json.loads(body)["status"] == "ok":
                return True
            time.sleep(0.2)
        return False

    def records(self, build):
        out = subprocess.run([os.path.join(build, "headroom"), "report", "--journal", self.journal, "--list",
                              "--json"], capture_output=True, text=True)
        return json.loads(out.stdout) if out.returncode == 0 else []

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--rate", type=int, default=2000, help="short-lived processes a second, all groups together")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--oom-every", type=float, default=5.0, help="seconds between OOM kills")
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("churn: needs root (cgroups, BPF)")
        return SKIP
    workload = os.path.join(a.build, "tests", "headroom-workload")
    cg = Cgroups()
    tmp = tempfile.mkdtemp(prefix="headroom-churn-")
    agent = None
    stop = threading.Event()
    figures = {"seconds": a.seconds, "rate_asked": a.rate}
    failures = []
    try:
        agent = Agent(a.build, tmp)
        if not agent.healthy(60):
            raise SystemExit("churn: the agent never became healthy")
        started_lines = len(agent.lines)

        # Spawners: children holding 1 MiB for 4 ms, as many alive at once as `rate/groups` a
        # second needs twice over (the machine, not the spawner, sets the rate reached).
        per_group = max(1, a.rate // a.groups)
        hold_ms = 4
        at_once = max(1, 2 * per_group * hold_ms // 1000 + 1)
        spawners = []
        t0 = time.monotonic()
        for g in range(a.groups):
            d = cg.make(f"g{g}")
            spawners.append(spawn_in(d, [workload, "--spawn-seconds", str(a.seconds), "--spawn",
                                         str(per_group * a.seconds), str(hold_ms), str(at_once)],
                                     stdout=subprocess.PIPE, text=True))

        # Cgroups created and removed: a short burst of processes in each.
        ephemeral = [0]

        def ephemeral_cgroups():
            n = 0
            while not stop.is_set():
                d = cg.make(f"eph{n}")
                p = spawn_in(d, [workload, "--spawn", "20", "2", "4"], stdout=subprocess.DEVNULL)
                p.wait()
                cg.remove(d)
                n += 1
                ephemeral[0] = n
                stop.wait(0.2)

        eph = threading.Thread(target=ephemeral_cgroups, daemon=True)
        eph.start()

        # OOM kills, every few seconds, in a cgroup with a limit.
        oom_cg = cg.make("oom", OOM_LIMIT)
        caused = []
        not_oom = []

        def oom_kills():
            while not stop.wait(a.oom_every):
                before = cg.oom_kills(oom_cg)
                p = spawn_in(oom_cg, [workload, "--anon", str(4 * OOM_LIMIT)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
                rc = p.wait()
                if rc == -signal.SIGKILL and cg.oom_kills(oom_cg) > before:
                    caused.append(p.pid)
                else:
                    not_oom.append((p.pid, rc))

        ooms = threading.Thread(target=oom_kills, daemon=True)
        ooms.start()

        # RSS: after the warm-up, and at the end; the series in between.
        warmup = min(WARMUP_MAX, a.seconds * WARMUP_FRACTION)
        rss_series = []
        rss_start = None
        while time.monotonic() - t0 < a.seconds:
            time.sleep(min(5, max(0.1, a.seconds - (time.monotonic() - t0))))
            if agent.proc.poll() is not None:
                failures.append(f"the agent exited ({agent.proc.returncode}) during the churn")
                break
            r = rss_of(agent.proc.pid)
            rss_series.append((round(time.monotonic() - t0, 1), r))
            if rss_start is None and time.monotonic() - t0 >= warmup:
                rss_start = r
        stop.set()
        spawned = 0
        for p in spawners:
            out, _ = p.communicate(timeout=120)
            m = re.search(r"spawned ([0-9]+)", out or "")
            spawned += int(m.group(1)) if m else 0
        elapsed = time.monotonic() - t0
        eph.join(30)
        ooms.join(60)
        rss_end = rss_of(agent.proc.pid) if agent.proc.poll() is None else 0
        figures.update({
            "processes_started": spawned,
            "rate_achieved": round(spawned / elapsed),
            "elapsed_seconds": round(elapsed, 1),
            "ephemeral_cgroups": ephemeral[0],
            "rss_start_bytes": rss_start,
            "rss_end_bytes": rss_end,
            "rss_max_bytes": max((r for _, r in rss_series), default=0),
            "warmup_seconds": warmup,
            "ooms_caused": len(caused),
            "ooms_not_confirmed": len(not_oom),
        })

        # Every OOM kill caused is in the journal.
        missing = set(caused)
        end = time.monotonic() + 30
        while missing and time.monotonic() < end:
            victims = {v.get("tgid") for r in agent.records(a.build) for v in r["event"].get("victims", [])}
            missing -= victims
            if missing:
                time.sleep(1)
        figures["ooms_caught"] = len(caused) - len(missing)
        if missing:
            failures.append(f"OOM kills not in the journal: {sorted(missing)}")
        if not caused:
            failures.append("no OOM kill was caused")

        # No crash, no storm.
        if not agent.healthy(30):
            failures.append("/healthz is not ok at the end: " + http(agent.port, "/healthz")[1][:500])
        code, metrics = http(agent.port, "/metrics")
        m = re.search(r"^headroom_sample_failures_total ([0-9.e+]+)$", metrics, re.M)
        figures["sample_failures"] = float(m.group(1)) if m else None
        m = re.search(r"^headroom_samples_total ([0-9.e+]+)$", metrics, re.M)
        figures["samples"] = float(m.group(1)) if m else None
        noisy = []
        for line in agent.lines[started_lines:]:
            try:
                j = json.loads(line)
            except ValueError:
                noisy.append(line)  # not the agent's JSON: a sanitizer report, a crash
                continue
            if j.get("level") in ("warning", "error", "critical") and not j.get("msg", "").startswith("OOM kill"):
                noisy.append(line)
        figures["warning_error_lines"] = len(noisy)
        if len(noisy) > LOG_BOUND:
            failures.append(f"{len(noisy)} warning/error lines (bound {LOG_BOUND}):\n" + "\n".join(noisy[:30]))
        if rss_start and rss_end > rss_start * (1 + RSS_TOLERANCE[0]) + RSS_TOLERANCE[1]:
            failures.append(f"RSS grew from {rss_start >> 20} MiB to {rss_end >> 20} MiB")
        rc = agent.stop()
        figures["exit_code"] = rc
        if rc != 0:
            failures.append(f"the agent exited {rc} on SIGTERM:\n" + "\n".join(agent.lines[-20:]))
        agent = None
    finally:
        stop.set()
        if agent:
            agent.stop()
        for pid in OWN:
            kill_own(pid)
        cg.remove_all()
        subprocess.run(["rm", "-rf", tmp])

    mib = lambda b: f"{(b or 0) / (1 << 20):.1f} MiB"
    print(f"churn: {figures['elapsed_seconds']} s, {figures['processes_started']} short-lived processes "
          f"({figures['rate_achieved']}/s achieved, {a.rate}/s asked) in {a.groups} cgroups, "
          f"{figures['ephemeral_cgroups']} cgroups created and removed; agent RSS {mib(figures['rss_start_bytes'])} "
          f"after {figures['warmup_seconds']:.0f} s warm-up, {mib(figures['rss_end_bytes'])} at the end "
          f"(max {mib(figures['rss_max_bytes'])}); OOM kills caused {figures['ooms_caused']}, in the journal "
          f"{figures['ooms_caught']}; {figures['warning_error_lines']} warning/error lines after start-up; "
          f"samples {figures['samples']}, sample failures {figures['sample_failures']}; exit {figures['exit_code']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(figures, f, indent=1)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
