#!/usr/bin/env python3
"""Runs headroom's libFuzzer targets (tests/fuzz): replays, short runs for the tests, long runs.

  fuzz.py replay BINARY DIR...
      Every file under the DIRs (seed corpus, regression inputs) run once through BINARY; fails
      when any input crashes, leaks, hits undefined behaviour or breaks an invariant.
  fuzz.py run BINARY --name NAME --source tests/fuzz --work DIR --seconds N [--fresh]
      Fuzzes for N seconds from the seed corpus, the regression inputs and what earlier runs kept
      in DIR/corpus (the build tree, never the source tree; --fresh empties it first), a crash's
      input left in DIR/artifacts.
  fuzz.py all --build BUILD_DIR --source tests/fuzz --seconds N [--jobs J] [--only NAME,...]
      `run` for every target built, J at a time, and a table: executions, corpus, crashes.

A crash's input is what becomes a regression input (docs/development.md, "Fuzzing").
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import time

# Each input has this long (an input this slow is a bug: a parser must not stall a sample).
INPUT_TIMEOUT_S = 10
RSS_LIMIT_MB = 2048
IGNORED = {"README.md", "PROVENANCE"}


def inputs_under(dirs):
    files = []
    for d in dirs:
        if not os.path.isdir(d):
            continue
        for root, _, names in os.walk(d):
            files += [os.path.join(root, n) for n in sorted(names) if n not in IGNORED and not n.startswith(".")]
    return sorted(files)


def replay(binary, dirs):
    files = inputs_under(dirs)
    if not files:
        print(f"no inputs under {' '.join(dirs)}", file=sys.stderr)
        return 1
    for i in range(0, len(files), 200):
        chunk = files[i:i + 200]
        r = subprocess.run([binary, f"-timeout={INPUT_TIMEOUT_S}", f"-rss_limit_mb={RSS_LIMIT_MB}"] + chunk,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        if r.returncode != 0:
            print(r.stdout[-20000:])
            print(f"replay of {os.path.basename(binary)}: an input failed (exit {r.returncode})", file=sys.stderr)
            return 1
    print(f"{os.path.basename(binary)}: {len(files)} inputs replayed, none failed")
    return 0


def target_dirs(source, name):
    seed = os.path.join(source, "corpus", name)
    regressions = os.path.join(source, "regressions", name)
    dictionary = os.path.join(source, "dict", f"{name}.dict")
    return seed, regressions, dictionary if os.path.isfile(dictionary) else None


def run(binary, name, source, work, seconds, quiet=False, fresh=False):
    """Fuzzes one target; returns its figures (a dict). `fresh`: the work corpus emptied first, so
    that the run reads the seeds and regression inputs alone (a bounded start, for the tests)."""
    seed, regressions, dictionary = target_dirs(source, name)
    corpus = os.path.join(work, "corpus")
    artifacts = os.path.join(work, "artifacts")
    if fresh:
        shutil.rmtree(corpus, ignore_errors=True)
    os.makedirs(corpus, exist_ok=True)
    os.makedirs(artifacts, exist_ok=True)
    before = set(os.listdir(artifacts))
    cmd = [binary, corpus, seed] + ([regressions] if os.path.isdir(regressions) else [])
    cmd += [f"-max_total_time={seconds}", f"-timeout={INPUT_TIMEOUT_S}", f"-rss_limit_mb={RSS_LIMIT_MB}",
            "-print_final_stats=1", f"-artifact_prefix={artifacts}/"]
    if dictionary:
        cmd.append(f"-dict={dictionary}")
    started = time.monotonic()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    wall = time.monotonic() - started
    with open(os.path.join(work, "last-run.log"), "w") as log:
        log.write(" ".join(cmd) + "\n" + r.stdout)
    execs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", r.stdout)
    corp = re.findall(r"corp: (\d+)/", r.stdout)
    cov = re.findall(r"cov: (\d+)", r.stdout)
    found = sorted(set(os.listdir(artifacts)) - before)
    res = {
        "name": name,
        "rc": r.returncode,
        "execs": int(execs[-1]) if execs else 0,
        "corpus": int(corp[-1]) if corp else len(os.listdir(corpus)),
        "cov": int(cov[-1]) if cov else 0,
        "wall": wall,
        "crashes": [os.path.join(artifacts, f) for f in found],
        "log": os.path.join(work, "last-run.log"),
    }
    if not quiet and (r.returncode != 0 or found):
        print(r.stdout[-20000:])
    return res


def report(res):
    crashes = len(res["crashes"]) + (1 if res["rc"] != 0 and not res["crashes"] else 0)
    return (f"{res['name']:<16} {res['execs']:>12} {res['execs'] / max(res['wall'], 1e-9):>9.0f} "
            f"{res['corpus']:>8} {res['cov']:>7} {crashes:>8}")


HEADER = f"{'target':<16} {'executions':>12} {'exec/s':>9} {'corpus':>8} {'cov':>7} {'crashes':>8}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("replay")
    p.add_argument("binary")
    p.add_argument("dirs", nargs="+")
    p = sub.add_parser("run")
    p.add_argument("binary")
    p.add_argument("--name", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--fresh", action="store_true", help="empty the work corpus first: start from the seeds alone")
    p = sub.add_parser("all")
    p.add_argument("--build", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--only", default="")
    a = ap.parse_args()

    if a.cmd == "replay":
        return replay(a.binary, a.dirs)
    if a.cmd == "run":
        res = run(a.binary, a.name, a.source, a.work, a.seconds, fresh=a.fresh)
        print(HEADER)
        print(report(res))
        for c in res["crashes"]:
            print(f"crash input: {c}")
        return 0 if res["rc"] == 0 and not res["crashes"] else 1

    bin_dir = os.path.join(a.build, "tests", "fuzz")
    names = sorted(f[len("fuzz_"):] for f in os.listdir(bin_dir) if f.startswith("fuzz_")
                   and os.access(os.path.join(bin_dir, f), os.X_OK) and os.path.isfile(os.path.join(bin_dir, f)))
    if a.only:
        names = [n for n in names if n in a.only.split(",")]
    if not names:
        print(f"no fuzz targets in {bin_dir}: build the Debug build with clang (make fuzz does)", file=sys.stderr)
        return 1
    print(f"{len(names)} targets, {a.seconds} s each, {a.jobs} at a time", flush=True)
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = [pool.submit(run, os.path.join(bin_dir, f"fuzz_{n}"), n, a.source,
                               os.path.join(a.build, "fuzz", n), a.seconds, True) for n in names]
        for f in concurrent.futures.as_completed(futures):
            res = f.result()
            results.append(res)
            print(f"  {res['name']}: done", flush=True)
    results.sort(key=lambda r: r["name"])
    print(HEADER)
    for res in results:
        print(report(res))
    bad = [r for r in results if r["rc"] != 0 or r["crashes"]]
    for r in bad:
        print(f"{r['name']}: exit {r['rc']}, log {r['log']}")
        for c in r["crashes"]:
            print(f"  crash input: {c}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
