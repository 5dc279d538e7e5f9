#!/usr/bin/env python3
"""`headroom top` in a real terminal: tmux runs it, send-keys drives it, capture-pane reads what a
person would see.

A real agent (its journal in a temporary directory) watches a test cgroup made under this
process's own memory cgroup. Two workloads of known size run in two child cgroups; `headroom top
--agent` must show the larger one with the usage the test reads from the cgroup's own file, sort
by name and by page tables on their keys, show the budget the agent computes for one of them,
and show the OOM kill of a third workload that exceeds its cgroup's limit. `q` must end it with
status 0 and the terminal's modes as they were (stty -g before and after, and tmux's alternate
screen off); SIGTERM must do the same. A bad --interval and a pipe instead of a terminal are
refused with exit 2 before anything starts.

Every wait polls the pane with a deadline; only processes this test started are stopped, and its
cgroups are removed at the end.
"""
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import kitlib

BINARY = os.environ.get("HEADROOM_BINARY")
WORKLOAD = os.environ.get("HEADROOM_WORKLOAD")
MIB = 1 << 20
SMALL_MIB = 16      # "alpha": small, but with page tables from a sparse 2 GiB mapping
SPARSE_BYTES = 2 << 30
BIG_MIB = 48        # "omega": the larger usage
OOM_LIMIT_MIB = 32  # "oom": its hog asks for 96 MiB
HOG_MIB = 96
COLS, ROWS = 200, 50
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
SIZE = re.compile(r"(\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB)\b")


class Failure(Exception):
    pass


def skip(why):
    print(f"top_test: SKIP: {why}")
    sys.exit(77)


class Cgroups:
    """The test's cgroup and its children, under this process's own memory cgroup (v1 or v2)."""

    def __init__(self, name):
        own = kitlib.own_memory_cgroup()
        if own is None:
            raise Failure("this process is in no memory cgroup")
        if os.path.isdir("/sys/fs/cgroup/memory"):
            self.v1 = True
            self.mount = "/sys/fs/cgroup/memory"
        else:
            self.v1 = False
            self.mount = "/sys/fs/cgroup"
        self.path = os.path.join(own, name)          # inside the hierarchy, as headroom names it
        self.dir = self.mount + self.path
        self.children = []
        os.mkdir(self.dir)
        if not self.v1:
            with open(os.path.join(self.dir, "cgroup.subtree_control"), "w") as f:
                f.write("+memory")

    def child(self, name, limit=None):
        d = os.path.join(self.dir, name)
        os.mkdir(d)
        self.children.append(d)
        if limit is not None:
            with open(os.path.join(d, "memory.limit_in_bytes" if self.v1 else "memory.max"), "w") as f:
                f.write(str(limit))
        return d

    def usage(self, d):
        with open(os.path.join(d, "memory.usage_in_bytes" if self.v1 else "memory.current")) as f:
            return int(f.read())

    def remove(self):
        for d in [*reversed(self.children), self.dir]:
            for _ in range(100):   # a killed process leaves its cgroup a moment later
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                print(f"top_test: could not remove {d}", flush=True)


