#!/usr/bin/env bash
# Regenerates bpf/vmlinux/<arch>/vmlinux.h from the running kernel's BTF. Run once per arch on
# a recent kernel and commit the result: builds stay reproducible, and CO-RE relocates every
# field access to the kernel the programs are loaded on (5.15-6.x).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
case "$(uname -m)" in
  x86_64) arch=x86 ;;
  aarch64) arch=arm64 ;;
  *) echo "gen-vmlinux: unsupported arch $(uname -m)" >&2; exit 1 ;;
esac
btf=${1:-/sys/kernel/btf/vmlinux}
[ -r "$btf" ] || { echo "gen-vmlinux: $btf not readable (kernel without CONFIG_DEBUG_INFO_BTF?)" >&2; exit 1; }
mkdir -p "$here/$arch"
bpftool btf dump file "$btf" format c > "$here/$arch/vmlinux.h.tmp"
mv "$here/$arch/vmlinux.h.tmp" "$here/$arch/vmlinux.h"
echo "gen-vmlinux: wrote $here/$arch/vmlinux.h from $btf ($(uname -r))"
