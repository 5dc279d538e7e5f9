#!/usr/bin/env python3
"""Workload names end to end: a Podman container's OOM kill carries the container's name on the
metrics, in /v1/snapshot and /v1/ooms, and in `headroom report`; a systemd-style cgroup carries
its unit.

The names come from a real Podman API service (`podman system service` on a socket of the
test's own, Docker-compatible `GET /containers/<id>/json`), which the real agent is pointed at
with --workloads.podman-socket. Where podman runs containers (the kernel matrix's cgroup v2
guests) the container is a real one: `podman run --rootfs /` with a memory limit, the test's
workload inside, OOM-killed when it grows. On a host where podman cannot start a container
(this project's CI machine: a hybrid hierarchy, which crun rejects) the container is created for
real (`podman create`: the engine knows its id and name) and its process is placed by the test
in the cgroup the runtime would have made for it (`libpod_parent/libpod-<id>`, Podman's cgroupfs
layout), under the test's own memory cgroup, with the limit there.

Environment: HEADROOM_BINARY, HEADROOM_WORKLOAD (as the other kit tests); root. Exit 77 when
not root.
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
LIMIT = 96 * MiB
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)
    return ok


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def get_text(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def wait_for(what, cond, seconds=30.0):
    """cond() until it returns something true (returned), or None after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            v = cond()
        except OSError:
            v = None
        if v:
            return v
        time.sleep(0.1)
    check(False, f"timed out waiting for {what}")
    return None


def series(metrics: str, name: str, **labels) -> list:
    """The sample lines of `name` whose labels include every `labels` pair."""
    out = []
    for line in metrics.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            out.append(line)
    return out


class Podman:
    """podman with a storage and a service of this test's own (vfs, cgroupfs, events in a file:
    no systemd or journald is assumed)."""

    def __init__(self, tmp: pathlib.Path):
        self.base = ["podman", "--root", str(tmp / "storage"), "--runroot", str(tmp / "run"), "--cgroup-manager",
                     "cgroupfs", "--events-backend", "file", "--storage-driver", "vfs"]
        self.socket = tmp / "podman.sock"
        self.service_log = tmp / "service.log"
        with open(self.service_log, "w") as log:
            self.service = subprocess.Popen(self.base + ["system", "service", "--time", "0", f"unix://{self.socket}"],
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        if not wait_for("the Podman API socket", lambda: self.socket.exists() or self.service.poll() is not None, 30):
            return
        check(self.service.poll() is None, f"podman system service exited: {kitlib.tail(self.service_log)}")

    def __call__(self, *args, check_rc=True, timeout=120):
        r = subprocess.run(self.base + list(args), capture_output=True, text=True, timeout=timeout)
        if check_rc and r.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)}: rc {r.returncode}: {r.stderr[-2000:]}")
        return r

    def close(self):
        kitlib.stop(self.service, name="podman system service")


class RealContainer:
    """`podman run --rootfs /` (this machine's own /, bound again elsewhere: crun cannot
    pivot_root into the root it runs in), the workload inside, its stdin ours."""
    how = "a real podman container"

    def __init__(self, podman: Podman, name: str, workload_argv: list):
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="headroom-names-root-", dir="/run"))
        subprocess.run(["mount", "--rbind", "/", str(self.root)], check=True)
        subprocess.run(["mount", "--make-rslave", str(self.root)], check=True)
        self.podman = podman
        self.name = name
        argv = podman.base + ["run", "-i", "--name", name, "--memory", str(LIMIT), "--memory-swap", str(LIMIT),
                              "--network", "none", "--rootfs", str(self.root), *workload_argv]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.id = None
        self.id = wait_for("the container's id", lambda: self._id(), 60)

    def _id(self):
        r = self.podman("inspect", "--format", "{{.Id}}", self.name, check_rc=False)
        return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.podman("rm", "-f", self.name, check_rc=False)
        subprocess.run(["umount", "-R", "-l", str(self.root)], check=False)
        self.root.rmdir()


class CreatedContainer:
    """`podman create`: the engine knows the container; its process is placed by the test in the
    cgroup the runtime would have made (Podman's cgroupfs layout: libpod_parent/libpod-<id>),
    under this test's own memory cgroup, with the limit there."""
    how = "a podman-created container, its cgroup made by the test"

    def __init__(self, podman: Podman, name: str, workload_argv: list):
        self.podman = podman
        self.name = name
        self.id = podman("create", "--name", name, "--network", "none", "--rootfs", "/", "/bin/true").stdout.strip()
        mount = "/sys/fs/cgroup/memory" if kitlib.memory_layout() != "v2" else "/sys/fs/cgroup"
        self.parent = pathlib.Path(f"{mount}{kitlib.own_memory_cgroup()}/libpod_parent")
        self.dir = self.parent / f"libpod-{self.id}"
        self.dir.mkdir(parents=True)
        v2 = kitlib.memory_layout() == "v2"
        (self.dir / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(LIMIT))
        procs = self.dir / "cgroup.procs"

        def enter():
            procs.write_text(str(os.getpid()))
        self.proc = subprocess.Popen(workload_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, preexec_fn=enter)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for d in (self.dir, self.parent):
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
        self.podman("rm", "-f", self.name, check_rc=False)


