#!/usr/bin/env python3
"""The per-process sampling cost beside node_exporter, process-exporter and cAdvisor, side by side
in one run (part of `make bench`; alone, root, with the Release agent built in BUILD:
`python3 tests/bench/processes.py build/bench [--sizes 1000,5000,10000] [--seconds 30] [--rounds N]
[--only hr_iter,node,...] [--out FILE]`; a quick look: `--sizes 1000 --seconds 10`).

N sleeping processes in 100 memory cgroups (made under the bench's own memory cgroup by
tests/bench/sleepers.py, and removed after, however the bench ends); each exporter alone in turn,
scraped every second for `seconds` after SETTLE seconds of start-up (an exporter that fails or
never answers leaves a row saying so, and the others are measured). The default set, what
`make bench` runs:
- hr_iter: the agent with 1 s samples on its task iterator (its default);
- hr_floor: the agent watching no process (`--cgroup` of one that does not exist), its floor on
  this machine, so that the per-process part shows;
- node: node_exporter (Debian's package; host only, on its defaults);
- procexp: process-exporter (Debian's package; every process, grouped by command name);
- cadvisor: cAdvisor (Debian 11's package, fetched into BUILD/cadvisor by tests/bench/cadvisor.py:
  Debian 12 has none) with 1 s housekeeping for every cgroup (`--housekeeping_interval=1s
  --allow_dynamic_housekeeping=false --docker_only=false`), on 127.0.0.1 only.
With `--only`, also (each about 40 s per size, and the two older agents a Release build of
their own the first time, which is why `make bench` leaves them out):
- hr_every: the agent walking every process at every sample (`--process-walk-budget 0s`: what
  the walks' budget saves);
- hr_procfs: the agent with `--sensors.tasks false` (/proc with the sampler's cache);
- hr_base: the agent as it was before either (every /proc file of every process each sample),
  built from BASELINE_COMMIT in a git worktree under the build directory, once;
- hr_hand: the agent with its page written by hand (before prometheus-cpp's TextSerializer wrote
  it), built from HAND_WRITTEN_COMMIT the same way;
  (HEADROOM_BENCH_BASELINE and HEADROOM_BENCH_HAND_WRITTEN name binaries built already instead).
CPU from the scheduler's counters (schedstat, every thread) over the whole measured window, its
scrapes included; RSS at the end; scrape latency p50/p99 (nearest rank: the slowest scrape when
there are fewer than 100); series. With --rounds, the exporters take turns that many times and
each figure is the median of its rounds. The agent against node_exporter with the targets (CPU at
or below node_exporter's at 5,000 and 10,000 processes, RSS <= 64 MiB at 10,000, /metrics p99 <=
50 ms). For the agent, the sampling thread's CPU by phase (the headroom_sample_cpu_seconds_total
counters) and the /proc files one sample read: the breakdown written beside the table.
"""
import argparse
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import bpf_stats
import cadvisor

# The last commit before the task iterator and the sampler's cache: "today" in the terms.
BASELINE_COMMIT = "de380c8"
# The last commit whose page was written by hand, not by prometheus-cpp's TextSerializer.
HAND_WRITTEN_COMMIT = "329984c"
GROUPS = 100
DEFAULT_SIZES = (1000, 5000, 10000)
DEFAULT_SECONDS = 30
DEFAULT_SET = ("hr_iter", "hr_floor", "node", "procexp", "cadvisor")
KEYS = ("hr_iter", "hr_floor", "hr_every", "hr_procfs", "hr_base", "hr_hand", "node", "procexp", "cadvisor")
SETTLE = 6  # seconds an exporter runs before it is measured (start-up, first samples)
# The targets: the agent's CPU at or below node_exporter's from 5,000 processes, its RSS at
# 10,000, the scrape's p99 at every size.
CPU_TARGET_FROM = 5000
RSS_TARGET_AT, RSS_TARGET = 10000, 64 << 20
P99_TARGET_MS = 50
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
PROCESS_EXPORTER = "/usr/bin/prometheus-process-exporter"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def own_memory_cgroup():
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrl, path = line.rstrip("\n").split(":", 2)
            if "memory" in ctrl.split(","):
                return "/sys/fs/cgroup/memory" + path
            if ctrl == "" and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
                return "/sys/fs/cgroup" + path
    raise SystemExit("bench: no memory cgroup")


def tasks_now():
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[1])


