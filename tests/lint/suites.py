#!/usr/bin/env python3
"""Every suite the unit-test binary holds has its ctest entry: the suites were read from the
sources at configure time (tests/CMakeLists.txt), and a suite added or renamed since, or written
in a way the reading missed, would otherwise go unrun without a word.

usage: suites.py UNIT_TESTS_BINARY SUITE,SUITE,...
"""
import re
import subprocess
import sys


def main():
    binary, registered = sys.argv[1], set(filter(None, sys.argv[2].split(",")))
    listing = subprocess.run([binary, "--gtest_list_tests"], capture_output=True, text=True, check=True).stdout
    held = set()
    for line in listing.splitlines():
        m = re.match(r"^(\S+)\.(\s+#.*)?$", line)  # "Suite." (tests follow, indented)
        if m:
            held.add(m.group(1).split("/")[-1])  # PREFIX/Suite for a parameterised one
    missing = sorted(held - registered)
    stale = sorted(registered - held)
    if missing or stale:
        if missing:
            print("suites in the binary without a ctest entry (re-run cmake): " + ", ".join(missing))
        if stale:
            print("ctest entries for suites the binary does not hold (re-run cmake): " + ", ".join(stale))
        return 1
    print(f"every one of {len(held)} suites has its ctest entry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
