"""What the operators' kit tests share: one copy instead of one per script.

Imported as `import kitlib` by the scripts beside it (Python puts a script's own directory first
on sys.path, for ctest's `/usr/bin/python3 /abs/path/tests/kit/x.py` as for a relative path).
Standard library only: the tests run on Debian's /usr/bin/python3.

Other tests' agents may run on the same machine at the same time: these helpers only ever stop a
process this test started (its Popen), never one found by name.
"""
import errno
import os
import re
import signal
import socket
import subprocess
import time

# The agent's first info line once it listens; with --listen 127.0.0.1:0 it is the only place
# that says which port the kernel picked.
SERVING = re.compile(r"serving on (http://[0-9.]+:(\d+))")


def free_port():
    """A TCP port free on 127.0.0.1 right now (a small race with other tests; good enough)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memory_layout() -> str:
    """v1, v2 or hybrid: where the memory controller is, and what else is mounted."""
    v1_memory = v2 = False
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        dash = f.index("-")
        if f[dash + 1] == "cgroup2":
            v2 = True
        elif f[dash + 1] == "cgroup" and "memory" in f[dash + 3].split(","):
            v1_memory = True
    return "hybrid" if (v1_memory and v2) else ("v1" if v1_memory else "v2")


def own_memory_cgroup():
    """The memory cgroup this process runs in, from /proc/self/cgroup; None when there is none.

    The cgroup v1 memory hierarchy's line ('N:memory:/path', maybe 'N:cpu,memory:/path') wins: on
    a hybrid host that is where memory is accounted and limited, as the agent sees it. Else the
    unified hierarchy's '0::/path' (cgroup v2). Read only."""
    with open("/proc/self/cgroup") as f:
        lines = [line.split(":", 2) for line in f.read().splitlines()]
    for _, controllers, path in lines:
        if "memory" in controllers.split(","):
            return path
    for hierarchy, controllers, path in lines:
        if hierarchy == "0" and controllers == "":
            return path
    return None


def delegate_memory(directory):
    """A cgroup v2 directory's children get the memory controller: "+memory" in its
    cgroup.subtree_control. A non-root cgroup that holds processes cannot delegate ("no internal
    processes", EBUSY): its processes (this test's, the runner's) move to a leaf below it first,
    as systemd does for a delegated unit (the leaf is the C++ tests' CgroupSandbox::kLeaf)."""
    control = os.path.join(directory, "cgroup.subtree_control")
    with open(control) as f:
        if "memory" in f.read().split():
            return
    try:
        with open(control, "w") as f:
            f.write("+memory")
        return
    except OSError as e:
        if e.errno != errno.EBUSY:
            raise
    leaf = os.path.join(directory, "headroom-test-leaf")
    os.makedirs(leaf, exist_ok=True)
    for _ in range(100):
        with open(os.path.join(directory, "cgroup.procs")) as f:
            pids = f.read().split()
        if not pids:
            break
        for pid in pids:
            try:
                with open(os.path.join(leaf, "cgroup.procs"), "w") as f:
                    f.write(pid)
            except ProcessLookupError:
                pass
    with open(control, "w") as f:
        f.write("+memory")


def stop(proc, timeout=10.0, name=None):
    """SIGTERM, then SIGKILL if it is still there after `timeout` s; returns its exit code.

    Only a Popen this test started (None and already exited are fine). With a name, says so
    when it has to kill."""
    if proc is None:
        return None
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        if name:
            print(f"{name} did not stop on SIGTERM within {timeout:g} s: killing it", flush=True)
        proc.kill()
        return proc.wait()


def tail(path, lines=30):
    """The last lines of a log file, for failure messages."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


class AgentError(RuntimeError):
    """The agent exited, or did not say "serving on" in time; the message ends with its log."""


class AgentRun:
    """The real `headroom agent`, started and waited for until it logs "serving on http://...".

    argv is prefix + [binary] + args: prefix runs it differently (setpriv with fewer
    capabilities); args hold `agent` and `--listen` (127.0.0.1:0 or a given port: the port is
    read back from the log line either way). stdout and stderr go to the file `log`, so that a
    failure can show the agent's last words. env None inherits ours. deadline is a
    time.monotonic() value; without one, 20 s from now.

    On failure the agent is stopped before AgentError is raised: no agent is left behind for
    the caller to find. Afterwards: .proc, .url ("http://127.0.0.1:PORT"), .port, .started."""

    def __init__(self, binary, args, log, *, prefix=(), env=None, deadline=None, new_session=False):
        self.log = str(log)
        self.argv = [*prefix, str(binary), *args]
        self.started = time.monotonic()
        with open(self.log, "w") as out:        # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, env=env, start_new_session=new_session)
        try:
            self._wait_serving(self.started + 20 if deadline is None else deadline)
        except BaseException:
            self.stop()
            raise

    def _wait_serving(self, deadline):
        while True:
            exited = self.proc.poll()   # before reading the log: a line written before exit is seen
            with open(self.log, errors="replace") as f:
                m = SERVING.search(f.read())
            if m:
                self.url, self.port = m.group(1), int(m.group(2))
                return
            if exited is not None:
                raise AgentError(f"the agent exited with {exited}:\n{self.tail()}")
            if time.monotonic() >= deadline:
                raise AgentError(f"the agent did not say \"serving on\" within "
                                 f"{deadline - self.started:.0f} s:\n{self.tail()}")
            time.sleep(0.05)

    def tail(self, lines=30):
        return tail(self.log, lines)

    def stop(self, timeout=10.0, name=None):
        return stop(self.proc, timeout, name)
