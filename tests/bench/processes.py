#!/usr/bin/env python3
"""The per-process sampling cost, side by side in one run (part of `make bench`; alone:
`python3 tests/bench/processes.py BUILD [--sizes 100,1000,5000] [--seconds 30] [--rounds N]
[--only hr_iter,hr_hand,node]`, root).

N sleeping processes in 20 memory cgroups (made under the bench's own memory cgroup, removed
after); each exporter alone in turn, scraped every second for `seconds`:
- the agent with 1 s samples: task iterator (its default), and `--sensors.tasks false` (/proc
  with the sampler's cache);
- the agent as it was before either (every /proc file of every process each sample): built
  from BASELINE_COMMIT in a git worktree under the build directory, once;
- the agent as it was with its page written by hand (before prometheus-cpp's TextSerializer
  wrote it): built from HAND_WRITTEN_COMMIT the same way;
  (HEADROOM_BENCH_BASELINE and HEADROOM_BENCH_HAND_WRITTEN name binaries built already instead)
- node_exporter and process-exporter (Debian's packages).
CPU from the scheduler's counters (schedstat, every thread), RSS at the end, scrape latency
p50/p99, series; with --rounds, the exporters take turns that many times and each figure is the
median of its rounds. For the agent, the sampling thread's CPU by phase (the
headroom_sample_cpu_seconds_total counters) and the /proc files one sample read: the breakdown
written beside the table.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import bpf_stats

# The last commit before the task iterator and the sampler's cache: "today" in the terms.
BASELINE_COMMIT = "de380c8"
# The last commit whose page was written by hand, not by prometheus-cpp's TextSerializer.
HAND_WRITTEN_COMMIT = "329984c"
GROUPS = 20
DEFAULT_SECONDS = 30
SETTLE = 6  # seconds an exporter runs before it is measured (start-up, first samples)
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


class Sleepers:
    """n sleeping processes spread over GROUPS cgroups of our own."""

    def __init__(self, n):
        self.base = own_memory_cgroup()
        self.dirs, self.shells = [], []
        for g in range(GROUPS):
            d = os.path.join(self.base, f"headroom-bench-procs-{os.getpid()}-{g}")
            os.mkdir(d)
            self.dirs.append(d)
            k = n // GROUPS + (1 if g < n % GROUPS else 0)
            script = f'echo $$ > {d}/cgroup.procs; i=0; while [ $i -lt {k} ]; do sleep 100000 & i=$((i+1)); done; ' \
                     f'echo started; wait'
            sh = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
            self.shells.append(sh)
        for sh in self.shells:
            if sh.stdout.readline().strip() != "started":
                self.close()
                raise SystemExit("bench: the sleepers did not start")
        self.count = sum(len(open(os.path.join(d, "cgroup.procs")).read().split()) for d in self.dirs)

    def close(self):
        for sh in self.shells:
            try:
                os.killpg(sh.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            sh.wait()
        for d in self.dirs:
            for _ in range(200):
                try:
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.05)


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


def fetch(url):
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as r:
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


def wait_serving(url, proc, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(f"bench: {proc.args[0]} exited ({proc.returncode})")
        try:
            fetch(url)
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"bench: {url} never answered")


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
             "p99": sorted(lat)[max(0, int(len(lat) * 0.99) - 1)] if len(lat) < 100 else statistics.quantiles(lat, n=100)[98],
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


def run(build, sizes, seconds, rounds=1, only=None):
    """Each exporter (all, or the keys in `only`) alone in turn at each size, `rounds` times."""
    headroom = os.path.join(build, "headroom")
    wanted = (lambda key: only is None or key in only)
    baseline = baseline_binary(build) if wanted("hr_base") else None
    hand = hand_written_binary(build) if wanted("hr_hand") else None
    pe_cfg = os.path.join(build, "process-exporter.yml")
    with open(pe_cfg, "w") as f:
        f.write('process_names:\n  - name: "{{.Comm}}"\n    cmdline:\n    - \'.+\'\n')
    exporters = [
        ("headroom agent, task iterator (default)", "hr_iter",
         [headroom, "agent", "--listen", "127.0.0.1:19601", "--interval", "1s"], "http://127.0.0.1:19601/metrics", True),
        (f"headroom agent, task iterator, its page written by hand ({HAND_WRITTEN_COMMIT}: before prometheus-cpp)",
         "hr_hand", [hand, "agent", "--listen", "127.0.0.1:19607", "--interval", "1s"],
         "http://127.0.0.1:19607/metrics", True),
        ("headroom agent, `--sensors.tasks false` (/proc, cached)", "hr_procfs",
         [headroom, "agent", "--listen", "127.0.0.1:19602", "--interval", "1s", "--sensors.tasks", "false"],
         "http://127.0.0.1:19602/metrics", True),
        ("headroom agent watching no process (`--cgroup` of one that does not exist): its floor on this machine "
         "(the loop, host files, the series, a scrape a second)", "hr_floor",
         [headroom, "agent", "--listen", "127.0.0.1:19606", "--interval", "1s", "--cgroup", "/headroom-bench-nothing"],
         "http://127.0.0.1:19606/metrics", True),
        (f"headroom agent before this work ({BASELINE_COMMIT}: every /proc file, every sample)", "hr_base",
         [baseline, "agent", "--listen", "127.0.0.1:19603", "--interval", "1s"], "http://127.0.0.1:19603/metrics", False),
        ("node_exporter (host only)", "node",
         [NODE_EXPORTER, "--web.listen-address=127.0.0.1:19604"], "http://127.0.0.1:19604/metrics", False),
        ("process-exporter (per process)", "procexp",
         [PROCESS_EXPORTER, "-web.listen-address", "127.0.0.1:19605", "-config.path", pe_cfg],
         "http://127.0.0.1:19605/metrics", False),
    ]
    exporters = [e for e in exporters if wanted(e[1])]
    results = {}
    for n in sizes:
        sl = Sleepers(n)
        try:
            measured = {}
            for r in range(rounds):
                for label, key, cmd, url, is_hr in exporters:
                    print(f"bench: {n} processes, round {r + 1} of {rounds}, {label} ...", flush=True)
                    m = measure(cmd, url, seconds, is_hr)
                    m["processes"] = sl.count
                    measured.setdefault(key, []).append(m)
            for key, ms in measured.items():
                results[(n, key)] = median_of(ms)
        finally:
            sl.close()
    return exporters, results


def table(exporters, results, sizes, seconds):
    keys = {key for _, key, *_ in exporters}
    rounds = max((r.get("rounds", 1) for r in results.values()), default=1)
    each = f"; the median of {rounds} rounds, the exporters taking turns" if rounds > 1 else ""
    rows = [f"## Per-process sampling: 1 s samples, scraped every second for {seconds} s{each}\n",
            "| processes | exporter | CPU | RSS | scrape p50 / p99 | series |", "| --- | --- | --- | --- | --- | --- |"]
    for n in sizes:
        for label, key, *_ in exporters:
            r = results[(n, key)]
            rows.append(f"| {r['processes']} | {label} | {r['cpu_ms_per_s']:.2f} ms/s ({r['cpu_ms_per_s'] / 10:.2f} % of a "
                        f"core) | {r['rss'] / 2**20:.1f} MiB | {r['p50']:.1f} / {r['p99']:.1f} ms | {r['series']} |")

    def cpu(n, key):
        return results[(n, key)]["cpu_ms_per_s"] if key in keys else None

    def ratio(a, b, fmt="{:.2f}x"):
        return fmt.format(a / b) if a is not None and b else "—"

    rows += ["", "| processes | agent (task iterator) vs: node_exporter | process-exporter | the agent before | "
             "above its own floor (per-process part) | `--sensors.tasks false` vs the agent before | target |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for n in sizes:
        it, pf, base = cpu(n, "hr_iter"), cpu(n, "hr_procfs"), cpu(n, "hr_base")
        floor = cpu(n, "hr_floor")
        if it is None:
            continue
        before = f"{it / base:.3f}x ({base / it:.1f} times cheaper)" if base else "—"
        above = f"{it - floor:.2f} ms/s (floor {floor:.2f} ms/s)" if floor is not None else "—"
        procfs = f"{base / pf:.1f} times cheaper" if base and pf else "—"
        rows.append(f"| {results[(n, 'hr_iter')]['processes']} | {ratio(it, cpu(n, 'node'))} | "
                    f"{ratio(it, cpu(n, 'procexp'), '{:.3f}x')} | {before} | {above} | {procfs} | "
                    f"<= 5 ms/s at 1,000; /proc path >= 3x cheaper |")
    if len(sizes) > 1 and {"hr_iter", "hr_floor"} <= keys:
        per = []
        for n in sizes:
            r = results[(n, "hr_iter")]
            per.append(f"{(r['cpu_ms_per_s'] - results[(n, 'hr_floor')]['cpu_ms_per_s']) * 1000 / r['processes']:.2f} "
                       f"ms/s at {r['processes']}")
        rows.append("\nPer-process part per 1,000 processes (task iterator, above the floor): " + ", ".join(per) +
                    " (linear when these are close).")
    if {"hr_iter", "hr_hand"} <= keys:
        rows += ["", f"### The page through prometheus-cpp (this build) vs written by hand ({HAND_WRITTEN_COMMIT})\n",
                 "| processes | CPU: prometheus-cpp / by hand | RSS | scrape p50 / p99 | exporter phase per sample "
                 "(user + system) | node_exporter's CPU | target |",
                 "| --- | --- | --- | --- | --- | --- | --- |"]
        for n in sizes:
            a, h = results[(n, "hr_iter")], results[(n, "hr_hand")]

            def phase(r):
                return r["phases_ms"].get(("exporter", "user"), 0) + r["phases_ms"].get(("exporter", "system"), 0)
            node = f"{cpu(n, 'node'):.2f} ms/s" if "node" in keys else "—"
            rows.append(f"| {a['processes']} | {a['cpu_ms_per_s']:.2f} / {h['cpu_ms_per_s']:.2f} ms/s "
                        f"({a['cpu_ms_per_s'] / h['cpu_ms_per_s']:.2f}x) | {a['rss'] / 2**20:.1f} / "
                        f"{h['rss'] / 2**20:.1f} MiB | {a['p50']:.1f} / {a['p99']:.1f} ms vs {h['p50']:.1f} / "
                        f"{h['p99']:.1f} ms | {phase(a):.2f} / {phase(h):.2f} ms | {node} | "
                        f"the agent <= node_exporter at 1,000 |")
    rows += ["", "### One sample, by phase (sampling thread, ms per sample, user / system)\n",
             "| processes | agent | processes | cgroups | model | exporter | whole agent per sample | /proc files read in one sample |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n in sizes:
        for key in ("hr_iter", "hr_hand", "hr_procfs"):
            if key not in keys:
                continue
            r = results[(n, key)]
            ph = r["phases_ms"]

            def cell(phase):
                user = ph.get((phase, "user"), 0)
                system = ph.get((phase, "system"), 0)
                return f"{user:.2f} / {system:.2f}"
            files = r.get("proc_files") or {}
            agent = r["source"] + (f" ({HAND_WRITTEN_COMMIT}, page by hand)" if key == "hr_hand" else "")
            rows.append(f"| {r['processes']} | {agent} | {cell('processes')} | {cell('cgroups')} | {cell('model')} | "
                        f"{cell('exporter')} | {r['process_ms_per_sample']:.2f} | {files.get('total', '?')} "
                        f"(status {files.get('status', '?')}, smaps_rollup {files.get('smaps_rollup', '?')}, cmdline "
                        f"{files.get('cmdline', '?')}, cgroup {files.get('cgroup', '?')}) |")
    rows.append("\nWhole agent per sample, less the four phases: the HTTP server (one scrape a second here) and the "
                "sensors' event loop.")
    per_task = [f"{results[(n, 'hr_iter')]['iter_ns_per_task']:.0f} ns at {results[(n, 'hr_iter')]['processes']}"
                for n in sizes if "hr_iter" in keys and results[(n, "hr_iter")].get("iter_ns_per_task")]
    if per_task:
        rows.append("\nThe task iterator's program per task (kernel BPF stats, after the CPU was measured; each "
                    "includes the stats' own ~75-80 ns): " + ", ".join(per_task) + ".")
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--sizes", default="100,1000,5000")
    ap.add_argument("--seconds", type=int, default=DEFAULT_SECONDS)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", help="exporter keys, comma-separated (hr_iter, hr_hand, hr_procfs, hr_floor, hr_base, "
                                   "node, procexp)")
    ap.add_argument("--out")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench: needs root (BPF, cgroups)")
    for tool in (NODE_EXPORTER, PROCESS_EXPORTER):
        if not shutil.which(tool):
            raise SystemExit(f"bench: {tool} missing (deploy/install-deps.sh installs it)")
    sizes = [int(s) for s in a.sizes.split(",")]
    only = set(a.only.split(",")) if a.only else None
    exporters, results = run(a.build, sizes, a.seconds, a.rounds, only)
    text = table(exporters, results, sizes, a.seconds)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    sys.exit(main())
