# headroom: the two set-up commands, plus the rest. Thin: CMake does the building.
#   make run    install missing build packages, build (Release), start the agent on safe defaults
#   make test   install missing packages, build (Debug, ASan+UBSan), run every test through ctest
#   make build-gcc  every target, the tests too, with g++ (Release, warnings as errors): CI's second step
#   make demo   the incident headroom exists for, reproduced at small scale (root)
#   make test-kernels  the kernel-facing suites on Debian's 5.10, 6.1 and 6.12 (cgroup v2 and v1) under qemu, and here
#   make test-gpu   the CUDA Toolkit from Debian (install-deps.sh --gpu), the real CUDA programs built
#                   with its nvcc, and the GPU-facing tests (the stand-in driver where there is no GPU)
#   make gpu-check  the self-contained GPU check bundle; run at once where a GPU is (docs/gpu-check.md)
#   make churn  the agent under process and cgroup churn with OOM kills, CHURN_SECONDS long (root)
#   make fuzz   every parser's libFuzzer target for FUZZ_SECONDS each, then a table of what they did
SHELL := /bin/bash
JOBS ?= $(shell nproc)
RELEASE := build/release
DEBUG := build/debug
CMAKE_COMMON := -G Ninja -DHEADROOM_WERROR=ON

.PHONY: all deps deps-build build build-debug build-gcc run test test-gpu gpu-check test-kernels capture-fixtures unit-test fuzz tidy format bench churn demo clean

all: build

deps:
	@./deploy/install-deps.sh

deps-build:
	@./deploy/install-deps.sh --build-only

$(RELEASE)/build.ninja:
	cmake -S . -B $(RELEASE) $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=Release -DHEADROOM_TESTS=OFF

# The test build with clang: a third faster than g++ with the sanitizers on, and the release build
# (g++) and this one then keep the code clean under both compilers' warnings.
$(DEBUG)/build.ninja:
	cmake -S . -B $(DEBUG) $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=Debug -DHEADROOM_SANITIZERS=ON \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++

build: deps-build $(RELEASE)/build.ninja
	cmake --build $(RELEASE) -j $(JOBS)

build-debug: deps $(DEBUG)/build.ninja
	cmake --build $(DEBUG) -j $(JOBS)

# Every target with g++, the tests included: the test build above is clang's, and g++ warns of
# other things (CI runs this after `make test`).
GCC_BUILD := build/gcc
$(GCC_BUILD)/build.ninja:
	cmake -S . -B $(GCC_BUILD) $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++

build-gcc: deps $(GCC_BUILD)/build.ninja
	cmake --build $(GCC_BUILD) -j $(JOBS)

# The agent on safe defaults: every memory cgroup with a process, every sensor this kernel
# allows, metrics and the JSON API on 127.0.0.1:9464. Ctrl-C stops it cleanly.
run: build
	$(RELEASE)/headroom agent

# The tests' packages (Chromium, qemu, Prometheus, ...) install while the Debug build runs: on a
# fresh machine their download is most of their time, and the build needs none of them.
test: deps-build
	@$(MAKE) --no-print-directory $(DEBUG)/build.ninja
	@mkdir -p build; ./deploy/install-deps.sh --test-only > build/install-test-deps.log 2>&1 & deps=$$!; \
	  cmake --build $(DEBUG) -j $(JOBS); built=$$?; wait $$deps; installed=$$?; \
	  cat build/install-test-deps.log; \
	  if [ $$installed -ne 0 ]; then echo "make test: the tests' packages did not install (above)" >&2; exit 1; fi; \
	  exit $$built
	ctest --test-dir $(DEBUG) --output-on-failure -j $(JOBS)

# The GPU side (docs/gpu-check.md): Debian's CUDA Toolkit 11.8 and NVML's headers, the test build
# made again with its nvcc (cmake/Nvcc.cmake prefers it), and every GPU-facing test: the NVML
# reader, the ledger at the kill, the CUDA probes on the real programs and on the stand-in driver,
# the agent with the stand-in NVML, and the GPU check's bundle.
GPU_TESTS := Nvml|RingDecode|Record|Gpu\.|Sensors\.(Cuda|RealCuda)|kit_gpu_check|ConfigDocs|MetricsDocs
test-gpu:
	./deploy/install-deps.sh --gpu
	@$(MAKE) --no-print-directory $(DEBUG)/build.ninja
	cmake $(DEBUG) > /dev/null
	@grep -q '^HEADROOM_NVCC_HOST' $(DEBUG)/CMakeCache.txt || { echo "make test-gpu: the build did not take Debian's nvcc" >&2; exit 1; }
	cmake --build $(DEBUG) -j $(JOBS)
	ctest --test-dir $(DEBUG) --output-on-failure -j $(JOBS) -R '$(GPU_TESTS)'

# The GPU check's bundle (tests/gpu/bundle.sh): the release agent, the real CUDA programs, their
# libraries and loader, the check; on a machine with an NVIDIA GPU it runs at once and writes
# GPU_CHECK_OUT/gpu-check.md (commit it under docs/gpu-check/), elsewhere it says where the bundle is.
GPU_BUILD := build/gpu
GPU_CHECK_OUT ?= $(GPU_BUILD)/gpu-check/out
gpu-check:
	./deploy/install-deps.sh --gpu
	cmake -S . -B $(GPU_BUILD) $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=Release > /dev/null
	cmake --build $(GPU_BUILD) -j $(JOBS) --target gpu-check-bundle
	@if [ -e /dev/nvidiactl ] || nvidia-smi -L > /dev/null 2>&1; then \
	  $(GPU_BUILD)/gpu-check/headroom-gpu-check/run.sh $(GPU_CHECK_OUT); \
	else \
	  echo "gpu-check: no NVIDIA GPU here; copy $(GPU_BUILD)/gpu-check/headroom-gpu-check.tar.gz to one and run ./run.sh as root"; \
	fi

