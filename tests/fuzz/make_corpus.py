#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from the real captures of
tests/fixtures and the project's own example files; corpus/README.md says what came from where.
Deterministic: run again after a fixture changes, and commit what it wrote.

usage: tests/fuzz/make_corpus.py [--check]   (--check: fail when the committed corpus differs)
"""
import filecmp
import os
import re
import shutil
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIX = os.path.join(ROOT, "tests", "fixtures")
TREES = ["hybrid-real", "v2-6.1-kubepods", "v2-6.12-kubepods"]

# The cgroup reader's files, in the order tests/fuzz/cgroup_memory_fuzz.cpp hands them out.
V2_FILES = ["memory.current", "memory.max", "memory.stat", "memory.peak", "memory.high", "memory.swap.current",
            "memory.events", "memory.events.local", "memory.pressure"]
V1_FILES = ["memory.usage_in_bytes", "memory.limit_in_bytes", "memory.stat", "memory.max_usage_in_bytes",
            "memory.oom_control", "memory.failcnt", "memory.kmem.usage_in_bytes"]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def slug(s):
    return re.sub(r"[^A-Za-z0-9._-]+", "-", s).strip("-")


class Corpus:
    def __init__(self, out):
        self.out = out

    def put(self, target, name, data):
        d = os.path.join(self.out, target)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, slug(name)), "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())


def proc_files(c):
    for tree in TREES:
        proc = os.path.join(FIX, tree, "proc")
        for pid in sorted(os.listdir(proc)):
            if not pid.isdigit():
                continue
            for name, target in [("status", "proc_status"), ("stat", "proc_stat"), ("smaps_rollup", "smaps_rollup"),
                                 ("cgroup", "proc_cgroup"), ("mountinfo", "mountinfo")]:
                p = os.path.join(proc, pid, name)
                if os.path.isfile(p):
                    c.put(target, f"{tree}-{pid}-{name}", read(p))
        if os.path.isfile(os.path.join(proc, "meminfo")):
            c.put("proc_status", f"{tree}-meminfo", read(os.path.join(proc, "meminfo")))


def cgroup_dirs(c):
    for tree in TREES:
        base = os.path.join(FIX, tree, "sys", "fs", "cgroup")
        for dirpath, _, names in sorted(os.walk(base)):
            names = set(names)
            if "memory.usage_in_bytes" in names:
                files, flags = V1_FILES, 1
            elif "memory.stat" in names:
                files, flags = V2_FILES, 0
            else:
                continue
            rel = os.path.relpath(dirpath, base)
            if rel == "." or (flags == 1 and rel == "memory"):
                flags |= 2  # the hierarchy's root
            present = [f in names for f in files]
            last = max(i for i, p in enumerate(present) if p)
            parts = [read(os.path.join(dirpath, f)) if present[i] else b"" for i, f in enumerate(files[:last + 1])]
            leaf = "root" if rel == "." else os.path.basename(rel)[:40]
            c.put("cgroup_memory", f"{tree}-d{rel.count('/')}-{leaf}", bytes([flags]) + b"\0".join(parts))


def kmsg(c):
    marks = ["invoked oom-killer", "oom-kill:", "Killed process", "Memory cgroup stats", "Mem-Info", "memory: usage",
             "Tasks state", "] ", "Node 0", "pages RAM", "Unreclaimable slab", "oom_reaper", "due to memory.oom.group"]
    for name in sorted(os.listdir(os.path.join(FIX, "kmsg"))):
        if not name.endswith(".txt"):
            continue
        text = read(os.path.join(FIX, "kmsg", name))
        c.put("oom_log", name, text)
        taken = set()
        for line in text.split(b"\n"):
            for i, m in enumerate(marks):
                if i not in taken and m.encode() in line:
                    taken.add(i)
                    c.put("kmsg_record", f"{name[:-4]}-{i:02d}", line + b"\n")
    # The real reports people saved, in every form (tests/fixtures/oom-logs, each with its PROVENANCE).
    for name in sorted(os.listdir(os.path.join(FIX, "oom-logs"))):
        if name.endswith(".log"):
            c.put("oom_log", name, read(os.path.join(FIX, "oom-logs", name)))
    # A record with continuation lines, as a read() of /dev/kmsg returns it.
    c.put("kmsg_record", "continuation",
          "6,1234,5678901,-;usb 1-1: new device\n SUBSYSTEM=usb\n DEVICE=c189:1\n")


def journal(c):
    for name in sorted(os.listdir(os.path.join(FIX, "journal"))):
        if name.endswith(".hrj"):
            data = read(os.path.join(FIX, "journal", name))
            c.put("journal_scan", name, data)
            lines = data.split(b"\n")
            c.put("journal_scan", f"{name}-first", lines[0] + b"\n")
            c.put("journal_scan", f"{name}-torn", lines[0] + b"\n" + lines[1][: len(lines[1]) // 2])


def events(c):
    # What `headroom report --from-json` reads (docs/events.md), around the real records of the
    # journal fixtures: an envelope line, the wrappers of Loki, Docker and journalctl, an
    # Elasticsearch hit and search response, an array, other log lines mixed in, a line cut short.
    import json
    for name in sorted(os.listdir(os.path.join(FIX, "journal"))):
        if not name.endswith(".hrj"):
            continue
        line = read(os.path.join(FIX, "journal", name)).split(b"\n")[0]
        record = json.loads(line.split(b" ", 3)[3])
        record["id"] = 1
        env = {"schema": "headroom.event.v1", "kind": "oom_kill", "time": "2026-12-04T06:01:23.000Z",
               "host": record.get("host", {}).get("hostname"), "id": 1, "message": "m", "record": record}
        el = json.dumps(env, sort_keys=True, separators=(",", ":"))
        base = name[:-4]
        c.put("events_read", f"{base}-envelope", el + "\n")
        c.put("events_read", f"{base}-loki", json.dumps({"labels": {"job": "headroom"}, "line": el}) + "\n")
        c.put("events_read", f"{base}-docker", json.dumps({"log": el + "\n", "stream": "stdout"}) + "\n")
        c.put("events_read", f"{base}-journalctl",
              json.dumps({"MESSAGE": "m", "MESSAGE_ID": "78cbe2b375704b3eaa519cd951e0e16e",
                          "HEADROOM_RECORD": json.dumps(record, sort_keys=True, separators=(",", ":"))}) + "\n")
        c.put("events_read", f"{base}-es-hit", json.dumps({"_index": "h", "_source": env}) + "\n")
        c.put("events_read", f"{base}-es-search", json.dumps({"hits": {"hits": [{"_source": env}]}}, indent=1))
        c.put("events_read", f"{base}-array", json.dumps([env, record]))
        c.put("events_read", f"{base}-mixed", "level=info msg=x\n\n" + el + "\n{\"log\":\"GET /\"}\n")
        c.put("events_read", f"{base}-cut", el[: len(el) // 2] + "\n")


def config(c):
    for rel in ["deploy/systemd/agent.toml", "deploy/compose/headroom.toml"]:
        c.put("config_toml", rel, read(os.path.join(ROOT, rel)))
    for rel in ["deploy/k8s/configmap.yaml"]:
        text = read(os.path.join(ROOT, rel)).decode()
        m = re.search(r"\|\n((?:    .*\n|\n)+)", text)
        if m:
            c.put("config_toml", rel, "\n".join(l[4:] for l in m.group(1).split("\n")))
    doc = read(os.path.join(ROOT, "docs", "configuration.md")).decode()
    for i, block in enumerate(re.findall(r"```toml\n(.*?)```", doc, re.S)):
        c.put("config_toml", f"docs-configuration-{i}", block)


def state(c):
    # As serialiseState writes it (agent/controller/controller.cpp): fresh, and after a kill.
    c.put("state_file", "fresh", """{
  "clean_runs": 0,
  "generation": 0,
  "history": [],
  "last_kill": null,
  "learned_margin_bytes": 0,
  "oom_kills": 0,
  "retries": 0,
  "version": 1
}
""")
    c.put("state_file", "after-a-kill", """{
  "clean_runs": 0,
  "generation": 3,
  "history": [
    {
      "after_bytes": 3221225472,
      "before_bytes": 2147483648,
      "reason": "OOM kill of the prover (cuzk): margin x1.5"
    }
  ],
  "last_kill": {
    "budget_bytes": 30064771072,
    "charge_bytes": 31138512896,
    "kernel_bytes": 536870912,
    "page_tables_bytes": 268435456,
    "pinned_bytes": 4294967296,
    "prover_victim": true,
    "self_reported_bytes": 28991029248,
    "time_ns": 1796220000000000000,
    "what": "oom_kill"
  },
  "learned_margin_bytes": 3221225472,
  "oom_kills": 1,
  "retries": 1,
  "version": 1
}
""")


def journal_state(c):
    # As serialiseJournalState writes it (agent/journal/journal_state.cpp): a fresh one, and one
    # with an incident in flight and the counts of a sample.
    c.put("journal_state", "fresh", '{"boot_id":"f23f9593-6132-4f4f-94a8-98b605b1cd88","in_flight":{},'
          '"kernel_log_seq":null,"oom_kill_counts":{},"version":1}\n')
    c.put("journal_state", "in-flight", '{"boot_id":"f23f9593-6132-4f4f-94a8-98b605b1cd88","in_flight":'
          '{"1796586379005488252-s1-1":{"event":{"id":1,"kernel_log_seq":1552,"victims":[{"comm":"cuzk",'
          '"pid":18597,"tgid":18597}]},"key":"1796586379005488252-s1-1","version":1}},"kernel_log_seq":1553,'
          '"oom_kill_counts":{"/":0,"/proving/prover":3},"version":1}\n')


def self_report(c):
    c.put("self_report", "file-number", "/run/prover/used\0" "123456\n")
    c.put("self_report", "file-size", "file:/run/prover/used\0 512MiB ")
    c.put("self_report", "file-json", "/run/prover/used\0{\"used_bytes\": 4096, \"other\": 1}")
    c.put("self_report", "url-json", "http://127.0.0.1:9000/status#json:memory.budget.used\0"
          "{\"memory\": {\"budget\": {\"used\": 2147483648}}}")
    c.put("self_report", "url-json-size", "http://127.0.0.1:9000/status#json:memory.budget.used\0"
          "{\"memory\": {\"budget\": {\"used\": \"2GiB\"}}}")
    c.put("self_report", "url-metric", "http://127.0.0.1:9000/metrics#metric:cuzk_used_bytes{pool=\"all\"}\0"
          "# HELP cuzk_used_bytes Bytes in use\n# TYPE cuzk_used_bytes gauge\n"
          "cuzk_used_bytes{pool=\"cpu\"} 1e9\ncuzk_used_bytes{pool=\"all\",gpu=\"0\"} 3.5e9 1796220000000\n"
          "cuzk_other 7\n")
    c.put("self_report", "body-only", "{\"memory\": {\"used_bytes\": 1.5e9}}")


def since(c):
    for i, s in enumerate(["2026-12-02T14:00:00Z", "2026-12-02 14:00", "2026-12-02T16:00:00+02:00",
                           "2026-12-02T14:00:00.5Z", "2026-12-02", "1796220000", "2h", "1.5d", " 90s ", "2024-02-29",
                           "2026-12-02 14:00:30 UTC"]):
        c.put("report_since", f"{i:02d}-{s}", s)


def http(c):
    for i, s in enumerate(["limit=5", "limit=0", "limit=18446744073709551616", "cgroup=/kubepods.slice/prover",
                           "cgroup=%2Fprover&stop_margin=1GiB&chunk=256MiB&max=8GiB&touch=1",
                           "cgroup=/a&cgroup=/b&limit=2", "127.0.0.1:9464\0limit=1", "[::1]:9464\0cgroup=/x",
                           "localhost:0\0"]):
        c.put("http_query", f"{i:02d}", s)


def ring(c):
    def task(pid, tgid, comm):
        return struct.pack("<II16s", pid, tgid, comm)

    # bpf/events.h, field by field; the sizes are its static_asserts'.
    victim = struct.pack("<IIQQ", 1, 1, 123456789, 223456789) + task(4242, 4240, b"allocator") + \
        struct.pack("<Q", 77) + task(5001, 5000, b"cuzk-worker-123") + struct.pack("<Ii", 1001, 500) + \
        struct.pack("<8Q", 88, 0xffff888000000000, 1000, 10, 200, 3, 40, 65536)
    assert len(victim) == 152
    c.put("ring_decode", "oom-victim-task", victim)
    c.put("ring_decode", "oom-victim-pid-only", victim[:4] + struct.pack("<I", 0) + victim[8:])
    for t, n in [(2, "reap-start"), (3, "reap-finish")]:
        c.put("ring_decode", n, struct.pack("<IIQ", t, 5000, 123999999))
    exit_ev = struct.pack("<IIQ", 4, 1, 124000000) + task(5000, 5000, b"cuzk") + struct.pack("<iIQ", 9, 1, 88)
    assert len(exit_ev) == 56
    c.put("ring_decode", "exit-oom-killed", exit_ev)

    def task_record(pid, tgid, flags, comm, parts=(0, 0, 0, 0)):
        r = struct.pack("<IIIIQ", pid, tgid, flags, 1, 5_000_000_000) + struct.pack("<16s", comm)
        r += struct.pack("<QIiII", 88, 1001, 0, 4, 0) + struct.pack("<QQ", 1200, 3)
        r += struct.pack("<4q", 100, 2000, 0, 50) + struct.pack("<5Q", 2500, 10000, 0, 0, 65536)
        r += struct.pack("<6Q", 1 << 20, 1 << 19, 0, 0, 0, 0) + struct.pack("<10Q", *range(10))
        r += struct.pack("<4q", *parts)
        assert len(r) == 312
        return r

    c.put("ring_decode", "tasks",
          task_record(1, 1, 0, b"systemd") + task_record(2, 2, 2, b"kthreadd") +
          task_record(5000, 5000, (1 << 3) | (1 << 4) | (1 << 5), b"cuzk", (-3, 5, 0, 1)) +
          task_record(5001, 5000, 1, b"cuzk-worker"))


def kube(c):
    # The kubelet's layout of /var/log/containers entries and their links' targets (handmade).
    cid, uid = "4f7d1c2b9a8e6d5c3b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c", "0c1f6c1e-5b7d-4c1a-9f2e-6a8b8d3c4e21"
    for i, s in enumerate([f"cuzk-prover-7d9f8b6c4-x2x9z_proving_cuzk-{cid}.log", f"curio-0_fil_curio-sidecar-{cid}.log",
                           f"/var/log/pods/proving_cuzk-prover-0_{uid}/cuzk/0.log",
                           f"../../pods/fil_curio-0_{uid}/curio-sidecar/3.log",
                           # engines' inspect answers, trimmed: Docker's (and Podman's compatible API), Podman's libpod
                           '{"Id":"' + cid + '","Name":"/prover-web","State":{"Status":"running","Pid":4242}}',
                           '{"Id":"' + cid + '","Name":"hog","State":{}}']):
        c.put("kube_names", f"{i:02d}", s)


def make(out):
    c = Corpus(out)
    for f in [proc_files, cgroup_dirs, kmsg, journal, events, config, state, journal_state, self_report, since, http,
              ring, kube]:
        f(c)


def main():
    target = os.path.join(HERE, "corpus")
    if "--check" in sys.argv:
        with tempfile.TemporaryDirectory() as tmp:
            make(tmp)
            cmp = filecmp.dircmp(tmp, target)
            diff = []

            def walk(d, rel):
                diff.extend(os.path.join(rel, f) for f in d.left_only + d.diff_files)
                for name, sub in d.subdirs.items():
                    walk(sub, os.path.join(rel, name))
            walk(cmp, "")
            if diff:
                print("the seed corpus is not what make_corpus.py writes:", *diff, sep="\n  ")
                return 1
            return 0
    readme = os.path.join(target, "README.md")
    kept = read(readme) if os.path.isfile(readme) else None
    for name in os.listdir(target) if os.path.isdir(target) else []:
        if os.path.isdir(os.path.join(target, name)):
            shutil.rmtree(os.path.join(target, name))
    make(target)
    if kept is not None:
        with open(readme, "wb") as f:
            f.write(kept)
    return 0


if __name__ == "__main__":
    sys.exit(main())
