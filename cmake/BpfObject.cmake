# bpf_object(<name> <source.bpf.c>)
#   clang -target bpf (CO-RE, BTF) -> llvm-strip -g -> bpftool gen skeleton -> <name>.skel.h,
#   exposed as the INTERFACE target <name>_skel (include it and link libbpf).
find_program(BPF_CLANG NAMES clang-14 clang REQUIRED)
find_program(BPF_STRIP NAMES llvm-strip-14 llvm-strip REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(HEADROOM_BPF_ARCH x86)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(HEADROOM_BPF_ARCH arm64)
else()
  message(FATAL_ERROR "no vmlinux.h for ${CMAKE_SYSTEM_PROCESSOR}: run bpf/vmlinux/gen-vmlinux.sh on one")
endif()
set(HEADROOM_VMLINUX_DIR ${PROJECT_SOURCE_DIR}/bpf/vmlinux/${HEADROOM_BPF_ARCH})
if(NOT EXISTS ${HEADROOM_VMLINUX_DIR}/vmlinux.h)
  message(FATAL_ERROR "${HEADROOM_VMLINUX_DIR}/vmlinux.h missing: run bpf/vmlinux/gen-vmlinux.sh")
endif()

# bpf_object(<name> <src.bpf.c>...): each source compiled on its own; several are statically
# linked (bpftool gen object) into one object whose maps and globals they share.
function(bpf_object name)
  set(out_dir ${CMAKE_BINARY_DIR}/bpf)
  set(obj ${out_dir}/${name}.bpf.o)
  set(skel ${out_dir}/${name}.skel.h)
  file(GLOB bpf_headers ${PROJECT_SOURCE_DIR}/bpf/*.h)
  set(parts)
  foreach(src ${ARGN})
    get_filename_component(src_abs ${src} ABSOLUTE)
    get_filename_component(src_dir ${src_abs} DIRECTORY)
    get_filename_component(stem ${src} NAME_WE)
    file(GLOB src_headers ${src_dir}/*.h)
    set(part ${out_dir}/${name}.${stem}.o)
    add_custom_command(
      OUTPUT ${part}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${out_dir}
      COMMAND ${BPF_CLANG} -g -O2 -target bpf -D__TARGET_ARCH_${HEADROOM_BPF_ARCH}
              -Wall -Werror -Wno-unused-function
              # The BTF's line info names the sources relative to the checkout and the build: the
              # same object (and skeleton, which embeds it) wherever they are.
              -fdebug-prefix-map=${CMAKE_BINARY_DIR}=build
              -fdebug-prefix-map=${PROJECT_SOURCE_DIR}=.
              -I${HEADROOM_VMLINUX_DIR} -I${PROJECT_SOURCE_DIR}/bpf -I${src_dir}
              -c ${src_abs} -o ${part}
      DEPENDS ${src_abs} ${bpf_headers} ${src_headers}
      COMMENT "BPF ${stem}.bpf.c"
      VERBATIM)
    list(APPEND parts ${part})
  endforeach()
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${BPFTOOL} gen object ${obj}.linked ${parts}
    COMMAND ${BPF_STRIP} -g ${obj}.linked -o ${obj}
    DEPENDS ${parts}
    COMMENT "BPF ${name}.bpf.o"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${name}_bpf > ${skel}
    DEPENDS ${obj}
    COMMENT "BPF skeleton ${name}.skel.h"
    VERBATIM)
  add_custom_target(${name}_skel_gen DEPENDS ${skel})
  add_library(${name}_skel INTERFACE)
  add_dependencies(${name}_skel ${name}_skel_gen)
  # SYSTEM: the generated skeleton is C with C casts; our warnings are for our code.
  target_include_directories(${name}_skel SYSTEM INTERFACE ${out_dir} ${PROJECT_SOURCE_DIR}/bpf)
endfunction()
