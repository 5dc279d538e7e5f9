#!/usr/bin/env python3
"""`make bench`: headroom's costs measured side by side in one run, written as a markdown table.

- A fault-heavy workload (fault-bench: several GiB of fresh pages, several threads) with no
  agent, with the agent running (`headroom agent` on its defaults), and with a bpftrace
  one-liner counting the same tracepoint per process; runs interleaved, median of each, and
  the agent again with its two fault-path sensors (faults, rss: off by default) switched on.
  Ratios, added nanoseconds per fault.
- Per-program cost per event from the kernel's own BPF stats (kernel.bpf_stats_enabled:
  run_time_ns / run_cnt) for headroom's fault program and bpftrace's.
- The time from an OOM kill (oom:mark_victim) to its record in user space (oom-latency).
- The probe's throughput against a plain single-threaded mmap+memset loop, same cgroup.
- The agent's own footprint sampling at 50x its default rate: RSS early and late (no growth
  with uptime), CPU and wall time per sample; and on its defaults at rest, CPU and wakeups a
  second.
- The scrape latency at rest and while clients abuse the HTTP endpoint (tests/bench/http_abuse.py).
- The per-process sampling cost (tests/bench/processes.py, its default set): the agent with 1 s
  samples (task iterator) and its floor at 1,000, 5,000 and 10,000 processes in 100 cgroups beside
  node_exporter, process-exporter and cAdvisor (Debian 11's, fetched into the build directory),
  each alone in turn; the agent against its targets, and one sample's CPU by phase. About 12
  minutes of the run (698 and 746 s on a 2-core VM); the older agents it can build (`--only
  hr_base,hr_hand`) are left to a run of processes.py alone.
- The cost per sample against the CPU count (tests/bench/cpus.py): Debian 13's 6.12 under qemu
  with 2 and with 32 CPUs, the same 2,000 processes, the task iterator per task and the
  `processes` phase per sample side by side, in instructions (qemu's `-icount`; about 14 minutes).
"""
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import bpf_stats

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build/bench"
OUT = os.path.join(BUILD, "bench-results.md")
HEADROOM = os.path.join(BUILD, "headroom")
FAULT = os.path.join(BUILD, "tests", "fault-bench")
OOM = os.path.join(BUILD, "tests", "oom-latency")
WORKLOAD = os.path.join(BUILD, "tests", "headroom-workload")
MEMSET = os.path.join(BUILD, "tests", "memset-loop")
FLOOR = os.path.join(BUILD, "tests", "bpf-floor")
BPFTRACE_EMPTY = "tracepoint:exceptions:page_fault_user { }"
PROBE_LIMIT = 6 << 30  # the probe's cgroup: it fills about 5 GiB of it
THREADS = str(min(4, os.cpu_count() or 2))
CHUNK = str(512 << 20)
ROUNDS = "4"
REPEATS = 5
FOOTPRINT_SECONDS = 60
REST_SECONDS = 30
BPFTRACE = "tracepoint:exceptions:page_fault_user { @[pid] = count(); }"
# Seconds the agent runs before a measured workload: its start-up (loading, the first samples)
# is not what a prover beside a long-running agent pays.
AGENT_SETTLE = 5
# The fault-path sensors, off in the agent by default (the kernel keeps those counts anyway).
ALL_ON = ("--sensors.faults", "true", "--sensors.rss", "true")