class UnitCgroup:
    """A cgroup named like a systemd service, under ours, holding a sleeping process."""

    def __init__(self, unit: str):
        v2 = kitlib.memory_layout() == "v2"
        mount = "/sys/fs/cgroup/memory" if not v2 else "/sys/fs/cgroup"
        own = kitlib.own_memory_cgroup()
        if v2 and own.endswith("/headroom-test-leaf"):  # moved there by an earlier test
            own = own[:-len("/headroom-test-leaf")]
        if v2:
            kitlib.delegate_memory(f"{mount}{own}")
        self.dir = pathlib.Path(f"{mount}{own}/{unit}")
        self.dir.mkdir()
        procs = self.dir / "cgroup.procs"

        def enter():
            procs.write_text(str(os.getpid()))
        self.proc = subprocess.Popen(["sleep", "600"], preexec_fn=enter)

    def close(self):
        self.proc.kill()
        self.proc.wait()
        for _ in range(100):
            try:
                self.dir.rmdir()
                break
            except OSError:
                time.sleep(0.05)


def main() -> int:
    if os.geteuid() != 0:
        print("workload_names_test: needs root (cgroups, podman, BPF)")
        return 77
    binary = os.environ["HEADROOM_BINARY"]
    workload = os.environ["HEADROOM_WORKLOAD"]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="headroom-names-"))
    name = f"hr-names-{os.getpid()}"
    unit = f"hr-names-{os.getpid()}.service"
    journal = tmp / "oom.hrj"
    podman = agent = container = unit_cg = None
    try:
        podman = Podman(tmp)
        if failures:
            return 1
        real = kitlib.memory_layout() != "hybrid"
        print(f"layout {kitlib.memory_layout()}: {'a real container' if real else 'a created container'}", flush=True)
        agent = kitlib.AgentRun(binary, ["--log-level", "info", "agent", "--listen", "127.0.0.1:0", "--interval",
                                         "500ms", "--journal", str(journal), "--workloads.podman-socket",
                                         str(podman.socket), "--workloads.docker-socket", ""],
                                tmp / "agent.log")
        unit_cg = UnitCgroup(unit)
        # 8 MiB first, then (on a line) 1 MiB every 2 ms past the limit: the OOM kill.
        argv = [workload, "--anon", str(8 * MiB), "--grow-after-ready", str(4 * LIMIT), "2", "--grow-on-line"]
        container = (RealContainer if real else CreatedContainer)(podman, name, argv)
        print(f"{container.how}: {name} {container.id}", flush=True)
        if not check(container.id, "the container has an id"):
            return 1
        ready = container.proc.stdout.readline()
        if not ready.startswith("ready"):
            container.proc.kill()
            check(False, f"the workload said {ready!r}: {container.proc.stderr.read()[-2000:]}")
            return 1

        # Alive: its cgroup in /v1/snapshot with its name, and on the cgroup series.
        def named_cgroup():
            for c in get_json(agent.url + "/v1/snapshot")["cgroups"]:
                w = c.get("workload", {})
                if w.get("container_id") == container.id and w.get("container") == name:
                    return c
            return None
        cg = wait_for(f"a cgroup of container {name} in /v1/snapshot", named_cgroup)
        if cg:
            check(cg["workload"]["runtime"] == "podman", f"runtime podman: {cg['workload']}")
            print(f"sampled as {cg['memory']['path']}: {cg['workload']}", flush=True)
        metrics = wait_for("the container's name on headroom_cgroup_usage_bytes",
                           lambda: (lambda m: m if series(m, "headroom_cgroup_usage_bytes", container=name) else None)(
                               get_text(agent.url + "/metrics")))
        unit_line = wait_for(f"unit {unit} on headroom_cgroup_usage_bytes",
                             lambda: series(get_text(agent.url + "/metrics"), "headroom_cgroup_usage_bytes",
                                            unit=unit, container=""))
        if unit_line:
            print(unit_line[0], flush=True)

        # The OOM kill: counted under its name, in /v1/ooms and in the report.
        container.proc.stdin.write("go\n")
        container.proc.stdin.flush()

        def killed_victim():
            for e in get_json(agent.url + "/v1/ooms")["events"]:
                for v in e["victims"]:
                    if v.get("workload", {}).get("container") == name:
                        return e
            return None
        event = wait_for(f"an OOM kill of {name} in /v1/ooms", killed_victim, 60)
        if event:
            check(event["workload"]["container_id"] == container.id,
                  f"the event's own workload is the container's: {event['workload']}")
        kills = wait_for("headroom_oom_kills_total with the container's name",
                         lambda: series(get_text(agent.url + "/metrics"), "headroom_oom_kills_total", container=name))
        if kills:
            print(kills[0], flush=True)
        else:
            print("\n".join(series(get_text(agent.url + "/metrics"), "headroom_oom_kills_total")), flush=True)
            print(json.dumps(event)[:3000] if event else "(no event)", flush=True)

        def reported():
            r = subprocess.run([binary, "report", "--journal", str(journal)], capture_output=True, text=True,
                               timeout=30)
            return r.stdout if r.returncode == 0 and f"container {name} (podman {container.id[:12]})" in r.stdout \
                else None
        text = wait_for(f"the report naming container {name}", reported, 30)
        if text:
            print(text.splitlines()[0][:400], flush=True)
        r = subprocess.run([binary, "report", "--journal", str(journal), "--json"], capture_output=True, text=True,
                           timeout=30)
        if check(r.returncode == 0, f"report --json: {r.stderr}"):
            rec = json.loads(r.stdout)
            names = [v.get("workload", {}).get("container") for v in rec["event"]["victims"]]
            check(name in names, f"the record's victims carry the name: {names}")
    except (kitlib.AgentError, RuntimeError, subprocess.TimeoutExpired) as e:
        check(False, str(e))
    finally:
        for what in (container, unit_cg):
            if what is not None:
                what.close()
        if agent is not None:
            rc = agent.stop()
            check(rc == 0, f"the agent exited {rc} on SIGTERM: {agent.tail()}")
        if podman is not None:
            podman.close()
        if failures and agent is not None:
            print(agent.tail(40), flush=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print("workload names:", "FAILED" if failures else "ok", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main())
