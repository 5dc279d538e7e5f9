#!/usr/bin/env python3
"""The kernel matrix: headroom's kernel-facing suites on Debian's own kernels, cgroup v2 and v1.

    tests/kernels/matrix.py [--suite full|smoke|capture] [--kernels 6.1,6.12] [--layouts ...]
                            [--runs KERNEL:LAYOUT,...,host] [--host] [--build DIR] [--out DIR] [--echo]
                            [--only STEP,...] [--gtest-filter PATTERN]

Each (kernel, layout) is one qemu guest (TCG) on the host's / (read only): it runs the suite's
steps (tests/kernels/suites.py) in the layout's cgroup and writes every step's log, the gtest
XML and its own facts (kernel, THP, cgroup of the runner) into a results folder under --out.
--host runs the same steps here, on this machine's kernel and hierarchy. A table of every step
and test, with times, goes to stdout and to OUT/results.md; the exit status is 0 only when every
step of every run passed. `make test-kernels` runs the whole matrix; `make test` runs the smoke
suite on 6.1 (v2, systemd layout).
"""

import argparse
import dataclasses
import datetime
import os
import pathlib
import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE.parent.parent
sys.path.insert(0, str(HERE))

import suites  # noqa: E402
import vm  # noqa: E402

LAYOUTS = ["v2-bare", "v2-systemd", "v1"]
ONLY = None  # --only: the steps to run, None for all
FILTER = None  # --gtest-filter: the integration tests to run, None for all


@dataclasses.dataclass
class RunResult:
    label: str
    kernel: str
    layout: str
    seconds: float
    boot: str  # "ok", "timed out", "crashed", "host"
    steps: list  # (name, rc, seconds)
    tests: list  # (suite.name, status, seconds, message)
    info: dict

    @property
    def passed(self) -> bool:
        if self.boot not in ("ok", "host") or not self.steps:
            return False
        return all(rc == 0 for _, rc, _ in self.steps) and not any(s == "failed" for _, s, _, _ in self.tests)


def read_steps(results: pathlib.Path) -> list:
    out = []
    f = results / "steps.tsv"
    if f.exists():
        for line in f.read_text().splitlines():
            name, rc, secs = line.split("\t")
            out.append((name, int(rc), float(secs)))
    return out


def read_tests(results: pathlib.Path) -> list:
    out = []
    for x in sorted(results.glob("*.xml")):
        try:
            root = ET.parse(x).getroot()
        except ET.ParseError as e:
            out.append((x.stem, "failed", 0.0, f"unreadable gtest XML: {e}"))
            continue
        for case in root.iter("testcase"):
            name = f"{case.get('classname')}.{case.get('name')}"
            failure = case.find("failure")
            skipped = case.find("skipped") is not None or case.get("result") == "skipped"
            status = "failed" if failure is not None else ("skipped" if skipped else "passed")
            msg = (failure.get("message") or "").splitlines()[0][:160] if failure is not None else ""
            if skipped:
                sk = case.find("skipped")
                msg = (sk.get("message") if sk is not None else "") or ""
            out.append((name, status, float(case.get("time", "0")), msg))
    return out


def read_info(results: pathlib.Path) -> dict:
    info = {}
    f = results / "guest-info.txt"
    if f.exists():
        for line in f.read_text().splitlines():
            k, _, v = line.partition(" ")
            info[k] = v
    return info


def write_plan(results: pathlib.Path, layout: str, steps: list) -> None:
    results.mkdir(parents=True, exist_ok=True)
    for old in list(results.glob("*.log")) + list(results.glob("*.xml")) + [results / "steps.tsv"]:
        old.unlink(missing_ok=True)
    (results / "env.sh").write_text(f"LAYOUT={layout}\n")
    lines = ["# written by tests/kernels/matrix.py"]
    for s in steps:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in s.env.items())
        cmd = " ".join(shlex.quote(a) for a in s.argv)
        lines.append(f"step {s.name} {s.timeout} {'env ' + env + ' ' if env else ''}{cmd}")
    (results / "plan.sh").write_text("\n".join(lines) + "\n")


