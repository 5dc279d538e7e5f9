#!/usr/bin/env bash
# Makes the GPU check's bundle: a directory and its tarball that run on any x86-64 Linux machine
# with an NVIDIA GPU and its driver, whatever its distribution, without installing anything but
# python3. The binaries run through the dynamic loader and libraries they were built with, shipped
# in lib/ (glibc included); the CUDA program has the runtime linked in and takes only the
# driver's libcuda.so.1 from the machine.
#   bundle.sh OUT HEADROOM PROVER [STAND_IN_DIR]
# STAND_IN_DIR (the tests' fake-driver/ with cuda-client beside it) goes in too, for the check of
# the bundle itself on a machine without a GPU (run.sh --stand-in).
set -euo pipefail
out=$1 headroom=$2 prover=$3 stand_in=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
b=$out/headroom-gpu-check
rm -rf "$b" "$out/headroom-gpu-check.tar.gz"
mkdir -p "$b/bin" "$b/lib"
cp "$headroom" "$b/bin/headroom"
cp "$prover" "$b/bin/headroom-cuda-prover"
cp "$here/gpu_check.py" "$b/gpu_check.py"
# Every library the binaries load, the loader and glibc among them.
for bin in "$headroom" "$prover"; do
  ldd "$bin" | awk '/=> \//{print $3} /^\t\/lib/{print $1}' | while read -r lib; do
    cp -L "$lib" "$b/lib/$(basename "$lib")"
  done
done
[ -e "$b/lib/ld-linux-x86-64.so.2" ] || { echo "bundle.sh: no ld-linux-x86-64.so.2 in ldd's answer" >&2; exit 1; }
if [ -n "$stand_in" ]; then
  mkdir -p "$b/stand-in"
  cp -L "$stand_in/fake-driver/libcuda.so.1" "$stand_in/fake-driver/libnvidia-ml.so.1" "$stand_in/cuda-client" "$b/stand-in/"
fi
cat > "$b/run.sh" <<'RUN'
#!/bin/sh
# headroom's GPU check (docs/gpu-check.md): as root, on a machine with an NVIDIA GPU and its driver.
#   ./run.sh [OUT]              the check; OUT/gpu-check.md says what it found (default ./out)
#   ./run.sh OUT --stand-in     the same checks on the tests' stand-in driver (no GPU needed)
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/out}
[ $# -gt 0 ] && shift
loader="$here/lib/ld-linux-x86-64.so.2 --library-path $here/lib"
if [ "${1:-}" = "--stand-in" ]; then
  exec python3 "$here/gpu_check.py" --headroom "$loader $here/bin/headroom" --out "$out" --stand-in "$here/stand-in"
fi
exec python3 "$here/gpu_check.py" --headroom "$loader $here/bin/headroom" \
  --prover "$here/bin/headroom-cuda-prover" --loader "$loader" --out "$out" "$@"
RUN
chmod +x "$b/run.sh" "$b/gpu_check.py"
tar -C "$out" -czf "$out/headroom-gpu-check.tar.gz" headroom-gpu-check
echo "bundle.sh: $out/headroom-gpu-check.tar.gz ($(du -sh "$out/headroom-gpu-check.tar.gz" | cut -f1))"
