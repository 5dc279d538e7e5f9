#!/usr/bin/env python3
"""The load of tests/bench/processes.py: N sleeping processes spread over memory cgroups of the
bench's own (`sleepers.py BASE PREFIX GROUPS N`, root; processes.py starts it).

Makes BASE/PREFIX-0 .. BASE/PREFIX-(GROUPS-1) and starts one shell in each (joining each cgroup
in turn before it starts it) that forks its share of N - 1 subshells, each blocked reading a pipe,
and then reads it too: a fork without an exec each, which on a busy 2-core VM is about three times
quicker than starting `sleep` (2.4 against 6.4 ms). Goes back to BASE and says `started COUNT` on
stdout once every shell has forked its share. It then waits for its stdin to close, which happens
however the bench ends; then it closes the pipe's one writer (itself: were it killed, the kernel
would close it), every sleeper reads the end of it and exits, and the cgroups it made are removed.
Nothing is killed but what is still in those cgroups a minute later (only its own sleepers).
"""
import os
import signal
import subprocess
import sys
import time


def join(cgroup):
    with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


def procs(cgroup):
    with open(os.path.join(cgroup, "cgroup.procs")) as f:
        return [int(p) for p in f.read().split()]


def main():
    base, prefix, groups, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    # The bench closing our stdin is the signal to clean up; its Ctrl-C must not cut that short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reader, writer = os.pipe()
    dirs, shells = [], []
    try:
        for g in range(groups):
            d = os.path.join(base, f"{prefix}-{g}")
            os.mkdir(d)
            dirs.append(d)
            k = n // groups + (1 if g < n % groups else 0)
            if k == 0:
                continue
            join(d)
            # The pipe comes in as stdin and moves to fd 3: a background job's stdin is /dev/null.
            script = (f"exec 3<&0 0</dev/null; i=1; while [ $i -lt {k} ]; do read x <&3 & i=$((i+1)); done; "
                      f"echo started; read x <&3")
            shells.append(subprocess.Popen(["/bin/sh", "-c", script], stdin=reader, stdout=subprocess.PIPE, text=True))
        join(base)
        os.close(reader)
        for sh in shells:
            if sh.stdout.readline().strip() != "started":
                raise SystemExit("sleepers: a shell did not start its share")
        print(f"started {sum(len(procs(d)) for d in dirs)}", flush=True)
        sys.stdin.read()
    finally:
        os.close(writer)
        for sh in shells:
            sh.wait()
        try:
            join(base)
        except OSError:
            pass
        for d in dirs:
            end = time.monotonic() + 60
            while procs(d) and time.monotonic() < end:  # the subshells are reaped by init
                time.sleep(0.05)
            for pid in procs(d):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for attempt in range(100):  # an exited task can leave its cgroup a moment later
                try:
                    os.rmdir(d)
                    break
                except OSError as e:
                    if attempt == 99:
                        print(f"sleepers: removing {d}: {e}", file=sys.stderr)
                    time.sleep(0.05)


if __name__ == "__main__":
    main()