def run_guest(tree: vm.KernelTree, initrd: pathlib.Path, layout: str, suite: str, build: pathlib.Path,
              out: pathlib.Path, memory: int, cpus: int, echo: bool, icount: bool = False) -> RunResult:
    label = f"{tree.release.name}-{layout}"
    results = out / label
    steps = suites.filtered(suites.only(suites.plan(suite, build, layout, results), ONLY), FILTER)
    write_plan(results, layout, steps)
    budget = sum(s.timeout + 15 for s in steps) + 120  # the steps' own limits, boot and shutdown
    vm.log(f"{label}: booting {tree.package} {tree.version} ({len(steps)} steps, at most {budget} s)")
    r = vm.boot(tree, initrd, results, HERE / "guest.sh", memory_mib=memory, cpus=cpus, timeout_s=budget, echo=echo,
                keep=[SOURCE, build, out], icount=icount)
    boot = "ok" if r.powered_off else ("timed out" if r.timed_out else "crashed")
    done = read_steps(results)
    if boot == "ok" and len(done) < len(steps):
        boot = "crashed"  # powered off (a panic with panic=-1) before its last step
    res = RunResult(label, tree.uname, layout, r.seconds, boot, done, read_tests(results), read_info(results))
    vm.log(f"{label}: {'passed' if res.passed else 'FAILED'} in {r.seconds:.0f} s ({boot})")
    return res


def run_host(suite: str, build: pathlib.Path, out: pathlib.Path) -> RunResult:
    """The same steps on this machine, in the test process's own cgroup."""
    mode = suites.host_layout()
    label = f"host-{os.uname().release}-{mode}"
    results = out / "host"
    steps = suites.filtered(suites.only(suites.plan(suite, build, mode, results, guest=False), ONLY), FILTER)
    write_plan(results, mode, steps)
    t0 = time.monotonic()
    for s in steps:
        vm.log(f"host: step {s.name}")
        st0 = time.monotonic()
        with open(results / f"{s.name}.log", "wb") as log:
            try:
                rc = subprocess.run(s.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    timeout=s.timeout, env={**os.environ, **s.env}).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        with open(results / "steps.tsv", "a") as f:
            f.write(f"{s.name}\t{rc}\t{time.monotonic() - st0:.1f}\n")
    info = {"kernel": os.uname().release, "layout": mode,
            "thp": pathlib.Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()}
    return RunResult(label, os.uname().release, mode, time.monotonic() - t0, "host", read_steps(results),
                     read_tests(results), info)


