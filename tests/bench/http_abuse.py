#!/usr/bin/env python3
"""The agent's scrape latency at rest and while clients abuse its HTTP endpoint, side by side.

The real agent (the bench build) with 1 s samples; a scraper asks for /metrics every 50 ms and
times each answer, first alone, then while 400 connections sit idle and 400 more send a header
byte at a time (each opened again as soon as the agent closes it), then while bursts of 200
concurrent scrapes arrive. p50, p99 and max per phase, and the agent's CPU in each.

    python3 tests/bench/http_abuse.py build/bench [--seconds 20]
"""
import argparse
import http.client
import os
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def start_agent(binary):
    """The bench's agent start (run.py's), on this binary, with 1 s samples and no journal."""
    import run
    run.HEADROOM = binary
    return run.start_agent("--interval", "1s", "--journal.enabled", "false")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape_once(port):
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    r = c.getresponse()
    r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"/metrics answered {r.status}")
    return (time.perf_counter() - t0) * 1000


def measure(port, pid, seconds):
    times = []
    cpu0, end = cpu_seconds(pid), time.time() + seconds
    while time.time() < end:
        times.append(scrape_once(port))
        time.sleep(0.05)
    cpu = (cpu_seconds(pid) - cpu0) / seconds * 1000
    times.sort()
    return {"n": len(times), "p50": statistics.median(times), "p99": times[int(len(times) * 0.99) - 1],
            "max": times[-1], "cpu_ms_per_s": cpu}


class Slowloris:
    """400 idle connections and 400 sending a byte of a header that never ends every 200 ms."""

    def __init__(self, port, idle=400, slow=400):
        self.port, self.stop, self.reopened = port, False, 0
        self.idle = [self.open(False) for _ in range(idle)]
        self.slow = [self.open(True) for _ in range(slow)]
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def open(self, slow):
        s = socket.create_connection(("127.0.0.1", self.port))
        if slow:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
        s.setblocking(False)
        return s

    def run(self):
        while not self.stop:
            for group, slow in ((self.idle, False), (self.slow, True)):
                for i, s in enumerate(group):
                    try:
                        if slow:
                            s.send(b"X")
                        elif s.recv(1) == b"":
                            raise ConnectionError
                    except BlockingIOError:
                        pass
                    except OSError:
                        s.close()
                        group[i] = self.open(slow)
                        self.reopened += 1
            time.sleep(0.2)

    def close(self):
        self.stop = True
        self.thread.join()
        for s in self.idle + self.slow:
            s.close()


class Bursts:
    """200 concurrent scrapes, again and again."""

    def __init__(self, port, size=200):
        self.port, self.size, self.stop, self.answered = port, size, False, 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            threads = [threading.Thread(target=self.one) for _ in range(self.size)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

    def one(self):
        try:
            scrape_once(self.port)
            self.answered += 1
        except (OSError, RuntimeError):
            pass

    def close(self):
        self.stop = True
        self.thread.join()


def run(build, seconds):
    agent, port = start_agent(os.path.join(build, "headroom"))
    try:
        time.sleep(3)
        rest = measure(port, agent.pid, seconds)
        loris = Slowloris(port)
        time.sleep(1)
        abused = measure(port, agent.pid, seconds)
        loris.close()
        bursts = Bursts(port)
        time.sleep(1)
        burst = measure(port, agent.pid, seconds)
        bursts.close()
        return {"rest": rest, "slowloris": abused, "reopened": loris.reopened, "bursts": burst,
                "burst_scrapes": bursts.answered}
    finally:
        agent.terminate()
        agent.wait(timeout=30)


def table(r, seconds):
    rows = [f"| /metrics every 50 ms for {seconds} s (bench build, 1 s samples) | scrapes | p50 | p99 | max | "
            f"agent CPU |", "| --- | --- | --- | --- | --- | --- |"]
    for key, what in (("rest", "alone"),
                      ("slowloris", f"beside 400 idle + 400 byte-at-a-time connections ({r['reopened']} reopened "
                                    f"after the agent closed them)"),
                      ("bursts", f"beside bursts of 200 concurrent scrapes ({r['burst_scrapes']} answered)")):
        m = r[key]
        rows.append(f"| {what} | {m['n']} | {m['p50']:.2f} ms | {m['p99']:.2f} ms | {m['max']:.2f} ms | "
                    f"{m['cpu_ms_per_s']:.1f} ms/s |")
    rows.append(f"| p99 beside the slow clients / alone | | | {r['slowloris']['p99'] / r['rest']['p99']:.2f} | | |")
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=int, default=20)
    a = ap.parse_args()
    print(table(run(a.build, a.seconds), a.seconds))


if __name__ == "__main__":
    main()
