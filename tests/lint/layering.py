#!/usr/bin/env python3
"""The layering, checked with the compiler: each layer sees its own headers and those of the
layers below it, and nothing of the layers above.

For every layer of build/layers/layers.txt (written by cmake/Layers.cmake):
  - every header of every layer it sees preprocesses with that layer's view alone, so no header
    reaches above its layer through another;
  - a header of each layer it does not see is "file not found" with that view: an upward include
    is a compile error, not a convention;
  - the foundation (util, then net: HTTP's one home) is seen by every layer above it, and sees
    nothing above itself, so that no layer keeps an HTTP stack or a Result of its own.
"""
import argparse
import os
import subprocess
import sys
import tempfile

# The bottom layers, in order: each sees those before it alone, and every layer above sees them all.
FOUNDATION = ["util", "net"]


def preprocess(compiler, includes, text):
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        args = [compiler, "-std=c++20", "-E", "-o", os.devnull, path]
        for inc in includes:
            args[1:1] = ["-I", inc]
        r = subprocess.run(args, capture_output=True, text=True)
        return r.returncode, r.stderr
    finally:
        os.unlink(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--views", required=True, help="build/layers")
    ap.add_argument("--generated", required=True, help="build/generated (version.h)")
    ap.add_argument("--include", required=True, help="the source tree's include/headroom")
    a = ap.parse_args()

    layers = {}
    order = []
    with open(os.path.join(a.views, "layers.txt")) as f:
        for line in f:
            name, _, seen = line.partition(":")
            name = name.strip()
            if name == "tests":
                continue
            layers[name] = seen.split()
            order.append(name)
    headers = {}
    for layer in order:
        d = os.path.join(a.include, layer)
        headers[layer] = sorted(
            os.path.relpath(os.path.join(root, n), a.include)
            for root, _, names in os.walk(d) for n in names if n.endswith(".h")) if os.path.isdir(d) else []

    failures = []
    checked = 0
    for i, base in enumerate(FOUNDATION):
        if base not in layers:
            failures.append(f"layer {base} is missing from {a.views}/layers.txt")
            continue
        if sorted(layers[base]) != sorted(FOUNDATION[:i + 1]):
            failures.append(f"layer {base} must see {' '.join(FOUNDATION[:i + 1])} alone, "
                            f"not {' '.join(layers[base])}")
        for layer in order:
            if layer not in FOUNDATION and base not in layers[layer]:
                failures.append(f"layer {layer} does not see {base}, which every layer above it may use")
    for layer in order:
        view = [os.path.join(a.views, layer), a.generated]
        seen = layers[layer]
        visible = [h for s in seen for h in headers.get(s, [])]
        if visible:
            rc, err = preprocess(a.compiler, view, "".join(f'#include "headroom/{h}"\n' for h in visible))
            checked += len(visible)
            if rc != 0:
                failures.append(f"layer {layer}: its own and lower headers do not preprocess with its view alone:\n{err}")
        for other in order:
            if other in seen or not headers.get(other):
                continue
            h = headers[other][0]
            rc, err = preprocess(a.compiler, view, f'#include "headroom/{h}"\n')
            checked += 1
            if rc == 0 or "file not found" not in err:
                failures.append(f"layer {layer} can include headroom/{h} of layer {other}, which sits above it "
                                f"or beside it:\n{err}")
    if failures:
        print("\n".join(failures))
        return 1
    print(f"layering holds: {len(order)} layers, {checked} includes checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