def fault_run():
    out = subprocess.run([FAULT, THREADS, CHUNK, ROUNDS], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def wait_for(proc, needle, timeout=30):
    end = time.time() + timeout
    buf = ""
    while time.time() < end:
        line = proc.stdout.readline()
        if not line:
            break
        buf += line
        if needle in line:
            return
    raise SystemExit(f"bench: {proc.args[0]} did not say {needle!r}: {buf[-500:]}")


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_agent(*extra):
    """The real agent on a free loopback port; returns (process, port)."""
    p = subprocess.Popen([HEADROOM, "agent", "--listen", "127.0.0.1:0", "--log-level", "info", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    end = time.time() + 30
    while time.time() < end:
        line = p.stdout.readline()
        if not line:
            break
        if "serving on http://" in line:
            port = int(line.split("serving on http://", 1)[1].split()[0].rsplit(":", 1)[1])
            # Keep its log pipe drained, so that the agent can never block on a full pipe.
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, port
    stop(p)
    raise SystemExit("bench: the agent did not start")


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def rss_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def run_time(pid):
    """(CPU ns, times scheduled in) of every thread of pid, from the scheduler's own counters."""
    ns = slices = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                run, _, n = f.read().split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended in between
        ns += int(run)
        slices += int(n)
    return ns, slices


def agent_at_rest(seconds):
    """The agent on its defaults (a sample every 5 s), samples and the waits between them: CPU
    and wakeups a second, from schedstat (nanoseconds, unlike the 10 ms ticks of /proc/PID/stat)."""
    p, _ = start_agent()
    try:
        time.sleep(AGENT_SETTLE)
        ns0, n0 = run_time(p.pid)
        time.sleep(seconds)
        ns1, n1 = run_time(p.pid)
        return {"cpu_ms_per_s": (ns1 - ns0) / 1e6 / seconds, "wakeups_per_s": (n1 - n0) / seconds, "seconds": seconds}
    finally:
        stop(p)


def agent_footprint(seconds):
    """The agent sampling every 100 ms (50x the default rate) for `seconds`: RSS early and late,
    CPU per sample, series count."""
    p, port = start_agent("--interval", "100ms")
    try:
        time.sleep(5)
        early = rss_of(p.pid)
        first = scrape(port)
        time.sleep(seconds)
        late = rss_of(p.pid)
        last = scrape(port)
        samples = last["headroom_samples_total"] - first["headroom_samples_total"]
        cpu = last["process_cpu_seconds_total"] - first["process_cpu_seconds_total"]
        return {"early": early, "late": late, "samples": samples, "cpu_per_sample_ms": cpu * 1000 / max(samples, 1),
                "series": last["headroom_series"], "processes": last["headroom_processes_tracked"],
                "sample_ms": last["headroom_sample_duration_seconds"] * 1000, "seconds": seconds}
    finally:
        stop(p)


def own_memory_cgroup():
    """The bench's own v1 memory cgroup directory (children are made only under it)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrl, path = line.rstrip("\n").split(":", 2)
            if "memory" in ctrl.split(","):
                return "/sys/fs/cgroup/memory" + path, path
    raise SystemExit("bench: no v1 memory cgroup (the probe row needs one)")


def probe_vs_memset():
    """headroom probe (populate, all cores) and a plain single-threaded mmap+memset loop of
    1 GiB chunks over the same amount, in the same cgroup, one after the other."""
    base_dir, base_path = own_memory_cgroup()
    name = f"headroom-bench-probe-{os.getpid()}"
    d = os.path.join(base_dir, name)
    os.mkdir(d)
    try:
        with open(os.path.join(d, "memory.limit_in_bytes"), "w") as f:
            f.write(str(PROBE_LIMIT))
        out = subprocess.run([HEADROOM, "probe", "--cgroup", f"{base_path}/{name}", "--json"], capture_output=True,
                             text=True, check=True).stdout
        probe = json.loads(out)
        script = f"echo $$ > {d}/cgroup.procs && exec {MEMSET} {probe['allocated_bytes']}"
        plain = json.loads(subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout)
        return probe, plain
    finally:
        for _ in range(100):
            try:
                os.rmdir(d)
                break
            except OSError:
                time.sleep(0.05)


def with_headroom(fn, *extra):
    """The workload under the agent; the statistics of every program the agent loaded."""
    before = set(bpf_stats.programs())
    p, _ = start_agent(*extra)
    try:
        time.sleep(AGENT_SETTLE)  # the steady state a prover meets, not the agent's start-up
        result = fn()
        stats = [v for k, v in bpf_stats.programs().items() if k not in before]
        return result, stats
    finally:
        stop(p)


def named(stats, *names):
    return [s for s in stats if s.get("name") in names]


def with_floor(fn, program):
    """One program of floor.bpf.c alone on the fault tracepoint (empty_fault: what bpf_stats
    charges a program doing nothing; percpu_fault, storage_fault: one building block each)."""
    before = set(bpf_stats.programs())
    p = subprocess.Popen([FLOOR, program], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        wait_for(p, "attached")
        result = fn()
        stats = [v for k, v in bpf_stats.programs().items() if k not in before]
        return result, stats
    finally:
        stop(p)


def with_bpftrace(fn, program=None):
    before = set(bpf_stats.programs())
    p = subprocess.Popen(["bpftrace", "-e", program or BPFTRACE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        wait_for(p, "Attaching")
        time.sleep(1.0)
        result = fn()
        stats = [v for k, v in bpf_stats.programs().items() if k not in before and "page_fault" in v.get("name", "")]
        return result, stats
    finally:
        stop(p)


def main():
    if os.geteuid() != 0:
        raise SystemExit("bench: needs root (BPF programs, cgroups)")
    if not os.path.exists("/sys/kernel/tracing/events"):
        subprocess.run(["mount", "-t", "tracefs", "tracefs", "/sys/kernel/tracing"], check=False)
    stats_before = bpf_stats.enabled()
    times = {"none": [], "headroom": [], "bpftrace": [], "all_on": []}
    pages = 0
    hr_stats, bt_stats, floor_stats, bt_floor_stats = [], [], [], []
    try:
        # Wall time with the kernel's BPF statistics off: they add two clock reads per run.
        bpf_stats.set_enabled(False)
        fault_run()  # warm-up
        for _ in range(REPEATS):
            r = fault_run()
            times["none"].append(r["seconds"])
            pages = r["pages"]
            r, _ = with_headroom(fault_run)
            times["headroom"].append(r["seconds"])
            r, _ = with_bpftrace(fault_run)
            times["bpftrace"].append(r["seconds"])
            r, _ = with_headroom(fault_run, *ALL_ON)
            times["all_on"].append(r["seconds"])
        # Per-program cost, with the statistics on, in runs of their own.
        bpf_stats.set_enabled(True)
        # Each program alone on the tracepoint: the first program a tracepoint runs pays the
        # cache misses of the fault path's data, so programs measured together are not comparable.
        for _ in range(2):
            _, s = with_headroom(fault_run, *ALL_ON)
            hr_stats += s
            for program in ("empty_fault", "percpu_fault", "storage_fault"):
                _, s = with_floor(fault_run, program)
                floor_stats += s
            _, s = with_bpftrace(fault_run, BPFTRACE_EMPTY)
            bt_floor_stats += s
            _, s = with_bpftrace(fault_run)
            bt_stats += s
    finally:
        bpf_stats.set_enabled(stats_before)
    med = {k: statistics.median(v) for k, v in times.items()}
    hr_ns, hr_cnt = bpf_stats.per_run(named(hr_stats, "count_fault"))
    rss_ns, rss_cnt = bpf_stats.per_run(named(hr_stats, "rss_stat_new", "rss_stat_old"))
    # Everything headroom's programs did during the fault runs, per fault (2 runs of `pages`).
    all_ns = sum(s.get("run_time_ns", 0) for s in hr_stats) / (2 * pages)
    bt_ns, bt_cnt = bpf_stats.per_run(bt_stats)
    floor_ns, _ = bpf_stats.per_run(named(floor_stats, "empty_fault"))
    percpu_ns, _ = bpf_stats.per_run(named(floor_stats, "percpu_fault"))
    storage_ns, _ = bpf_stats.per_run(named(floor_stats, "storage_fault"))
    bt_floor_ns, _ = bpf_stats.per_run(bt_floor_stats)
    hr_net, bt_net = hr_ns - floor_ns, bt_ns - bt_floor_ns
    oom = json.loads(subprocess.run([OOM, WORKLOAD, "5"], capture_output=True, text=True, check=True).stdout)
    fp = agent_footprint(FOOTPRINT_SECONDS)
    rest = agent_at_rest(REST_SECONDS)
    probe, plain = probe_vs_memset()
    gib = float(1 << 30)
    probe_rate = probe["bytes_per_second"] / gib
    plain_rate = plain["bytes"] / plain["seconds"] / gib

    def added(k):
        return (med[k] - med["none"]) * 1e9 / pages

    rows = [
        "| measure | no agent | headroom sensors | bpftrace one-liner | target |",
        "| --- | --- | --- | --- | --- |",
        f"| fault workload wall time (median of {REPEATS}, bpf_stats off; {THREADS} threads x {int(ROUNDS)} x "
        f"{int(CHUNK) >> 20} MiB, {pages} pages) | {med['none']:.3f} s | {med['headroom']:.3f} s | "
        f"{med['bpftrace']:.3f} s | |",
        f"| ratio to no agent | 1.000 | {med['headroom'] / med['none']:.3f} | {med['bpftrace'] / med['none']:.3f} | "
        f"headroom <= 1.02 |",
        f"| added time per fault | | {added('headroom'):.1f} ns | {added('bpftrace'):.1f} ns | |",
        f"| the agent with the two fault-path sensors switched on (`--sensors.faults true --sensors.rss true`) | | "
        f"{med['all_on']:.3f} s, ratio {med['all_on'] / med['none']:.3f}, {added('all_on'):.1f} ns per fault | | |",
        f"| page-fault program (switched on), kernel bpf_stats run_time_ns / run_cnt (2 runs each, stats on, each "
        f"program alone on the tracepoint) | | {hr_ns:.1f} ns ({hr_cnt} events) | {bt_ns:.1f} ns ({bt_cnt} events) | "
        f"headroom <= 30 ns and < half of bpftrace: ratio {hr_ns / bt_ns:.2f} |",
        f"| the instrument's floor: an empty program alone on the same tracepoint (tp_btf for headroom's, bpftrace's "
        f"own tracepoint probe for bpftrace's) | | {floor_ns:.1f} ns | {bt_floor_ns:.1f} ns | |",
        f"| page-fault program above that floor | | {hr_net:.1f} ns | {bt_net:.1f} ns | "
        f"ratio {hr_net / bt_net:.2f} |",
        f"| building blocks, each alone on the same tracepoint, above the floor: one per-CPU array increment (the "
        f"least any counting program does); one task-storage lookup of the faulting thread and an increment | | "
        f"{percpu_ns - floor_ns:.1f} ns; {storage_ns - floor_ns:.1f} ns | | |",
        f"| kmem:rss_stat program (fires on every fault as well), bpf_stats per event | | {rss_ns:.1f} ns "
        f"({rss_cnt} events) | | |",
        f"| all of headroom's programs during the fault runs (all sensors on), bpf_stats run time per fault | | {all_ns:.1f} ns | | |",
        f"| OOM kill to its record in user space ({oom['kills']} real kills) | | median {oom['median_ms']:.3f} ms, "
        f"max {oom['max_ms']:.3f} ms | | <= 10 ms |",
        f"| agent footprint, sampling every 100 ms for {fp['seconds']} s ({int(fp['samples'])} samples, "
        f"{int(fp['processes'])} processes, {int(fp['series'])} series) | | RSS {fp['early'] / 2**20:.1f} MiB after 5 s, "
        f"{fp['late'] / 2**20:.1f} MiB at the end; {fp['cpu_per_sample_ms']:.2f} ms CPU and "
        f"{fp['sample_ms']:.2f} ms wall per sample | | no growth with uptime |",
        f"| agent at rest on its defaults (a sample every 5 s), over {rest['seconds']} s, from schedstat | | "
        f"{rest['cpu_ms_per_s']:.2f} ms CPU a second ({rest['cpu_ms_per_s'] / 10:.2f} % of a core), "
        f"{rest['wakeups_per_s']:.1f} wakeups a second | | |",
        f"| probe throughput over {probe['allocated_bytes'] / gib:.2f} GiB ({probe['probe_chunks']} chunks, "
        f"{probe['touch']}, {probe['threads']} threads) vs a plain single-threaded 1 GiB mmap+memset loop over the same | "
        f"memset loop {plain_rate:.2f} GiB/s | probe {probe_rate:.2f} GiB/s ({probe_rate / plain_rate:.2f}x); whole probe "
        f"{probe['duration_seconds']:.2f} s incl. reclaim {probe['reclaim_seconds']:.2f} s | | faster than the loop |",
    ]
    table = "\n".join(rows) + "\n"
    # The per-process sampling cost at 1,000, 5,000 and 10,000 processes beside node_exporter,
    # process-exporter and cAdvisor (tests/bench/processes.py).
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import processes
    sizes = list(processes.DEFAULT_SIZES)
    exporters, results = processes.run(BUILD, sizes, processes.DEFAULT_SECONDS)
    table += "\n" + processes.table(exporters, results, sizes, processes.DEFAULT_SECONDS)
    import http_abuse
    table += "\n" + http_abuse.table(http_abuse.run(BUILD, 20), 20)
    # The cost per sample against the CPU count: 6.12 guests of 2 and 32 CPUs (tests/bench/cpus.py).
    import cpus
    table += "\n" + cpus.table([cpus.run(os.path.abspath(BUILD), n, os.path.abspath(os.path.join(BUILD, "cpus")), True)
                                 for n in (2, 32)], True)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(f"# headroom benchmarks ({time.strftime('%Y-%m-%d %H:%M:%S')})\n\nMachine: {processes.machine()}."
                f"\n\n" + table)
    print(table)
    print(f"written to {OUT}")


if __name__ == "__main__":
    main()
