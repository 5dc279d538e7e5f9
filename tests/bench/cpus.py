#!/usr/bin/env python3
"""The cost of sampling every process against the CPU count (part of `make bench`; alone:
`python3 tests/bench/cpus.py BUILD [--cpus 2,32] [--wall] [--out FILE]`, root).

Since 6.2 each process's RSS counters are per-CPU; summed for every process, the task iterator's
cost per process grew with the machine's CPUs (a read per CPU). The agent now sums them only
where the exact figure matters and reads the rest as their folded counts. This boots Debian 13's
6.12 under qemu (TCG) with each CPU count in turn, the same 2,000 sleeping processes in each, and
runs tests/bench/guest_cost.py there through the kernel matrix (`--suite cpu-cost`, cgroup v2): the
iterator's program per task (the kernel's BPF stats) and the sampling thread's `processes` phase
per sample, side by side, with the ratio of the largest count's to the smallest's (the target:
within 10%).

The guests count instructions (qemu's `-icount shift=0`: one nanosecond of the guest's clocks per
instruction, every vCPU run in turn by one host thread), so the figures are the work each sample
does, in instructions, whatever else the host runs: under plain TCG each vCPU is a host thread
that the host's own load preempts, and a 2-vCPU guest on a 2-core host measured its own
preemption (the figures moved by a third from run to run). `--wall` measures host-timed guests
instead. Each guest takes six to eight minutes here (booting 32 vCPUs on one host thread
included).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE.parent.parent
KERNEL = "6.12"


def run(build, cpus, out, icount):
    build, out = pathlib.Path(build), pathlib.Path(out)
    results = out / f"cpus-{cpus}"
    cost = results / f"{KERNEL}-v2-bare" / "cost.json"
    cost.unlink(missing_ok=True)
    subprocess.run([sys.executable, str(SOURCE / "tests" / "kernels" / "matrix.py"), "--suite", "cpu-cost", "--runs",
                    f"{KERNEL}:v2-bare", "--build", str(build), "--cpus", str(cpus), "--out", str(results), *(["--icount"] if icount else [])],
                   check=False)
    if not cost.exists():
        raise SystemExit(f"cpus: no {cost} (the guest's log is under {results})")
    return json.loads(cost.read_text())


def table(rows, icount):
    clock = ("instruction-counted (`-icount shift=0`: 1 ns = 1 instruction)" if icount
             else "timed by the host's clock")
    lines = [f"## Cost per sample against the CPU count: Linux {rows[0]['kernel']} under qemu (TCG), "
             f"{rows[0]['processes']} sleeping processes, 1 s samples, {clock}\n",
             "| CPUs | tasks | task iterator per task | its tasks per sample | `processes` phase per sample | "
             "whole agent per sample |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['cpus_online']} | {r['tasks']} | {r['iterator_ns_per_task']:.0f} ns | "
                     f"{r['iterator_tasks_per_sample']:.0f} | {r['processes_phase_ms_per_sample']:.2f} ms | "
                     f"{r['agent_ms_per_sample']:.2f} ms |")
    lo, hi = rows[0], rows[-1]

    def ratio(key):
        return hi[key] / lo[key] if lo[key] else float("nan")
    per_task, phase = ratio("iterator_ns_per_task"), ratio("processes_phase_ms_per_sample")
    ok = abs(per_task - 1) <= 0.10 and abs(phase - 1) <= 0.10
    lines += ["", f"{hi['cpus_online']} CPUs against {lo['cpus_online']}: the iterator per task {per_task:.2f}x, "
                  f"the `processes` phase per sample {phase:.2f}x (target: within 10%: "
                  f"{'met' if ok else 'NOT met'})."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--cpus", default="2,32")
    ap.add_argument("--out", help="write the table here too")
    ap.add_argument("--wall", action="store_true", help="guests timed by the host's clock, not by instructions")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("cpus: needs root (qemu's guests run the agent as root)")
    build = pathlib.Path(a.build).resolve()
    out = build / "cpus"
    rows = [run(build, int(c), out, not a.wall) for c in a.cpus.split(",")]
    text = table(rows, not a.wall)
    print(text)
    if a.out:
        pathlib.Path(a.out).write_text(text)


if __name__ == "__main__":
    sys.exit(main())
