# nvcc for headroom's real CUDA programs (tests/gpu): Debian's toolkit first (nvidia-cuda-toolkit,
# which `deploy/install-deps.sh --gpu` installs), else NVIDIA's under /usr/local/cuda, else none
# (the programs are then not built, and the tests that run them say so). HEADROOM_NVCC chooses.
# Each program links the CUDA runtime, libstdc++ and libgcc statically: it needs nothing on the
# machine it runs on but the driver's libcuda.so.1.
set(HEADROOM_NVCC "" CACHE FILEPATH "nvcc for the real CUDA programs (empty: found)")
set(HEADROOM_CUDA_STUB "")
if(NOT HEADROOM_NVCC)
  if(EXISTS /usr/lib/nvidia-cuda-toolkit/bin/nvcc)
    set(HEADROOM_NVCC /usr/lib/nvidia-cuda-toolkit/bin/nvcc)
  elseif(EXISTS /usr/local/cuda/bin/nvcc)
    set(HEADROOM_NVCC /usr/local/cuda/bin/nvcc)
  endif()
endif()
set(headroom_nvcc_flags -cudart static -O2)
set(headroom_nvcc_link -static-libstdc++,-static-libgcc)
if(HEADROOM_NVCC MATCHES "^/usr/lib/nvidia-cuda-toolkit/")
  # Debian's CUDA 11.8 takes g++ up to 11 as its host compiler and names clang 14 (Debian 12's
  # g++ is 12); its ptxas is /usr/bin's, ahead of any other toolkit's on the PATH.
  find_program(HEADROOM_NVCC_HOST NAMES clang++-14 clang++)
  if(HEADROOM_NVCC_HOST)
    list(APPEND headroom_nvcc_flags -ccbin ${HEADROOM_NVCC_HOST})
    string(APPEND headroom_nvcc_link ",-Wno-unused-command-line-argument")
  else()
    message(STATUS "CUDA programs: not built (Debian's nvcc needs clang++ 14 as its host compiler)")
    set(HEADROOM_NVCC "")
  endif()
  set(headroom_nvcc_path /usr/lib/nvidia-cuda-toolkit/bin:/usr/bin:/bin)
  if(HEADROOM_NVCC AND EXISTS /usr/lib/x86_64-linux-gnu/stubs/libcuda.so)
    set(HEADROOM_CUDA_STUB /usr/lib/x86_64-linux-gnu/stubs/libcuda.so)
  endif()
elseif(HEADROOM_NVCC)
  get_filename_component(headroom_nvcc_bin ${HEADROOM_NVCC} DIRECTORY)
  set(headroom_nvcc_path ${headroom_nvcc_bin}:/usr/bin:/bin)
  if(EXISTS ${headroom_nvcc_bin}/../lib64/stubs/libcuda.so)
    get_filename_component(HEADROOM_CUDA_STUB ${headroom_nvcc_bin}/../lib64/stubs/libcuda.so REALPATH)
  endif()
endif()
if(HEADROOM_NVCC)
  execute_process(COMMAND ${HEADROOM_NVCC} --version OUTPUT_VARIABLE headroom_nvcc_version ERROR_QUIET)
  string(REGEX MATCH "release [0-9.]+" headroom_nvcc_release "${headroom_nvcc_version}")
  message(STATUS "CUDA programs: ${HEADROOM_NVCC} (${headroom_nvcc_release})")
endif()

# headroom_cuda_program(NAME SOURCE): NAME in the current binary dir's gpu/, from SOURCE (relative to
# the current source dir), compiled and linked in two steps.
function(headroom_cuda_program name source)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/gpu/${name})
  set(src ${CMAKE_CURRENT_SOURCE_DIR}/${source})
  add_custom_command(OUTPUT ${out}.o
                     COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/gpu
                     COMMAND ${CMAKE_COMMAND} -E env PATH=${headroom_nvcc_path}
                             ${HEADROOM_NVCC} ${headroom_nvcc_flags} -c -o ${out}.o ${src}
                     DEPENDS ${src} COMMENT "nvcc ${source}" VERBATIM)
  add_custom_command(OUTPUT ${out}
                     COMMAND ${CMAKE_COMMAND} -E env PATH=${headroom_nvcc_path}
                             ${HEADROOM_NVCC} ${headroom_nvcc_flags} -o ${out} ${out}.o
                             -Xcompiler ${headroom_nvcc_link}
                     DEPENDS ${out}.o COMMENT "nvcc -o ${name}" VERBATIM)
  add_custom_target(${name} ALL DEPENDS ${out})
endfunction()
