#!/usr/bin/env python3
"""headroom's GPU check: the agent beside real CUDA programs on a machine with an NVIDIA GPU.

Run from the bundle `make gpu-check` builds (run.sh calls it with the bundle's binaries), as root:

  1. figures: headroom-cuda-prover holds a pinned pool (cudaHostAlloc chunks), device memory
     (cudaMalloc) and a 1 GiB SRS-style load (a file mapped and copied into pinned memory); the
     agent's pinned and device figures for it must be within 5% of what it allocated, and the
     driver's own figure for it (NVML) at least its device memory.
  2. the driver's memory: what the program's cgroup is charged that no process shows (the
     snapshot's invisible overhead), beside the pinned bytes: told, not judged.
  3. a real OOM kill of a CUDA process: the prover in a cgroup with a limit, holding pinned and
     device memory, grows host memory until the kernel kills it; the journal record's ledger
     must carry its pinned and device memory at the kill within 5%.

It writes OUT/gpu-check.md (the machine, GPU, driver and kernel, each check with its numbers,
and the kill's report) and exits 0 when every check passes, 1 when one fails, 77 when there is
no GPU to check on (the reason said).

--stand-in DIR runs the same checks with the tests' stand-in driver instead (DIR holds
libcuda.so.1, libnvidia-ml.so.1 and cuda-client): the bundle checked on a machine without a GPU.
Standard library only."""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

MiB = 1 << 20
GiB = 1 << 30
SERVING = re.compile(r"serving on (http://[0-9.]+:\d+)")


def human(n):
    if n is None:
        return "-"
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def within(got, want, tolerance=0.05):
    return got is not None and want > 0 and abs(got - want) <= tolerance * want


class Cgroup:
    """A memory cgroup of the check's own, under the one it runs in (v1 or v2), removed after."""

    def __init__(self, name, limit=None):
        with open("/proc/self/cgroup") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
        own = next((p for _, c, p in lines if "memory" in c.split(",")), None)
        if own is not None:
            root = "/sys/fs/cgroup/memory"
            self.limit_file = "memory.limit_in_bytes"
        else:
            own = next(p for h, c, p in lines if h == "0" and c == "")
            root = "/sys/fs/cgroup"
            self.limit_file = "memory.max"
        self.path = os.path.join(own, f"{name}-{os.getpid()}").replace("//", "/")
        self.dir = root + self.path
        os.makedirs(self.dir, exist_ok=True)
        if limit is not None:
            with open(os.path.join(self.dir, self.limit_file), "w") as f:
                f.write(str(limit))

    def procs(self):
        return os.path.join(self.dir, "cgroup.procs")

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)


