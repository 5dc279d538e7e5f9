#!/usr/bin/env python3
"""clang-tidy over the translation units the tree's history has not linted clean.

A translation unit's result under clang-tidy is a function of what the compiler sees (the
preprocessed source, headers and all, with its comments: NOLINT is one), the flags, the .clang-tidy configuration, the extra
arguments and clang-tidy itself. This script hashes exactly those into one key per unit and
lints only the units whose key is not in a record of keys already linted clean; every other
unit is the same input, byte for byte, as one that passed. Records (one "KEY PATH" line each):

  tests/lint/tidy-linted.txt   committed: written by `make tidy` for the tree as committed
  <build>/tidy-linted.txt      the build directory's own: what this checkout has linted since

Paths inside the source and build directories are hashed relative to them (a clean clone in
another directory has the same keys), and the version string of the generated version.h is
hashed as a placeholder (it names the commit, and no check reads a string's contents).
A unit that changed, a header it includes, a flag, the configuration or the clang-tidy
release: a new key, linted again.

  tidy.py --build DIR [--known FILE]... [--record FILE] [--write-known FILE] [--jobs N]
          [--analyzer shallow|deep] [--extra-arg ARG]... PATH...

Exit 0 when every unit is clean (in a record or linted now), 1 when one has findings (printed),
2 on bad input.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
import time

TIDY = "clang-tidy-14"


def fail_usage(msg):
    print(f"tidy.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read_record(path):
    """{key: path} of a record file; a file that is not there is an empty record."""
    keys = {}
    if not os.path.exists(path):
        return keys
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 2 or not re.fullmatch(r"[0-9a-f]{64}", parts[0]):
                fail_usage(f"{path}: line {n}: not \"KEY PATH\": {line[:80]!r}")
            keys[parts[0]] = parts[1]
    return keys


def preprocess_args(entry):
    """The unit's compile command as a preprocessor run to stdout, without line markers."""
    args = entry.get("arguments") or entry["command"].split()
    out = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD"):
            continue
        out.append(a)
    # -C: comments kept, since NOLINT comments change what clang-tidy reports.
    return out + ["-E", "-P", "-C", "-o", "-"]


def flags_text(entry):
    args = entry.get("arguments") or entry["command"].split()
    return " ".join(preprocess_args({"arguments": args}))


class Keyer:
    def __init__(self, source, build, salt):
        self.source = os.path.realpath(source)
        self.build = os.path.realpath(build)
        self.salt = salt
        self.version = None
        version_h = os.path.join(self.build, "generated", "headroom", "version.h")
        if os.path.exists(version_h):
            m = re.search(r'kVersion = (".*?");', open(version_h).read())
            if m:
                self.version = m.group(1)

    def normal(self, text):
        text = text.replace(self.build, "@BUILD@").replace(self.source, "@SOURCE@")
        if self.version:
            text = text.replace(self.version, '"@VERSION@"')
        return text

    def key(self, entry):
        r = subprocess.run(preprocess_args(entry), cwd=entry["directory"], capture_output=True, text=True,
                           errors="replace")
        if r.returncode != 0:
            return None, r.stderr
        h = hashlib.sha256()
        for part in (self.salt, self.normal(flags_text(entry)), self.normal(r.stdout)):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest(), ""


def lint(build, extra, path):
    cmd = [TIDY, "-p", build, "-quiet"] + [f"-extra-arg={a}" for a in extra] + [path]
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    return r.returncode, r.stdout + r.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="the build directory (its compile_commands.json)")
    ap.add_argument("--source", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    ap.add_argument("--known", action="append", default=[], help="a record of keys linted clean")
    ap.add_argument("--record", help="where the keys linted clean now are added")
    ap.add_argument("--write-known", help="rewrite this record with the keys of every unit, when all are clean")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--analyzer", choices=["shallow", "deep"], default="shallow",
                    help="the static analyzer's mode: shallow (shorter paths, less inlining; a third of the CPU of "
                    "deep) or deep")
    ap.add_argument("--extra-arg", action="append", default=[], help="passed to clang-tidy (and hashed)")
    ap.add_argument("paths", nargs="+", help="directories (under --source) whose units are linted")
    a = ap.parse_args()

    start = time.monotonic()
    if a.analyzer == "shallow":
        a.extra_arg = ["-Xclang", "-analyzer-config", "-Xclang", "mode=shallow"] + a.extra_arg
    ccdb = os.path.join(a.build, "compile_commands.json")
    if not os.path.exists(ccdb):
        fail_usage(f"--build {a.build}: no compile_commands.json there")
    config = os.path.join(a.source, ".clang-tidy")
    if not os.path.exists(config):
        fail_usage(f"--source {a.source}: no .clang-tidy there")
    if a.jobs < 1:
        fail_usage(f"--jobs {a.jobs}: at least 1")
    prefixes = []
    for p in a.paths:
        full = os.path.realpath(os.path.join(a.source, p))
        if not os.path.isdir(full):
            fail_usage(f"{p}: not a directory under {a.source}")
        prefixes.append(full + os.sep)

    entries = {}
    for e in json.load(open(ccdb)):
        f = os.path.realpath(os.path.join(e["directory"], e["file"]))
        if any(f.startswith(p) for p in prefixes):
            entries[f] = e
    if not entries:
        fail_usage(f"no translation unit of {', '.join(a.paths)} in {ccdb}")

    version = subprocess.run([TIDY, "--version"], capture_output=True, text=True, check=True).stdout
    salt = "\0".join([version, open(config).read(), *a.extra_arg])
    keyer = Keyer(a.source, a.build, salt)
    known = {}
    for k in a.known:
        known.update(read_record(k))

    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        keys = dict(zip(entries, pool.map(lambda f: keyer.key(entries[f]), entries)))
    bad = [f for f, (k, _) in keys.items() if k is None]
    for f in bad:
        print(f"{os.path.relpath(f, a.source)}: does not preprocess:\n{keys[f][1]}")
    todo = sorted(f for f, (k, _) in keys.items() if k is not None and k not in known)

    failed = list(bad)
    record = None
    if a.record:
        os.makedirs(os.path.dirname(os.path.abspath(a.record)), exist_ok=True)
        record = open(a.record, "a")
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for f, (rc, out) in zip(todo, pool.map(lambda f: lint(a.build, a.extra_arg, f), todo)):
            rel = os.path.relpath(f, a.source)
            if rc != 0:
                failed.append(f)
                print(f"{rel}: clang-tidy found (exit {rc}):\n{out}", flush=True)
            elif record:
                # Each as it passes: a run cut short keeps what it linted.
                record.write(f"{keys[f][0]} {rel}\n")
                record.flush()
    if record:
        record.close()
    if a.write_known and not failed:
        lines = sorted((os.path.relpath(f, a.source), k) for f, (k, _) in keys.items())
        with open(a.write_known, "w") as out:
            out.write("# Translation units linted clean by clang-tidy (tests/lint/tidy.py; `make tidy` writes it).\n")
            out.writelines(f"{k} {p}\n" for p, k in lines)

    print(f"clang-tidy: {len(entries)} translation units, {len(entries) - len(todo) - len(bad)} as linted before "
          f"(the records), {len(todo)} linted now, {len(failed)} with findings; {time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
