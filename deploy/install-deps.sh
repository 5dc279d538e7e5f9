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
# --gpu (make test-gpu, make gpu-check): the CUDA Toolkit 11.8 (nvcc), its headers and NVML's, from
# Debian 12's non-free component; they bring the driver's user-space libraries (libcuda1,
# libnvidia-ml1: contrib's nvidia-support among their dependencies), never its kernel module.
gpu_pkgs=(nvidia-cuda-toolkit nvidia-cuda-dev libnvidia-ml-dev)
# Those, and what they depend on from contrib and non-free: the only packages headroom's sources
# file lets apt take from those components (apt preferences: every other one pinned at -1).
gpu_allowed=(nvidia-cuda-toolkit nvidia-cuda-dev libnvidia-ml-dev libnvidia-ml1 libcuda1 nvidia-support nvidia-alternative
             nvidia-legacy-check nvidia-installer-cleanup libnvidia-ptxjitcompiler1 libnvidia-pkcs11-openssl3
             glx-alternative-mesa glx-alternative-nvidia glx-diversions update-glx nvidia-profiler nvidia-opencl-dev
             libaccinj64-11.8 libcuinj64-11.8 libcupti-dev libcupti11.8 libcudart11.0 libcublas11 libcublaslt11
             libcufft10 libcufftw10 libcurand10 libcusolver11 libcusolvermg11 libcusparse11 libnppc11 libnppial11
             libnppicc11 libnppidei11 libnppif11 libnppig11 libnppim11 libnppist11 libnppisu11 libnppitc11 libnpps11
             libnvblas11 libnvjpeg11 libnvrtc-builtins11.8 libnvrtc11.2 libnvtoolsext1 libnvvm4)
gpu_sources=/etc/apt/sources.list.d/headroom-cuda.sources
gpu_preferences=/etc/apt/preferences.d/headroom-cuda

# The contrib and non-free components of Debian 12 in a sources file of headroom's own, limited to
# the CUDA packages by an apt preferences file; whether either changed.
add_gpu_sources() {
  local sources preferences changed=1
  sources="# headroom (deploy/install-deps.sh --gpu): the CUDA Toolkit from Debian 12's non-free component.
# Only the packages named in $gpu_preferences are taken from here.
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"
  preferences="# headroom (deploy/install-deps.sh --gpu): of contrib and non-free, only the CUDA Toolkit,
# NVML's headers and what they depend on (the first record that matches a package sets its priority).
Package: ${gpu_allowed[*]}
Pin: release o=Debian
Pin-Priority: 500

Package: *
Pin: release o=Debian,c=non-free
Pin-Priority: -1

Package: *
Pin: release o=Debian,c=contrib
Pin-Priority: -1
"
  if ! printf '%s' "$sources" | cmp -s - "$gpu_sources"; then
    printf '%s' "$sources" > "$gpu_sources"
    changed=0
  fi
  if ! printf '%s' "$preferences" | cmp -s - "$gpu_preferences"; then
    printf '%s' "$preferences" > "$gpu_preferences"
    changed=0
  fi
  return $changed
}

# --build-only: what the build needs; --test-only: what the tests need besides (make test installs
# those while it builds); --gpu: what the build needs and the CUDA Toolkit (below).
case "${1:-}" in
  --build-only) want=("${build_pkgs[@]}") ;;
  --test-only) want=("${test_pkgs[@]}") ;;
  --gpu) want=("${build_pkgs[@]}" "${gpu_pkgs[@]}") ;;
  *) want=("${build_pkgs[@]}" "${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
esac

missing=()
for p in "${want[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done

# The sources file and its pins, whether or not a package is missing (apt then follows the
# packages' updates from where they came).
if [ "${1:-}" = "--gpu" ] && [ "$(id -u)" -eq 0 ] && add_gpu_sources; then
  echo "install-deps: $gpu_sources and $gpu_preferences written"
  [ ${#missing[@]} -eq 0 ] && apt-get update -qq
fi

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
