#!/usr/bin/env python3
"""The model is pure: agent/model/ and include/headroom/model/ compute a snapshot from what the
sources and sensors read, and neither read, write, log nor wait themselves.

Checked twice, so that neither a direct include nor a call hidden in a header can slip by:
  - no file of the model includes a header whose purpose is I/O or waiting (files, sockets,
    processes, threads' sleeps, logging, HTTP, the sources' file readers);
  - the model library's object code calls no such function: its undefined symbols (nm -u) hold
    no system call wrapper, stdio, file stream, filesystem, sleep, logger or headroom reader.

  pure_model.py --source DIR --library build/libheadroom_model.a
"""
import argparse
import os
import re
import subprocess
import sys

# Headers whose purpose is I/O or waiting. Plain data headers of the lower layers (the types a
# snapshot is made from) are allowed even where they also declare their readers: the symbol
# check below is what tells whether a reader is called.
BANNED_INCLUDES = [
    r"<fstream>", r"<iostream>", r"<cstdio>", r"<stdio\.h>", r"<filesystem>", r"<thread>",
    r"<future>", r"<condition_variable>", r"<unistd\.h>", r"<fcntl\.h>", r"<dirent\.h>",
    r"<poll\.h>", r"<sys/(?!types\.h>)[a-z_/]+\.h>", r"<spdlog/.*>", r"<curl/.*>", r"<httplib\.h>",
    r"<systemd/.*>", r'"headroom/util/files\.h"', r'"headroom/util/logging\.h"',
    r'"headroom/sources/workload_names\.h"', r'"headroom/sources/kmsg\.h"',
]

# Undefined symbols (demangled) that do I/O or wait.
BANNED_SYMBOLS = [
    r"^(open|openat|open64|read|pread|pread64|readv|write|pwrite|writev|close|lseek|stat|fstat|lstat|"
    r"fstatat|statx|opendir|readdir|readdir64|closedir|fopen|fdopen|fread|fwrite|fputs|fputc|fgets|fflush|"
    r"fclose|printf|fprintf|puts|getline|getdelim|ioctl|syscall|socket|connect|accept|accept4|bind|listen|"
    r"send|sendto|sendmsg|recv|recvfrom|recvmsg|poll|ppoll|select|epoll_wait|epoll_create1|epoll_ctl|sleep|"
    r"usleep|nanosleep|clock_nanosleep|fsync|fdatasync|mmap|munmap|readlink|readlinkat|getdents64|"
    r"pthread_cond_wait|pthread_cond_timedwait|pthread_cond_clockwait|sched_yield)(@.*)?$",
    r"std::basic_[io]?fstream", r"std::basic_filebuf", r"std::filesystem::", r"std::this_thread::",
    r"std::cout", r"std::cerr", r"std::clog", r"std::condition_variable", r"^spdlog::", r"^fmt::v\d+::print",
    r"^fmt::.*vprint", r"^curl_", r"^httplib::",
    r"^headroom::(FsRoot|Dir|Fd|WorkloadResolver|Collector|ProcessCache|KmsgReader)::",
    r"^headroom::(readFile|readProcess|readProcessCached|listPids|readMeminfo|readCgroup)",
]


def includes_of(path):
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r'\s*#\s*include\s*([<"][^>"]+[>"])', line)
            if m:
                yield n, m.group(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", required=True)
    ap.add_argument("--library", required=True, help="the model's static library")
    a = ap.parse_args()
    if not os.path.exists(a.library):
        print(f"pure_model.py: --library {a.library}: no such file", file=sys.stderr)
        return 2

    problems = []
    files = []
    for d in ("agent/model", "include/headroom/model"):
        root = os.path.join(a.source, d)
        if not os.path.isdir(root):
            print(f"pure_model.py: --source {a.source}: no {d}", file=sys.stderr)
            return 2
        files += sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith((".h", ".cpp")))
    banned = [re.compile(p) for p in BANNED_INCLUDES]
    for path in files:
        for n, inc in includes_of(path):
            if any(b.fullmatch(inc) for b in banned):
                problems.append(f"{os.path.relpath(path, a.source)}:{n}: includes {inc}, which is for I/O or waiting")

    r = subprocess.run(["nm", "-u", "-C", a.library], capture_output=True, text=True, check=True)
    symbols = set()
    for line in r.stdout.splitlines():
        m = re.match(r"\s*U (.+)$", line)
        if m:
            symbols.add(m.group(1))
    banned_syms = [re.compile(p) for p in BANNED_SYMBOLS]
    for s in sorted(symbols):
        if any(b.search(s) for b in banned_syms):
            problems.append(f"{os.path.basename(a.library)} calls {s}, which does I/O or waits")

    for p in problems:
        print(p)
    print(f"model: {len(files)} files, {len(symbols)} symbols it calls; {len(problems)} that do I/O or wait")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
