#!/usr/bin/env python3
"""One machine's cost of sampling every process, for tests/bench/cpus.py (which runs it in 6.12
guests of 2 and 32 CPUs through the kernel matrix's `cpu-cost` suite; alone, as root:
`guest_cost.py HEADROOM OUT.json [--processes 2000] [--samples 20]`).

Starts `--processes` sleeping processes, then the agent with 1 s samples, each a walk of every
process (`--process-walk-budget 0s`), and once it has taken its first samples measures, over
`--samples` more:
- the task iterator's BPF program per task it ran for (the kernel's BPF stats, run_time_ns over
  run_cnt: the part of the cost that grew with the CPUs when every process's per-CPU RSS
  counters were summed);
- the sampling thread's CPU per sample in its `processes` phase (the iterator's read, the
  decoding and the /proc files still read), from headroom_sample_cpu_seconds_total;
- the whole agent's CPU per sample (process_cpu_seconds_total).
Writes them, the CPUs and the kernel, as JSON.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import bpf_stats
from processes import samples_of

PORT = 19700
SLEEP = "/bin/sleep"


def metrics():
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=10) as r:
        return samples_of(r.read().decode())


def phase_cpu(m, phase):
    return sum(v for k, v in m.items() if k.startswith("headroom_sample_cpu_seconds_total{") and
               f'phase="{phase}"' in k)


def wait_samples(proc, at_least, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"guest_cost: the agent exited ({proc.returncode})")
        try:
            m = metrics()
            if m.get("headroom_samples_total", 0) >= at_least:
                return m
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"guest_cost: no {at_least} samples in {timeout} s")


def iterator_programs():
    return [p for p in bpf_stats.programs().values() if p.get("name") == "dump_tasks"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("headroom")
    ap.add_argument("out")
    ap.add_argument("--processes", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=20)
    a = ap.parse_args()
    sleepers = [os.posix_spawn(SLEEP, [SLEEP, "infinity"], os.environ) for _ in range(a.processes)]
    log = open(a.out + ".agent.log", "w")
    # Every sample walks every process (--process-walk-budget 0s): a walk's cost is what is
    # compared, where the budget would spread the walks by what they cost.
    agent = subprocess.Popen([a.headroom, "agent", "--listen", f"127.0.0.1:{PORT}", "--interval", "1s",
                              "--process-walk-budget", "0s"], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_samples(agent, 3, 300)  # start-up: the first samples read every process's /proc files
        bpf_stats.set_enabled(True)
        m0 = metrics()
        ns0, runs0 = bpf_stats.totals(iterator_programs())
        first = m0["headroom_samples_total"]
        m1 = wait_samples(agent, first + a.samples, 60 + 10 * a.samples)
        ns1, runs1 = bpf_stats.totals(iterator_programs())
        samples = m1["headroom_samples_total"] - first
        tasks = int(subprocess.run(["sh", "-c", "ls /proc | grep -c '^[0-9]'"], capture_output=True,
                                   text=True).stdout.strip() or 0)
        result = {
            "kernel": os.uname().release,
            "cpus_online": os.cpu_count(),
            "processes": a.processes,
            "tasks": tasks,
            "samples": samples,
            "iterator_ns_per_task": (ns1 - ns0) / (runs1 - runs0) if runs1 > runs0 else None,
            "iterator_tasks_per_sample": (runs1 - runs0) / samples if samples else None,
            "processes_phase_ms_per_sample": (phase_cpu(m1, "processes") - phase_cpu(m0, "processes")) * 1000 / samples,
            "agent_ms_per_sample": (m1["process_cpu_seconds_total"] - m0["process_cpu_seconds_total"]) * 1000 / samples,
        }
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps(result))
    finally:
        bpf_stats.set_enabled(False)
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
        for pid in sleepers:
            os.kill(pid, signal.SIGKILL)
        for pid in sleepers:
            os.waitpid(pid, 0)


if __name__ == "__main__":
    sys.exit(main())
