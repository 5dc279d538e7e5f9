// bpf-floor: attaches an empty tp_btf/page_fault_user program and two one-step ones (floor.bpf.c),
// says "attached", and holds them
// until stdin closes. The bench reads its run_time_ns / run_cnt beside headroom's.
#include <bpf/libbpf.h>

#include <cstdio>
#include <memory>

#include "floor.skel.h"

int main() {
  std::unique_ptr<floor_bpf, decltype(&floor_bpf::destroy)> skel(floor_bpf::open_and_load(), &floor_bpf::destroy);
  if (!skel) {
    std::fprintf(stderr, "bpf-floor: cannot load the floor programs\n");
    return 1;
  }
  if (floor_bpf::attach(skel.get()) != 0) {
    std::fprintf(stderr, "bpf-floor: cannot attach tp_btf/page_fault_user\n");
    return 1;
  }
  std::printf("attached\n");
  std::fflush(stdout);
  int c = 0;
  while ((c = std::getchar()) != EOF) {
  }
  return 0;
}