def table(runs: list, suite: str) -> str:
    lines = [f"# Kernel matrix: suite {suite}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             "| run | kernel | layout | THP | result | wall | steps | tests passed / failed / skipped |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        n = {k: sum(1 for t in r.tests if t[1] == k) for k in ("passed", "failed", "skipped")}
        steps = ", ".join(f"{name} {'ok' if rc == 0 else f'rc={rc}'} {secs:.0f}s" for name, rc, secs in r.steps) or "none ran"
        thp = r.info.get("thp", "")
        thp = thp[thp.find("[") + 1:thp.find("]")] if "[" in thp else thp
        lines.append(f"| {r.label} | {r.kernel} | {r.layout} | {thp} | {'passed' if r.passed else 'FAILED'} ({r.boot}) "
                     f"| {r.seconds:.0f} s | {steps} | {n['passed']} / {n['failed']} / {n['skipped']} |")
    for r in runs:
        bad = [t for t in r.tests if t[1] != "passed"]
        if bad:
            lines += ["", f"## {r.label}: not passed", ""]
            lines += [f"- {name}: {status} {secs:.1f} s {msg}" for name, status, secs, msg in bad]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=suites.SUITES, default="full")
    ap.add_argument("--kernels", default="6.1,6.12", help="comma-separated: " + ", ".join(vm.RELEASES))
    ap.add_argument("--layouts", default="v2-bare,v2-systemd", help="comma-separated: " + ", ".join(LAYOUTS))
    ap.add_argument("--runs", default=None,
                    help="KERNEL:LAYOUT,... (and 'host') instead of --kernels x --layouts, e.g. 6.1:v1,host")
    ap.add_argument("--host", action="store_true", help="also run the suite on this machine")
    ap.add_argument("--no-guests", action="store_true", help="only the host run")
    ap.add_argument("--build", default=str(SOURCE / "build" / "debug"), help="the build tree whose binaries run")
    ap.add_argument("--cache", default=str(SOURCE / "build" / "kernels" / "cache"), help="kernel downloads")
    ap.add_argument("--out", default=None, help="results (default build/kernels/results/SUITE)")
    ap.add_argument("--memory", type=int, default=3072, help="guest memory in MiB")
    ap.add_argument("--cpus", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--icount", action="store_true",
                    help="guests' clocks count instructions (qemu -icount): timings that are work, not the host's load")
    ap.add_argument("--offline", action="store_true", help="use cached kernels, never ask apt")
    ap.add_argument("--echo", action="store_true", help="show the guests' consoles")
    ap.add_argument("--only", default=None,
                    help="comma-separated step names of the suite (e.g. kit-workload-names): run just those")
    ap.add_argument("--gtest-filter", default=None,
                    help="a gtest filter for the steps that run the integration tests (e.g. Events.*)")
    ap.add_argument("--skip-unless-root", action="store_true", help="exit 77 (ctest's skip) when not root")
    a = ap.parse_args()

    def bad(msg: str) -> int:
        print(f"matrix: {msg}", file=sys.stderr)
        return 2

    global ONLY, FILTER
    FILTER = a.gtest_filter
    ONLY = [s for s in a.only.split(",") if s] if a.only else None
    known = [s.name for s in suites.plan(a.suite, pathlib.Path("/"), "v2-bare", pathlib.Path("/"))]
    for s in ONLY or []:
        if s not in known:
            return bad(f"--only: the {a.suite} suite has no step \"{s}\" (its steps: {', '.join(known)})")
    wanted = []  # (kernel, layout) in order
    with_host = a.host or a.no_guests
    if a.runs:
        for r in (x for x in a.runs.split(",") if x):
            if r == "host":
                with_host = True
                continue
            k, sep, x = r.partition(":")
            if not sep:
                return bad(f"--runs: \"{r}\" is not KERNEL:LAYOUT or host")
            wanted.append((k, x))
    elif not a.no_guests:
        wanted = [(k, x) for k in a.kernels.split(",") if k for x in a.layouts.split(",") if x]
    for k, x in wanted:
        if k not in vm.RELEASES:
            return bad(f"unknown kernel \"{k}\" (known: {', '.join(vm.RELEASES)})")
        if x not in LAYOUTS:
            return bad(f"unknown layout \"{x}\" (known: {', '.join(LAYOUTS)})")
    build = pathlib.Path(a.build).resolve()
    if not (build / "headroom").exists():
        return bad(f"--build {build}: no headroom binary there (build it first: make build-debug)")
    if os.geteuid() != 0:
        if a.skip_unless_root:
            print("matrix: skipped: needs root (the guests' 9p share of / reads every file as the host's root)")
            return 77
        return bad("needs root (the guests' 9p share of / reads every file as the host's root does)")
    cache = pathlib.Path(a.cache).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    out = pathlib.Path(a.out).resolve() if a.out else SOURCE / "build" / "kernels" / "results" / a.suite
    out.mkdir(parents=True, exist_ok=True)

    runs = []
    trees = {}
    for k, x in wanted:
        if k not in trees:
            try:
                tree = vm.fetch(vm.RELEASES[k], cache, offline=a.offline)
                trees[k] = (tree, vm.initramfs(tree, cache))
            except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
                print(f"matrix: kernel {k}: {e}", file=sys.stderr)
                trees[k] = None
        if trees[k] is None:
            runs.append(RunResult(f"{k}-{x}", k, x, 0.0, "crashed", [], [], {"error": "the kernel could not be fetched"}))
            continue
        tree, initrd = trees[k]
        runs.append(run_guest(tree, initrd, x, a.suite, build, out, a.memory, a.cpus, a.echo, a.icount))
    if with_host:
        runs.append(run_host(a.suite, build, out))
    text = table(runs, a.suite)
    (out / "results.md").write_text(text)
    print(text)
    for r in runs:
        if not r.passed:
            print(f"matrix: {r.label} failed; its logs are in {out / r.label if r.boot != 'host' else out / 'host'}",
                  file=sys.stderr)
    return 0 if runs and all(r.passed for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