class Agent:
    def __init__(self, headroom, out, extra, env):
        self.log_path = os.path.join(out, "agent.log")
        self.journal = os.path.join(out, "oom.hrj")
        self.log = open(self.log_path, "w")
        args = [*headroom, "--log-level", "info", "agent", "--listen", "127.0.0.1:0", "--interval", "500ms",
                "--journal", self.journal, "--journal.catch-up", "off", "--budget.enabled", "false", *extra]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.url = None
        end = time.time() + 60
        while time.time() < end and self.url is None:
            m = SERVING.search(open(self.log_path).read())
            if m:
                self.url = m.group(1)
            elif self.proc.poll() is not None:
                raise SystemExit(f"gpu-check: the agent exited ({self.proc.returncode}):\n{self.text()}")
            time.sleep(0.1)
        if self.url is None:
            raise SystemExit(f"gpu-check: the agent did not start listening in 60 s:\n{self.text()}")

    def text(self):
        return open(self.log_path).read()

    def get(self, path):
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as r:
                return json.load(r)
        except Exception:  # noqa: BLE001 - not up yet, or between two samples
            return None

    def process(self, pid):
        snap = self.get("/v1/snapshot")
        for p in (snap or {}).get("processes", []):
            if p.get("pid") == pid:
                return snap, p
        return snap, None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Program:
    """The CUDA program in a cgroup; its first line said what it holds."""

    def __init__(self, argv, cgroup, env):
        self.proc = subprocess.Popen(["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', cgroup.procs(), *argv],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        self.first = self.proc.stdout.readline().strip()

    def said(self):
        try:
            return json.loads(self.first)
        except ValueError:
            return None

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def end(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wait_for(what, seconds, check):
    end = time.time() + seconds
    while time.time() < end:
        got = check()
        if got:
            return got
        time.sleep(0.25)
    return None


def machine():
    info = {"kernel": os.uname().release, "gpu": None, "driver": None}
    smi = shutil.which("nvidia-smi")
    if smi:
        r = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, check=False)
        if r.returncode == 0 and r.stdout.strip():
            first = r.stdout.strip().splitlines()[0].split(", ")
            info["gpu"], info["driver"] = first[0], first[1]
            info["gpus"] = r.stdout.strip().splitlines()
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--headroom", required=True, help="the headroom command (a path, or a launcher and a path)")
    ap.add_argument("--prover", help="headroom-cuda-prover")
    ap.add_argument("--loader", default="", help="runs the program through this (the bundle's loader and libraries)")
    ap.add_argument("--out", required=True, help="where gpu-check.md, the agent's log and the journal go")
    ap.add_argument("--stand-in", metavar="DIR", help="the stand-in driver's directory (no GPU: the check itself)")
    ap.add_argument("--srs-bytes", type=int, default=GiB, help="the SRS-style file's size (default 1 GiB)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("gpu-check: run as root (BPF, cgroups)", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    headroom = a.headroom.split()
    env = dict(os.environ)
    lines = ["# headroom GPU check", ""]
    info = machine()
    extra = []
    if a.stand_in:
        fake = os.path.abspath(a.stand_in)
        gpu_dir = tempfile.mkdtemp(prefix="headroom-gpu-check-")
        env["HEADROOM_FAKE_GPU_DIR"] = gpu_dir
        extra += ["--cuda-library", f"{fake}/libcuda.so.1", "--sensors.nvml-library", f"{fake}/libnvidia-ml.so.1"]
        # cuda-client holds 1 + 4 MiB pinned and 8 MiB + a 1024 x 100 pitch on the device.
        figures_argv = kill_argv = [f"{fake}/cuda-client", f"{fake}/libcuda.so.1"]
        expect = {"pinned_bytes": 5 * MiB, "device_bytes": 8 * MiB + 1024 * 100}
        expect_kill = expect
        kill_limit = 96 * MiB
        info["gpu"] = info["gpu"] or "the tests' stand-in driver (no GPU)"
    else:
        if not a.prover:
            ap.error("--prover is required without --stand-in")
        # A GPU to check on at all: one small device allocation, before anything else is set up.
        probe = subprocess.run([*a.loader.split(), a.prover, "--device", str(MiB)], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=120, check=False)
        first = (probe.stdout.strip().splitlines() or [""])[0]
        if '"ready": true' not in first:
            lines += [f"- kernel: {info['kernel']}", f"- GPU: {info['gpu'] or 'not found by nvidia-smi'}", "",
                      f"`headroom-cuda-prover --device {MiB}` said: `{first or probe.stderr.strip()}`", "",
                      "No GPU to check on: the program's first CUDA call failed (above)."]
            write(a.out, lines)
            print("\n".join(lines))
            return 77
        # The runtime is linked into the program: its calls are probed there, the driver's found
        # in its maps.
        extra += ["--cuda-runtime-target", os.path.abspath(a.prover)]
        srs = os.path.join(a.out, "srs.bin")
        with open(srs, "wb") as f:
            block = os.urandom(MiB)
            for _ in range(a.srs_bytes // MiB):
                f.write(block)
        figures_argv = [a.prover, "--pool", "4", "--chunk", str(256 * MiB), "--device", str(2 * GiB), "--srs", srs]
        kill_argv = [a.prover, "--pool", "2", "--chunk", str(128 * MiB), "--device", str(GiB)]
        figures_argv = a.loader.split() + figures_argv
        kill_argv = a.loader.split() + kill_argv
        expect = None  # what the program says it holds
        expect_kill = None
        kill_limit = GiB
    lines += [f"- kernel: {info['kernel']}", f"- GPU: {info['gpu'] or 'not found by nvidia-smi'}",
              f"- driver: {info['driver'] or '-'}", f"- when: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
              f"- mode: {'stand-in driver' if a.stand_in else 'real GPU'}", ""]
    agent = Agent(headroom, a.out, extra, env)
    results = []
    try:
        agent_ok = wait_for("a sample", 60, lambda: agent.get("/v1/snapshot"))
        if not agent_ok:
            raise SystemExit("gpu-check: the agent answers no snapshot:\n" + agent.text())
        gpus = agent_ok.get("gpus", {})
        lines += [f"- NVML: {gpus.get('state')}: {gpus.get('reason')}", ""]
        results += check_figures(agent, figures_argv, expect, env, lines, gpus)
        if results and results[0] == "no-gpu":
            write(a.out, lines + ["No GPU to check on: the program's first CUDA call failed (above)."])
            return 77
        results += check_kill(agent, kill_argv, expect_kill, kill_limit, env, lines, headroom)
    finally:
        agent.stop()
        if not a.stand_in and os.path.exists(os.path.join(a.out, "srs.bin")):
            os.remove(os.path.join(a.out, "srs.bin"))
        if a.stand_in:
            shutil.rmtree(env["HEADROOM_FAKE_GPU_DIR"], ignore_errors=True)
    failed = [r for r in results if r.startswith("FAIL")]
    lines += ["## Verdict", "", f"{len(results) - len(failed)} of {len(results)} checks passed." +
              ("" if not failed else " Failed: " + "; ".join(failed)), ""]
    write(a.out, lines)
    print("\n".join(lines))
    return 1 if failed else 0


def verdict(lines, ok, name, detail):
    r = ("PASS" if ok else "FAIL") + f" {name}"
    lines.append(f"- **{'PASS' if ok else 'FAIL'}** {name}: {detail}")
    return r


def check_figures(agent, argv, expect, env, lines, gpus):
    lines += ["## 1. Pinned and device memory of a running CUDA program", ""]
    cg = Cgroup("headroom-gpu-check-figures")
    prog = Program(argv, cg, env)
    try:
        said = prog.said()
        if expect is None:
            if not said or not said.get("ready"):
                lines += [f"`{' '.join(argv)}` said: `{prog.first}`", ""]
                return ["no-gpu"]
            expect = {"pinned_bytes": said["pinned_bytes"], "device_bytes": said["device_bytes"]}
        pid = prog.proc.pid
        shown = " ".join(os.path.basename(x) if x.startswith("/") else x for x in argv if not x.startswith("--library-path"))
        lines += [f"`{shown}` (pid {pid}) "
                  f"holds {human(expect['pinned_bytes'])} pinned and {human(expect['device_bytes'])} on the device.", ""]

        def seen():
            snap, p = agent.process(pid)
            if p and p.get("pinned") and p.get("device_bytes") and p.get("gpu_memory_bytes") is not None:
                return snap, p
            return None
        got = wait_for("the program's figures", 60, seen)
        if not got:
            _, p = agent.process(pid)
            return [verdict(lines, False, "figures", f"the agent never showed them: {json.dumps(p)}")]
        snap, p = got
        pinned = p["pinned"]["live_bytes"]
        device = p["device_bytes"]
        nvml = p["gpu_memory_bytes"]
        out = [
            verdict(lines, within(pinned, expect["pinned_bytes"]), "pinned",
                    f"the agent {human(pinned)}, the program {human(expect['pinned_bytes'])} "
                    f"({p['pinned'].get('residency')}, by {p['pinned'].get('source')})"),
            verdict(lines, within(device, expect["device_bytes"]), "device",
                    f"the agent {human(device)}, the program {human(expect['device_bytes'])}"),
            verdict(lines, nvml >= expect["device_bytes"], "NVML",
                    f"the driver {human(nvml)} for the process (its allocations and its context: "
                    f"{human(nvml - expect['device_bytes'])} more than it allocated)"),
        ]
        lines.append("")
        # The driver's memory as the snapshot sees it: the cgroup's charge that no process shows.
        c = next((c for c in snap.get("cgroups", []) if c["memory"]["path"] == cg.path), None)
        lines += ["## 2. What the cgroup is charged that no process shows", ""]
        if c:
            att = c["attribution"]
            lines += [f"- cgroup {cg.path}: usage {human(c['memory'].get('usage_bytes'))}, visible (RSS and "
                      f"page cache of its processes) {human(att.get('visible_bytes'))}, invisible "
                      f"{human(att.get('invisible_bytes'))}, unattributed {human(att.get('unattributed_bytes'))}",
                      f"- the process: RSS {human(p.get('rss_bytes'))} (anon {human(p.get('rss_anon_bytes'))}, "
                      f"shmem {human(p.get('rss_shmem_bytes'))}), locked {human(p.get('locked_bytes'))}, "
                      f"pinned_vm {human(p.get('pinned_vm_bytes'))}, CUDA pinned {human(pinned)}",
                      "- parts: " + ", ".join(f"{x['kind']} {human(x['bytes'])}" for x in att.get("parts", [])), ""]
        else:
            lines += [f"- the snapshot has no cgroup {cg.path}", ""]
        return out
    finally:
        prog.end()
        cg.remove()


def check_kill(agent, argv, expect, limit, env, lines, headroom):
    lines += ["## 3. The ledger at a real OOM kill of a CUDA process", ""]
    cg = Cgroup("headroom-gpu-check-kill", limit)
    prog = Program(argv, cg, env)
    try:
        said = prog.said()
        if expect is None:
            if not said or not said.get("ready"):
                return [verdict(lines, False, "kill", f"the program did not get ready: {prog.first}")]
            expect = {"pinned_bytes": said["pinned_bytes"], "device_bytes": said["device_bytes"]}
        pid = prog.proc.pid
        # A sample with its figures first, so that the ledger has the driver's too.
        wait_for("a sample of it", 60, lambda: (agent.process(pid)[1] or {}).get("device_bytes"))
        prog.send("grow")
        prog.proc.wait(120)
        rec = wait_for("the record", 60, lambda: record(headroom, agent.journal, pid))
        if not rec:
            return [verdict(lines, False, "kill", f"no record in {agent.journal} (exit {prog.proc.returncode})")]
        ledger = next((x for x in rec.get("ledger", []) if x.get("pid") == pid), None)
        if not ledger or not ledger.get("cuda"):
            return [verdict(lines, False, "ledger", f"no CUDA figures for pid {pid}: {json.dumps(rec.get('ledger'))}")]
        cuda = ledger["cuda"]
        out = [
            verdict(lines, cuda.get("at_kill") is True and within(cuda.get("pinned_bytes"), expect["pinned_bytes"]),
                    "ledger pinned", f"{human(cuda.get('pinned_bytes'))} at the kill (at_kill {json.dumps(cuda.get('at_kill'))}), "
                    f"the program {human(expect['pinned_bytes'])}"),
            verdict(lines, within(cuda.get("device_bytes"), expect["device_bytes"]), "ledger device",
                    f"{human(cuda.get('device_bytes'))} at the kill, the program {human(expect['device_bytes'])}"),
            verdict(lines, (ledger.get("gpu_memory") or {}).get("bytes", 0) >= expect["device_bytes"], "ledger NVML",
                    f"{human((ledger.get('gpu_memory') or {}).get('bytes'))} at the last sample"),
        ]
        text = subprocess.run([*headroom, "report", "--journal", agent.journal, "--id", str(rec["id"])],
                              capture_output=True, text=True, check=False).stdout
        lines += ["", "The kill as `headroom report` tells it:", "", "```", text.rstrip(), "```", ""]
        return out
    finally:
        prog.end()
        cg.remove()


def record(headroom, journal, pid):
    """The journal's record of the kill of `pid`, once it is there."""
    r = subprocess.run([*headroom, "report", "--journal", journal, "--list", "--json"], capture_output=True,
                       text=True, check=False)
    if r.returncode != 0 or not r.stdout.strip():
        return None
    try:
        records = json.loads(r.stdout)
    except ValueError:
        return None
    for rec in records:
        if any(v.get("tgid") == pid or v.get("pid") == pid for v in rec.get("event", {}).get("victims", [])):
            return rec
    return None


def write(out, lines):
    with open(os.path.join(out, "gpu-check.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