class Workload:
    """headroom-workload in a cgroup (it enters before exec), held until stop()."""

    def __init__(self, cgroup_dir, *args):
        def enter():
            with open(os.path.join(cgroup_dir, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        self.proc = subprocess.Popen([WORKLOAD, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, preexec_fn=enter, text=True)
        self.pid = self.proc.pid

    def wait_ready(self, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # Whole lines, flushed one at a time: select says when one is there.
            if not select.select([self.proc.stdout], [], [], max(deadline - time.monotonic(), 0))[0]:
                continue
            line = self.proc.stdout.readline()
            if line.startswith("ready"):
                return
            if not line and self.proc.poll() is not None:
                raise Failure(f"workload {self.pid} exited with {self.proc.returncode} before ready")
        raise Failure(f"workload {self.pid} not ready within {timeout} s")

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        kitlib.stop(self.proc, timeout=5)


class Tmux:
    """A tmux server of this test's own (its own socket), one 200x50 window running a shell."""

    def __init__(self, tmp):
        self.socket = os.path.join(tmp, "tmux.sock")
        conf = os.path.join(tmp, "tmux.conf")
        with open(conf, "w") as f:
            f.write("set -g status off\nset -g remain-on-exit on\nset -g default-terminal screen\n"
                    "set -g history-limit 0\n")
        env = dict(os.environ, PS1="top-test$ ", TERM="screen")
        self.run("-f", conf, "new-session", "-d", "-s", "top", "-x", str(COLS), "-y", str(ROWS),
                 "env -i PATH=/usr/bin:/bin TERM=screen PS1='top-test$ ' bash --norc --noprofile", env=env)

    def run(self, *args, env=None):
        r = subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise Failure(f"tmux {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def keys(self, *keys):
        self.run("send-keys", "-t", "top", *keys)

    def screen(self):
        return self.run("capture-pane", "-p", "-t", "top")

    def pane(self, fmt):
        return self.run("display-message", "-p", "-t", "top", fmt).strip()

    def kill(self):
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True)


def wait_screen(tmux, what, predicate, deadline):
    """Polls the pane until predicate(screen) is true; its last screen goes with the failure."""
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux.screen()
        if predicate(screen):
            return screen
        time.sleep(0.1)
    raise Failure(f"timed out waiting for {what}; the screen:\n{screen}")


def row_of(screen, needle):
    for i, line in enumerate(screen.splitlines()):
        if needle in line:
            return i
    return -1


def line_of(screen, needle):
    i = row_of(screen, needle)
    return screen.splitlines()[i] if i >= 0 else ""


def cgroup_row(screen, path):
    """The row of the cgroups' table that starts with `path` (the budget's line names one too)."""
    for i, line in enumerate(screen.splitlines()):
        if line.startswith("  " + path + " "):
            return i
    return -1


def cgroup_usage_on_screen(screen, path):
    """The USAGE column of the cgroup's row: the first size after its path."""
    i = cgroup_row(screen, path)
    if i < 0:
        return None
    line = screen.splitlines()[i]
    m = SIZE.search(line, line.index(path) + len(path))
    return float(m.group(1)) * UNITS[m.group(2)] if m else None


def check_refusals(failures):
    for args, want in ((["top", "--interval", "0s"], "--interval"), (["top", "--interval", "soon"], "--interval"),
                       (["top", "--agent", "http://127.0.0.1:1"], "terminal")):
        r = subprocess.run([BINARY, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
        if r.returncode != 2 or want not in r.stderr:
            failures.append(f"headroom {' '.join(args)}: exit {r.returncode}, stderr {r.stderr.strip()!r}; "
                            f"want exit 2 naming {want}")


def main():
    if os.geteuid() != 0:
        skip("needs root (cgroups, the agent's sensors)")
    for name, value in (("HEADROOM_BINARY", BINARY), ("HEADROOM_WORKLOAD", WORKLOAD)):
        if not value:
            skip(f"{name} is not set (ctest sets it)")
    if shutil.which("tmux") is None:
        raise Failure("tmux is not installed (deploy/install-deps.sh installs it)")
    started = time.monotonic()
    failures = []
    check_refusals(failures)

    tmp = tempfile.mkdtemp(prefix="headroom-top-test-")
    cgroups = agent = tmux = None
    workloads = []
    try:
        cgroups = Cgroups(f"headroom-top-{os.getpid()}")
        alpha = cgroups.child("alpha")
        omega = cgroups.child("omega")
        oom = cgroups.child("oom", limit=OOM_LIMIT_MIB * MIB)
        alpha_path, omega_path, oom_path = (cgroups.path + "/" + n for n in ("alpha", "omega", "oom"))

        small = Workload(alpha, "--anon", str(SMALL_MIB * MIB), "--sparse", str(SPARSE_BYTES))
        big = Workload(omega, "--anon", str(BIG_MIB * MIB))
        workloads += [small, big]
        small.wait_ready()
        big.wait_ready()

        deadline = time.monotonic() + 60
        args = ["agent", "--listen", "127.0.0.1:0", "--interval", "250ms", "--cgroup", cgroups.path,
                "--journal", os.path.join(tmp, "journal"),
                "--budget.cgroup", omega_path, "--budget.state-file", os.path.join(tmp, "state.json"),
                "--budget.margin-floor", "16MiB"]
        try:
            agent = kitlib.AgentRun(BINARY, ["--log-level", "info", *args], os.path.join(tmp, "agent.log"),
                                    deadline=deadline)
        except kitlib.AgentError as e:
            raise Failure(str(e)) from None

        script = os.path.join(tmp, "run-top.sh")
        with open(script, "w") as f:
            f.write(f"""# $1: a tag; the rest: headroom top's flags. Says the exit status and whether the
# terminal's modes came back as they were.
tag=$1; shift
stty -g > {tmp}/$tag.before
sh -c 'echo $$ > "$0"; exec "$@"' {tmp}/$tag.pid {BINARY} top "$@"
echo "$tag-exit=$?"
stty -g > {tmp}/$tag.after
if cmp -s {tmp}/$tag.before {tmp}/$tag.after; then echo "$tag-tty-restored"; else echo "$tag-tty-changed"; fi
""")
        tmux = Tmux(tmp)
        wait_screen(tmux, "the shell's prompt", lambda s: "top-test$" in s, deadline)
        tmux.keys(f"sh {script} one --agent {agent.url} --interval 250ms", "Enter")

        # The larger cgroup with the usage its own file says.
        def usage_matches(screen):
            shown = cgroup_usage_on_screen(screen, omega_path)
            if shown is None:
                return False
            actual = cgroups.usage(omega)
            return abs(shown - actual) <= max(MIB, 0.02 * actual)
        try:
            screen = wait_screen(tmux, f"{omega_path} with its usage", usage_matches, deadline)
        except Failure as e:
            raise Failure(f"{e}\nmemory usage file of {omega_path}: {cgroups.usage(omega)} bytes") from None
        alt = tmux.pane("#{alternate_on}")
        if alt != "1":
            failures.append(f"headroom top does not draw on the alternate screen (alternate_on {alt})")
        shown = cgroup_usage_on_screen(screen, omega_path)
        if shown < BIG_MIB * MIB:
            failures.append(f"{omega_path} shows {shown:.0f} bytes, less than the {BIG_MIB} MiB its workload holds")
        if cgroup_row(screen, alpha_path) < 0:
            failures.append(f"{alpha_path} is not on the screen")
        if "q quit" not in screen.splitlines()[ROWS - 1]:
            failures.append(f"the keys are not on the last line: {screen.splitlines()[ROWS - 1]!r}")
        budget = line_of(screen, "budget ")
        if not re.search(r"budget\s+\d+(\.\d+)? [KMGT]iB for " + re.escape(omega_path), budget):
            failures.append(f"the agent's budget for {omega_path} is not shown: {budget!r}")
        big_row = line_of(screen, f" {big.pid} ")
        if f"{omega_path[-20:]}" not in big_row:
            failures.append(f"process {big.pid} is not shown in {omega_path}: {big_row!r}")

        # By usage the larger first; by name (n) alpha first.
        if not 0 <= cgroup_row(screen, omega_path) < cgroup_row(screen, alpha_path):
            failures.append("by usage, omega (48 MiB) is not above alpha (16 MiB)")
        tmux.keys("n")
        wait_screen(tmux, "the cgroups sorted by name",
                    lambda s: "by name" in line_of(s, "CGROUPS")
                    and 0 <= cgroup_row(s, alpha_path) < cgroup_row(s, omega_path), deadline)
        # Processes by PSS (the default) put the big one first; by page tables (t) the sparse one.
        screen = tmux.screen()
        if not 0 <= row_of(screen, f" {big.pid} ") < row_of(screen, f" {small.pid} "):
            failures.append("by PSS, the 48 MiB workload is not above the 16 MiB one")
        tmux.keys("t")
        wait_screen(tmux, "the processes sorted by page tables",
                    lambda s: "by page tables" in line_of(s, "PROCESSES")
                    and 0 <= row_of(s, f" {small.pid} ") < row_of(s, f" {big.pid} "), deadline)

        # A real OOM kill: a hog beyond its cgroup's limit.
        hog = Workload(oom, "--anon", str(HOG_MIB * MIB))
        workloads.append(hog)
        try:
            hog.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            raise Failure(f"the hog ({HOG_MIB} MiB in a {OOM_LIMIT_MIB} MiB cgroup) was not killed") from None
        if hog.proc.returncode != -signal.SIGKILL:
            failures.append(f"the hog exited with {hog.proc.returncode}, not SIGKILL")
        # The kill's line, below OOM KILLS, starts with its time (the processes' table may still
        # show the hog until the next refresh).
        kill_line = re.compile(rf"^  \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC +{hog.pid} headroom-worklo .*$", re.M)

        def kill_shown(screen):
            m = kill_line.search(screen)
            return m is not None and row_of(screen, "OOM KILLS") < screen[:m.start()].count("\n")
        screen = wait_screen(tmux, f"the OOM kill of pid {hog.pid}", kill_shown, deadline)
        kill = kill_line.search(screen).group(0)
        if oom_path[-30:] not in kill:
            failures.append(f"the kill's line does not name {oom_path}: {kill!r}")
        if not re.search(r"its own at \d+(\.\d+)? MiB of 32\.0 MiB", kill):
            failures.append(f"the kill's line does not say the limit of its own cgroup that was hit: {kill!r}")

        # q: exit 0, the terminal as it was.
        tmux.keys("q")
        # The script's last line, not its exit line: the terminal's check comes after that.
        screen = wait_screen(tmux, "headroom top to quit on q", lambda s: "one-tty-" in s, deadline)
        if "one-exit=0" not in screen:
            failures.append(f"headroom top exited with {line_of(screen, 'one-exit=')!r} on q")
        if "one-tty-restored" not in screen:
            failures.append("the terminal's modes differ after q (stty -g)")
        wait_screen(tmux, "the prompt after q", lambda s: s.rstrip().endswith("top-test$"), deadline)
        if tmux.pane("#{alternate_on}") != "0":
            failures.append("the alternate screen is still on after q")

        # SIGTERM: the same.
        tmux.keys("clear", "Enter")
        tmux.keys(f"sh {script} two --agent {agent.url}", "Enter")
        wait_screen(tmux, "headroom top's second run", lambda s: "headroom top  agent" in s, deadline)
        with open(os.path.join(tmp, "two.pid")) as f:
            pid = int(f.read())
        os.kill(pid, signal.SIGTERM)
        screen = wait_screen(tmux, "headroom top to end on SIGTERM", lambda s: "two-tty-" in s, deadline)
        if "two-exit=0" not in screen:
            failures.append(f"headroom top exited with {line_of(screen, 'two-exit=')!r} on SIGTERM")
        if "two-tty-restored" not in screen:
            failures.append("the terminal's modes differ after SIGTERM (stty -g)")
        if tmux.pane("#{alternate_on}") != "0":
            failures.append("the alternate screen is still on after SIGTERM")
        if tmux.pane("#{pane_dead}") != "0":
            failures.append("the shell in the pane died")
    except Failure as e:
        failures.append(str(e))
    finally:
        if tmux:
            tmux.kill()
        for w in workloads:
            w.stop()
        if agent:
            code = agent.stop(name="the agent")
            if code != 0:
                failures.append(f"the agent exited with {code}:\n{agent.tail()}")
        if cgroups:
            cgroups.remove()
        shutil.rmtree(tmp, ignore_errors=True)

    took = time.monotonic() - started
    if failures:
        for f in failures:
            print(f"top_test: FAIL: {f}")
        sys.exit(1)
    print(f"top_test: ok ({took:.1f} s)")


if __name__ == "__main__":
    # ctest's timeout ends the test with SIGTERM: the finally blocks still clean up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("top_test: FAIL: terminated"))
    try:
        main()
    except Failure as e:
        print(f"top_test: FAIL: {e}")
        sys.exit(1)