# The kernel matrix (root; docs/development.md says how long): every kernel-facing suite in qemu
# guests of Debian 12's 6.1 and Debian 13's 6.12 with cgroup v2 (a bare root, and a systemd /
# Kubernetes tree with limits above the tests), a plain cgroup v1 6.1 guest, Debian 11's 5.10
# (the oldest kernel headroom supports: the systemd tree, and plain v1), and this host.
KERNEL_RUNS ?= 6.1:v2-bare,6.1:v2-systemd,6.12:v2-bare,6.12:v2-systemd,6.1:v1,5.10:v2-systemd,5.10:v1,host
test-kernels: build-debug
	python3 tests/kernels/matrix.py --suite full --runs $(KERNEL_RUNS)

# Real fixtures from the guests and this host (tests/fixtures/capture_oom.py): cgroup trees and
# the kernel's OOM reports; they land in build/kernels/results/capture, to be reviewed and copied.
capture-fixtures: build-debug
	python3 tests/kernels/matrix.py --suite capture --runs 6.1:v2-systemd,6.12:v2-systemd,host

unit-test: build-debug
	ctest --test-dir $(DEBUG) --output-on-failure -j $(JOBS) -L unit

# The fuzz targets (tests/fuzz; clang's Debug build): each runs FUZZ_SECONDS from its seeds and
# what earlier runs found (build/debug/fuzz/<target>/corpus), FUZZ_JOBS at a time; then a table of
# executions, corpus and crashes. A crash's input is left in build/debug/fuzz/<target>/artifacts
# (docs/development.md, "Fuzzing"). FUZZ_TARGETS=a,b runs those alone.
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= $(JOBS)
FUZZ_TARGETS ?=
fuzz: deps-build $(DEBUG)/build.ninja
	cmake --build $(DEBUG) -j $(JOBS) --target fuzz_targets
	python3 tests/fuzz/fuzz.py all --build $(DEBUG) --source tests/fuzz --seconds $(FUZZ_SECONDS) \
	  --jobs $(FUZZ_JOBS) $(if $(FUZZ_TARGETS),--only $(FUZZ_TARGETS))

# Benchmarks: a Release build with the bench programs, then tests/bench/run.py (root), which
# writes build/bench/bench-results.md. The per-process part alone (the agent beside node_exporter,
# process-exporter and cAdvisor; cAdvisor is fetched into build/bench/cadvisor the first time):
# `python3 tests/bench/processes.py build/bench --sizes 1000 --seconds 10` (docs/performance.md).
BENCH := build/bench
$(BENCH)/build.ninja:
	cmake -S . -B $(BENCH) $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=Release -DHEADROOM_INTEGRATION_TESTS=OFF

bench: deps $(BENCH)/build.ninja
	cmake --build $(BENCH) -j $(JOBS) --target headroom fault-bench oom-latency headroom-workload memset-loop bpf-floor
	python3 tests/bench/run.py $(BENCH)

# Churn (root): the debug agent while thousands of short-lived processes a second come and go
# in sandbox cgroups, cgroups are made and removed and OOM kills come every 5 s, for
# CHURN_SECONDS (10 minutes by default; `make test` runs 40 s of it). tests/scenarios/churn.py.
CHURN_SECONDS ?= 600
churn: build-debug
	python3 tests/scenarios/churn.py $(DEBUG) --seconds $(CHURN_SECONDS) --json build/churn.json

# The incident at small scale (root, under a minute): a prover OOM-killed by memory its budget
# never saw, `headroom report` explaining it, `headroom run` converging. Release binaries and the
# test programs from the bench build; the journal, logs and HTML report stay in build/demo.
demo: deps $(BENCH)/build.ninja
	cmake --build $(BENCH) -j $(JOBS) --target headroom headroom-test-prover headroom-workload
	HEADROOM_BIN_DIR=$(BENCH) DEMO_OUT=build/demo tests/demo/demo.sh

# The lint tests (layering, format), then clang-tidy over the agent and the tests' own support
# code (tests/testing), the static analyzer in its deep mode (what this build directory has
# linted clean is not linted again); then the `clang_tidy` test's own run (shallow, the agent),
# which rewrites the committed record of the translation units linted clean
# (tests/lint/tidy-linted.txt): commit it with the change.
tidy: build-debug
	ctest --test-dir $(DEBUG) --output-on-failure -L lint -E clang_tidy
	nice -n 19 python3 tests/lint/tidy.py --build $(DEBUG) --analyzer deep --jobs $(JOBS) \
	  --known $(DEBUG)/tidy-deep.txt --record $(DEBUG)/tidy-deep.txt agent tests/testing
	nice -n 19 python3 tests/lint/tidy.py --build $(DEBUG) --jobs $(JOBS) --known tests/lint/tidy-linted.txt \
	  --known $(DEBUG)/tidy-linted.txt --record $(DEBUG)/tidy-linted.txt --write-known tests/lint/tidy-linted.txt agent

# The layout .clang-format describes, applied to every C++ and C file (the `format` test checks it).
format:
	tests/lint/format.sh . --fix

clean:
	rm -rf build
