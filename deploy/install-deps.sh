#!/usr/bin/env bash
# Installs every Debian 12 package that headroom's build and tests need.
# Idempotent: installs only what is missing, and runs `apt-get update` only then.
set -euo pipefail

build_pkgs=(
  build-essential cmake ninja-build pkg-config git
  clang llvm clang-tidy clang-format libclang-rt-14-dev
  libbpf-dev bpftool libelf-dev zlib1g-dev
  prometheus-cpp-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libcpp-httplib-dev libsystemd-dev
  libssl-dev libcrypt-dev libyaml-cpp-dev libcurl4-openssl-dev
  # headroom top's terminal
  libncurses-dev
)
test_pkgs=(prometheus stress-ng bpftrace procps util-linux python3 python3-yaml libxml2-utils libcap2-bin systemd
           # the HTTP endpoint over TLS: certificates made by the tests, a client with a certificate
           openssl curl
           # the HTML report looked at in a real browser (tests/kit/report_browser_test.py)
           chromium
           # headroom top driven in a real terminal (tests/kit/top_test.py)
           tmux
           # the kernel matrix (tests/kernels): Debian's kernels under qemu, a busybox initramfs,
           # and podman for the container scenarios inside the cgroup v2 guests
           qemu-system-x86 busybox-static cpio kmod podman)
# make bench: the exporters the agent is measured beside (tests/bench/processes.py)
bench_pkgs=(prometheus-node-exporter prometheus-process-exporter)

# --build-only: what the build needs; --test-only: what the tests need besides (make test installs
# those while it builds).
case "${1:-}" in
  --build-only) want=("${build_pkgs[@]}") ;;
  --test-only) want=("${test_pkgs[@]}") ;;
  *) want=("${build_pkgs[@]}" "${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
esac

missing=()
for p in "${want[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#want[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root, or install them)" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