def check_room(n):
    """Refuse a size the machine cannot start (pid_max, threads-max) before starting any of it."""
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    with open("/proc/sys/kernel/threads-max") as f:
        threads_max = int(f.read())
    room = min(pid_max, threads_max) - tasks_now() - 2000  # the exporters' threads, the machine's own
    if n > room:
        raise SystemExit(f"bench: {n} processes do not fit (pid_max {pid_max}, threads-max {threads_max}, "
                         f"{tasks_now()} tasks now): raise kernel.pid_max or pick smaller --sizes")


class Sleepers:
    """n sleeping processes spread over GROUPS cgroups of our own (tests/bench/sleepers.py): they
    end, and the cgroups go, when the helper's stdin closes, which happens however this process
    ends."""

    def __init__(self, n):
        check_room(n)
        self.base = own_memory_cgroup()
        self.prefix = f"headroom-bench-procs-{os.getpid()}"
        helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sleepers.py")
        t0 = time.monotonic()
        self.helper = subprocess.Popen([sys.executable, helper, self.base, self.prefix, str(GROUPS), str(n)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       start_new_session=True)
        line = self.helper.stdout.readline().split()
        if line[:1] != ["started"]:
            self.close()
            raise SystemExit("bench: the sleepers did not start")
        started = int(line[1])
        self.seconds = time.monotonic() - t0
        self.count = sum(len(open(os.path.join(self.base, f"{self.prefix}-{g}", "cgroup.procs")).read().split())
                         for g in range(GROUPS))
        if self.count != n or started != n:
            self.close()
            raise SystemExit(f"bench: {self.count} of {n} sleepers in their cgroups")

    def close(self):
        self.helper.stdin.close()
        try:
            self.helper.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(self.helper.pid, signal.SIGKILL)  # its process group holds only what it started
            self.helper.wait()


def cpu_ns(pid):
    ns = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                ns += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return ns


def rss_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def fetch(url, timeout=60):
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as r:
        body = r.read().decode()
    return time.perf_counter() - t0, body


def samples_of(text):
    """Plain values of a /metrics text, labels kept in the key."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def wait_serving(url, proc, timeout=180):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"exited ({proc.returncode})")
        try:
            fetch(url)
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {timeout} s")


def measure(cmd, url, seconds, headroom=False):
    out = tempfile.TemporaryFile()
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_serving(url, p)
        time.sleep(SETTLE)
        lat = []
        _, first = fetch(url)
        c0, t0 = cpu_ns(p.pid), time.monotonic()
        next_at = t0
        last = first
        while time.monotonic() - t0 < seconds:
            next_at += 1.0
            dt, last = fetch(url)
            lat.append(dt * 1000)
            time.sleep(max(0.0, next_at - time.monotonic()))
        wall = time.monotonic() - t0
        cpu = cpu_ns(p.pid) - c0
        r = {"cpu_ms_per_s": cpu / 1e6 / wall, "rss": rss_of(p.pid), "p50": statistics.median(lat),
             "p99": sorted(lat)[math.ceil(len(lat) * 0.99) - 1], "scrapes": len(lat),
             "series": sum(1 for line in last.splitlines() if line and not line.startswith("#"))}
        if headroom:
            a, b = samples_of(first), samples_of(last)
            n = b["headroom_samples_total"] - a["headroom_samples_total"]
            phases = {}
            for k, v in b.items():
                if k.startswith("headroom_sample_cpu_seconds_total{"):
                    labels = dict(kv.split("=", 1) for kv in k[k.index("{") + 1:-1].split(","))
                    key = (labels["phase"].strip('"'), labels["mode"].strip('"'))
                    phases[key] = (v - a.get(k, 0)) * 1000 / max(n, 1)
            r["samples"] = n
            r["phases_ms"] = phases
            r["process_ms_per_sample"] = (b["process_cpu_seconds_total"] - a["process_cpu_seconds_total"]) * 1000 / max(n, 1)
            snap = json.loads(fetch(url.replace("/metrics", "/v1/snapshot"))[1])
            r["proc_files"] = snap["stats"].get("proc_files_read")
            r["source"] = snap["stats"].get("process_source", "procfs (every file)")
            if r["source"] == "bpf-task-iterator":
                r["iter_ns_per_task"] = iterator_ns_per_task()
        return r
    finally:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def iterator_ns_per_task(seconds=5):
    """The task iterator program's own time per task it was run for, from the kernel's BPF stats
    (switched on for `seconds` after the CPU was measured, so they do not weigh on it)."""
    def runs():
        return [p for p in bpf_stats.programs().values() if p.get("name") == "dump_tasks"]
    was_on = bpf_stats.enabled()
    bpf_stats.set_enabled(True)
    try:
        ns0, n0 = bpf_stats.totals(runs())
        time.sleep(seconds)
        ns1, n1 = bpf_stats.totals(runs())
    finally:
        bpf_stats.set_enabled(was_on)
    return (ns1 - ns0) / (n1 - n0) if n1 > n0 else None


def worktree_binary(build, commit, name, env):
    """The agent as of `commit`, built once (Release) in a worktree under the build dir
    (BUILD/NAME-src, built in BUILD/NAME); $ENV names a binary to use instead."""
    if os.environ.get(env):
        return os.environ[env]
    src = os.path.abspath(os.path.join(build, f"{name}-src"))
    out = os.path.abspath(os.path.join(build, name))
    binary = os.path.join(out, "headroom")
    if os.path.exists(binary):
        return binary
    if not os.path.exists(src):
        subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", "--force", src, commit], check=True)
    subprocess.run(["cmake", "-S", src, "-B", out, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DHEADROOM_TESTS=OFF"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", out, "--target", "headroom"], check=True, stdout=subprocess.DEVNULL)
    return binary


def baseline_binary(build):
    return worktree_binary(build, BASELINE_COMMIT, "baseline", "HEADROOM_BENCH_BASELINE")


def hand_written_binary(build):
    return worktree_binary(build, HAND_WRITTEN_COMMIT, "hand-written", "HEADROOM_BENCH_HAND_WRITTEN")


def median_of(rounds):
    """One result from several rounds of one exporter: the median of each figure."""
    if len(rounds) == 1:
        return rounds[0]
    out = dict(rounds[-1])
    for k, v in rounds[-1].items():
        if isinstance(v, (int, float)) and all(isinstance(r.get(k), (int, float)) for r in rounds):
            out[k] = statistics.median(r[k] for r in rounds)
        elif k == "phases_ms":
            out[k] = {ph: statistics.median(r[k].get(ph, 0) for r in rounds) for ph in v}
    out["rounds"] = len(rounds)
    return out


def exporters_for(build, wanted):
    """(label, key, command, /metrics URL, is the agent) of each exporter `wanted` picks, in the
    order they run."""
    headroom = os.path.join(build, "headroom")
    baseline = baseline_binary(build) if wanted("hr_base") else None
    hand = hand_written_binary(build) if wanted("hr_hand") else None
    cadv, cadv_version = cadvisor.binary(build) if wanted("cadvisor") else (None, None)
    pe_cfg = os.path.join(build, "process-exporter.yml")
    with open(pe_cfg, "w") as f:
        f.write('process_names:\n  - name: "{{.Comm}}"\n    cmdline:\n    - \'.+\'\n')
    exporters = [
        ("headroom agent, task iterator (its default), `--interval 1s`", "hr_iter",
         [headroom, "agent", "--listen", "127.0.0.1:19601", "--interval", "1s"], "http://127.0.0.1:19601/metrics", True),
        ("headroom agent watching no process (`--cgroup` of one that does not exist): its floor on this machine "
         "(the loop, host files, the series, a scrape a second)", "hr_floor",
         [headroom, "agent", "--listen", "127.0.0.1:19606", "--interval", "1s", "--cgroup", "/headroom-bench-nothing"],
         "http://127.0.0.1:19606/metrics", True),
        ("headroom agent walking every process at every sample (`--process-walk-budget 0s`)", "hr_every",
         [headroom, "agent", "--listen", "127.0.0.1:19609", "--interval", "1s", "--process-walk-budget", "0s"],
         "http://127.0.0.1:19609/metrics", True),
        ("headroom agent, `--sensors.tasks false` (/proc, cached)", "hr_procfs",
         [headroom, "agent", "--listen", "127.0.0.1:19602", "--interval", "1s", "--sensors.tasks", "false"],
         "http://127.0.0.1:19602/metrics", True),
        (f"headroom agent before the task iterator ({BASELINE_COMMIT}: every /proc file, every sample)", "hr_base",
         [baseline, "agent", "--listen", "127.0.0.1:19603", "--interval", "1s"], "http://127.0.0.1:19603/metrics", False),
        (f"headroom agent, task iterator, its page written by hand ({HAND_WRITTEN_COMMIT}: before prometheus-cpp)",
         "hr_hand", [hand, "agent", "--listen", "127.0.0.1:19607", "--interval", "1s"],
         "http://127.0.0.1:19607/metrics", True),
        ("node_exporter (host only, its defaults)", "node",
         [NODE_EXPORTER, "--web.listen-address=127.0.0.1:19604"], "http://127.0.0.1:19604/metrics", False),
        ("process-exporter (every process, grouped by command name)", "procexp",
         [PROCESS_EXPORTER, "-web.listen-address", "127.0.0.1:19605", "-config.path", pe_cfg],
         "http://127.0.0.1:19605/metrics", False),
        (f"cAdvisor {cadv_version} (every cgroup, 1 s housekeeping)", "cadvisor",
         [cadv, "--listen_ip=127.0.0.1", "--port=19608", "--housekeeping_interval=1s",
          "--allow_dynamic_housekeeping=false", "--docker_only=false", "--logtostderr"],
         "http://127.0.0.1:19608/metrics", False),
    ]
    return [e for e in exporters if wanted(e[1])]


def run(build, sizes, seconds, rounds=1, only=None):
    """Each exporter (DEFAULT_SET, or the keys in `only`) alone in turn at each size, `rounds`
    times."""
    keys = set(only) if only else set(DEFAULT_SET)
    exporters = exporters_for(build, lambda key: key in keys)
    results = {}
    for n in sizes:
        print(f"bench: starting {n} sleeping processes in {GROUPS} cgroups ...", flush=True)
        sl = Sleepers(n)
        print(f"bench: {sl.count} started in {sl.seconds:.1f} s", flush=True)
        try:
            measured, errors = {}, {}
            for r in range(rounds):
                for label, key, cmd, url, is_hr in exporters:
                    print(f"bench: {n} processes, round {r + 1} of {rounds}, {label} ...", flush=True)
                    try:
                        m = measure(cmd, url, seconds, is_hr)
                    except (RuntimeError, OSError) as e:  # one exporter failing leaves the others' rows
                        print(f"bench: {label}: {e}", flush=True)
                        errors[key] = str(e)
                        continue
                    m["processes"] = sl.count
                    measured.setdefault(key, []).append(m)
            for key, ms in measured.items():
                results[(n, key)] = median_of(ms)
            for label, key, *_ in exporters:
                if (n, key) not in results:
                    results[(n, key)] = {"error": errors.get(key, "?"), "processes": sl.count}
        finally:
            sl.close()
    return exporters, results


def machine():
    """The machine in one line: CPU model and cores, memory, kernel."""
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) * 1024
    return f"{os.cpu_count()} cores ({model}), {mem / 2**30:.1f} GiB RAM, Linux {platform.release()}"


def mark(ok):
    return "pass" if ok else "**FAIL**"


def table(exporters, results, sizes, seconds):
    keys = {key for _, key, *_ in exporters}
    rounds = max((r.get("rounds", 1) for r in results.values()), default=1)
    each = f"; the median of {rounds} rounds, the exporters taking turns" if rounds > 1 else ""
    rows = [f"## Per-process sampling: sleeping processes in {GROUPS} cgroups, 1 s samples, scraped every second "
            f"for {seconds} s{each}\n",
            f"Each exporter alone in turn, {SETTLE} s after it answered. CPU from schedstat (every thread, its "
            f"scrapes included), RSS at the end, scrape latency p50 / p99 (nearest rank: the slowest scrape when "
            f"there are fewer than 100) and how many scrapes (back to back when one takes over a second), series on "
            f"the page.\n",
            "| processes | exporter | CPU | RSS | scrape p50 / p99 (scrapes) | series |",
            "| --- | --- | --- | --- | --- | --- |"]
    for n in sizes:
        for label, key, *_ in exporters:
            r = results[(n, key)]
            if "error" in r:
                rows.append(f"| {r['processes']} | {label} | not measured: {r['error']} | | | |")
                continue
            rows.append(f"| {r['processes']} | {label} | {r['cpu_ms_per_s']:.2f} ms/s ({r['cpu_ms_per_s'] / 10:.2f} % of a "
                        f"core) | {r['rss'] / 2**20:.1f} MiB | {r['p50']:.1f} / {r['p99']:.1f} ms ({r['scrapes']}) | "
                        f"{r['series']} |")

    def ok(n, key):
        return key in keys and "error" not in results[(n, key)]

    def cpu(n, key):
        return results[(n, key)]["cpu_ms_per_s"] if ok(n, key) else None

    def ratio(a, b, fmt="{:.2f}x"):
        return fmt.format(a / b) if a is not None and b else "—"

    if "hr_iter" in keys:
        rows += ["", "### The agent against the targets\n",
                 f"| processes | agent CPU / node_exporter's | CPU <= node_exporter's (from {CPU_TARGET_FROM:,}) | "
                 f"RSS <= {RSS_TARGET >> 20} MiB (at {RSS_TARGET_AT:,}) | scrape p99 <= {P99_TARGET_MS} ms |",
                 "| --- | --- | --- | --- | --- |"]
        for n in sizes:
            r = results[(n, "hr_iter")]
            if "error" in r:
                rows.append(f"| {r['processes']} | not measured | | | |")
                continue
            it, node = r["cpu_ms_per_s"], cpu(n, "node")
            if node is not None:
                vs = f"{it:.2f} / {node:.2f} ms/s ({it / node:.2f}x)"
                cpu_ok = mark(it <= node) if n >= CPU_TARGET_FROM else "—"
            else:
                vs, cpu_ok = f"{it:.2f} ms/s / —", "—"
            rss = f"{r['rss'] / 2**20:.1f} MiB: {mark(r['rss'] <= RSS_TARGET)}" if n >= RSS_TARGET_AT else "—"
            p99 = f"{r['p99']:.1f} ms: {mark(r['p99'] <= P99_TARGET_MS)}"
            rows.append(f"| {r['processes']} | {vs} | {cpu_ok} | {rss} | {p99} |")
        rows += ["", "| processes | agent CPU vs: process-exporter | cAdvisor | the agent before | above its own floor "
                 "(per-process part) |", "| --- | --- | --- | --- | --- |"]
        for n in sizes:
            it, base, floor = cpu(n, "hr_iter"), cpu(n, "hr_base"), cpu(n, "hr_floor")
            if it is None:
                continue
            before = f"{it / base:.3f}x ({base / it:.1f} times cheaper)" if base else "—"
            above = f"{it - floor:.2f} ms/s (floor {floor:.2f} ms/s)" if floor is not None else "—"
            rows.append(f"| {results[(n, 'hr_iter')]['processes']} | {ratio(it, cpu(n, 'procexp'), '{:.3f}x')} | "
                        f"{ratio(it, cpu(n, 'cadvisor'))} | {before} | {above} |")
    if len(sizes) > 1 and {"hr_iter", "hr_floor"} <= keys:
        per = []
        for n in sizes:
            if not (ok(n, "hr_iter") and ok(n, "hr_floor")):
                continue
            r = results[(n, "hr_iter")]
            per.append(f"{(r['cpu_ms_per_s'] - results[(n, 'hr_floor')]['cpu_ms_per_s']) * 1000 / r['processes']:.2f} "
                       f"ms/s at {r['processes']}")
        rows.append("\nPer-process part per 1,000 processes (task iterator, above the floor): " + ", ".join(per) +
                    " (linear when these are close).")
    if {"hr_iter", "hr_hand"} <= keys:
        rows += ["", f"### The page through prometheus-cpp (this build) vs written by hand ({HAND_WRITTEN_COMMIT})\n",
                 "| processes | CPU: prometheus-cpp / by hand | RSS | scrape p50 / p99 | exporter phase per sample "
                 "(user + system) | node_exporter's CPU |",
                 "| --- | --- | --- | --- | --- | --- |"]
        for n in sizes:
            if not (ok(n, "hr_iter") and ok(n, "hr_hand")):
                continue
            a, h = results[(n, "hr_iter")], results[(n, "hr_hand")]

            def phase(r):
                return r["phases_ms"].get(("exporter", "user"), 0) + r["phases_ms"].get(("exporter", "system"), 0)
            node = f"{cpu(n, 'node'):.2f} ms/s" if ok(n, "node") else "—"
            rows.append(f"| {a['processes']} | {a['cpu_ms_per_s']:.2f} / {h['cpu_ms_per_s']:.2f} ms/s "
                        f"({a['cpu_ms_per_s'] / h['cpu_ms_per_s']:.2f}x) | {a['rss'] / 2**20:.1f} / "
                        f"{h['rss'] / 2**20:.1f} MiB | {a['p50']:.1f} / {a['p99']:.1f} ms vs {h['p50']:.1f} / "
                        f"{h['p99']:.1f} ms | {phase(a):.2f} / {phase(h):.2f} ms | {node} |")
    agents = [key for key in ("hr_iter", "hr_every", "hr_hand", "hr_procfs") if key in keys]
    if agents:
        rows += ["", "### One sample, by phase (sampling thread, ms per sample, user / system)\n",
                 "| processes | agent | processes | cgroups | model | exporter | whole agent per sample | "
                 "/proc files read in one sample |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n in sizes:
        for key in agents:
            if not ok(n, key):
                continue
            r = results[(n, key)]
            ph = r["phases_ms"]

            def cell(phase):
                user = ph.get((phase, "user"), 0)
                system = ph.get((phase, "system"), 0)
                return f"{user:.2f} / {system:.2f}"
            files = r.get("proc_files") or {}
            agent = r["source"] + {"hr_iter": ", walks paced (its default)", "hr_every": ", every sample walks",
                                   "hr_hand": f" ({HAND_WRITTEN_COMMIT}, page by hand)"}.get(key, "")
            rows.append(f"| {r['processes']} | {agent} | {cell('processes')} | {cell('cgroups')} | {cell('model')} | "
                        f"{cell('exporter')} | {r['process_ms_per_sample']:.2f} | {files.get('total', '?')} "
                        f"(status {files.get('status', '?')}, smaps_rollup {files.get('smaps_rollup', '?')}, cmdline "
                        f"{files.get('cmdline', '?')}, cgroup {files.get('cgroup', '?')}) |")
    if agents:
        rows.append("\nWhole agent per sample, less the four phases: the HTTP server (one scrape a second here) and "
                    "the sensors' event loop. Paced walks: the phases are averages over walks and the samples between "
                    "them; the /proc files are the last sample's.")
    per_task = [f"{results[(n, 'hr_iter')]['iter_ns_per_task']:.0f} ns at {results[(n, 'hr_iter')]['processes']}"
                for n in sizes if ok(n, "hr_iter") and results[(n, "hr_iter")].get("iter_ns_per_task")]
    if per_task:
        rows.append("\nThe task iterator's program per task (kernel BPF stats, after the CPU was measured; each "
                    "includes the stats' own ~75-80 ns): " + ", ".join(per_task) + ".")
    notes = [f"{label}: `{' '.join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd))}`"
             for label, _, cmd, *_ in exporters]
    rows += ["", "How each exporter ran:\n"] + [f"- {note}" for note in notes]
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--sizes", default=",".join(str(n) for n in DEFAULT_SIZES))
    ap.add_argument("--seconds", type=int, default=DEFAULT_SECONDS)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", help=f"exporter keys, comma-separated, of {', '.join(KEYS)} (default: "
                                   f"{','.join(DEFAULT_SET)})")
    ap.add_argument("--out", help="also write the table (and the machine, the command) to this file, and every "
                                  "figure to FILE.json")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench: needs root (BPF, cgroups)")
    only = a.only.split(",") if a.only else None
    unknown = set(only or ()) - set(KEYS)
    if unknown:
        raise SystemExit(f"bench: unknown exporter {', '.join(sorted(unknown))} (known: {', '.join(KEYS)})")
    for key, tool in (("node", NODE_EXPORTER), ("procexp", PROCESS_EXPORTER)):
        if key in (only or DEFAULT_SET) and not shutil.which(tool):
            raise SystemExit(f"bench: {tool} missing (deploy/install-deps.sh installs it)")
    # A SIGTERM ends the run through the finally blocks: the exporter and the sleepers stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = [int(s) for s in a.sizes.split(",")]
    t0 = time.monotonic()
    exporters, results = run(a.build, sizes, a.seconds, a.rounds, only)
    text = table(exporters, results, sizes, a.seconds)
    print(text)
    print(f"bench: {time.monotonic() - t0:.0f} s in all")
    if a.out:
        with open(a.out + ".json", "w") as f:  # every figure, for a table written again later
            json.dump([{"processes": n, "exporter": key, **{k: v for k, v in r.items() if k != "phases_ms"},
                        "phases_ms": {"/".join(ph): v for ph, v in r.get("phases_ms", {}).items()}}
                       for (n, key), r in results.items()], f, indent=1)
        with open(a.out, "w") as f:
            f.write(f"# headroom against node_exporter, process-exporter and cAdvisor "
                    f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n\nMachine: {machine()}.\n\n"
                    f"Command: `python3 tests/bench/processes.py {' '.join(sys.argv[1:])}` "
                    f"({time.monotonic() - t0:.0f} s).\n\n" + text)


if __name__ == "__main__":
    sys.exit(main())
