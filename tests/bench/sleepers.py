#!/usr/bin/env python3
"""The load of tests/bench/processes.py: N sleeping processes spread over memory cgroups of the
bench's own (`sleepers.py BASE PREFIX GROUPS N [WORKER WORKERS]`, root; processes.py starts one
per core, each with the cgroups g where g % WORKERS == WORKER).

Makes its cgroups BASE/PREFIX-g, joins each in turn and starts its share of the N processes
there (`sleep infinity` by posix_spawn: a vfork and an exec, no shell per process), goes back to
BASE, and says `started COUNT` on stdout. It then waits for its stdin to close, which happens
however the bench ends (even killed), and only then kills the sleepers it started (by pid), reaps
them and removes the cgroups it made.
"""
import os
import signal
import sys
import time

SLEEP = "/bin/sleep"


def join(cgroup):
    with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


def main():
    base, prefix, groups, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    worker, workers = (int(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else (0, 1)
    # The bench closing our stdin is the signal to clean up; its Ctrl-C must not cut that short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    dirs, pids = [], []
    try:
        for g in range(worker, groups, workers):
            d = os.path.join(base, f"{prefix}-{g}")
            os.mkdir(d)
            dirs.append(d)
            join(d)
            for _ in range(n // groups + (1 if g < n % groups else 0)):
                pids.append(os.posix_spawn(SLEEP, [SLEEP, "infinity"], os.environ))
        join(base)
        print(f"started {len(pids)}", flush=True)
        sys.stdin.read()
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        try:
            join(base)
        except OSError:
            pass
        for d in dirs:
            for attempt in range(100):  # a reaped task can leave its cgroup a moment later
                try:
                    os.rmdir(d)
                    break
                except OSError as e:
                    if attempt == 99:
                        print(f"sleepers: removing {d}: {e}", file=sys.stderr)
                    time.sleep(0.05)


if __name__ == "__main__":
    main()
