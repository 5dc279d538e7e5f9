// bpf-floor PROGRAM: attaches one program of floor.bpf.c to tp_btf/page_fault_user (empty_fault,
// percpu_fault or storage_fault), says "attached", and holds it until stdin closes. One program
// at a time: the first program a tracepoint runs pays the cache misses of the fault path's own
// data, the ones after it find those lines warm, so each is measured alone, as headroom's and
// bpftrace's programs are. The bench reads its run_time_ns / run_cnt beside theirs.
#include <bpf/libbpf.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "floor.skel.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: bpf-floor empty_fault|percpu_fault|storage_fault\n");
    return 2;
  }
  std::unique_ptr<floor_bpf, decltype(&floor_bpf::destroy)> skel(floor_bpf::open(), &floor_bpf::destroy);
  if (!skel) {
    std::fprintf(stderr, "bpf-floor: cannot open the floor programs\n");
    return 1;
  }
  bpf_program* chosen = nullptr;
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, skel->obj) {
    bool it = std::strcmp(bpf_program__name(prog), argv[1]) == 0;
    bpf_program__set_autoload(prog, it);
    if (it) chosen = prog;
  }
  if (chosen == nullptr) {
    std::fprintf(stderr, "bpf-floor: no program named %s\n", argv[1]);
    return 2;
  }
  if (floor_bpf::load(skel.get()) != 0) {
    std::fprintf(stderr, "bpf-floor: cannot load %s\n", argv[1]);
    return 1;
  }
  std::unique_ptr<bpf_link, decltype(&bpf_link__destroy)> link(bpf_program__attach(chosen), &bpf_link__destroy);
  if (!link) {
    std::fprintf(stderr, "bpf-floor: cannot attach %s to tp_btf/page_fault_user\n", argv[1]);
    return 1;
  }
  std::printf("attached\n");
  std::fflush(stdout);
  int c = 0;
  while ((c = std::getchar()) != EOF) {
  }
  return 0;
}
