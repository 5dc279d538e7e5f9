# The layers, bottom to top, and the headers each may include. Data flows one way: sources and
# sensors -> model -> controller / probe / journal -> report / exporter -> config -> incidents ->
# daemon, supervisor -> cli; under them all util, and net (HTTP: the server and the one client),
# which every layer above may use. Each layer's library is compiled against a view of
# include/headroom/ that holds its own headers and those of the layers it may use, and nothing
# else: an upward include is a "file not found" at compile time, not a habit to be kept by review.
#
#   headroom_layer(NAME SEES layer... SOURCES file... [LINK target...] [PRIVATE target...])
#     makes the library headroom_<NAME> from SOURCES, with the view of NAME (itself and SEES).
set(HEADROOM_LAYERS util net sources sensors model controller probe journal report exporter config incidents daemon supervisor cli)
set(HEADROOM_LAYER_VIEWS ${CMAKE_BINARY_DIR}/layers)

# build/layers/<layer>/headroom/<seen> -> include/headroom/<seen>, remade at each configure.
function(headroom_layer_view layer)
  set(view ${HEADROOM_LAYER_VIEWS}/${layer}/headroom)
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view})
  set(seen_list ${ARGN})
  if(layer IN_LIST HEADROOM_LAYERS)
    list(PREPEND seen_list ${layer})
  endif()
  foreach(seen ${seen_list})
    if(NOT seen IN_LIST HEADROOM_LAYERS)
      message(FATAL_ERROR "layer ${layer}: no layer called ${seen}")
    endif()
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/headroom/${seen} ${view}/${seen} SYMBOLIC)
  endforeach()
  # What the layering test checks against (tests/lint/layering.py).
  string(REPLACE ";" " " seen_text "${seen_list}")
  file(APPEND ${HEADROOM_LAYER_VIEWS}/layers.txt "${layer}: ${seen_text}\n")
endfunction()

file(REMOVE ${HEADROOM_LAYER_VIEWS}/layers.txt)

# A view alone, for a library that shares a layer with another (the sensors' pure data beside
# the libbpf owner) or for a layer's tests.
function(headroom_layer_library target layer)
  cmake_parse_arguments(L "" "" "SOURCES;LINK;PRIVATE" ${ARGN})
  add_library(${target} STATIC ${L_SOURCES})
  target_include_directories(${target} PUBLIC ${HEADROOM_LAYER_VIEWS}/${layer} ${CMAKE_BINARY_DIR}/generated)
  target_link_libraries(${target} PUBLIC ${L_LINK} PRIVATE headroom_flags ${L_PRIVATE})
  # Coverage for the fuzz targets (tests/fuzz): SanitizerCoverage's counters and comparison hooks,
  # without libFuzzer's main. In the other programs the sanitizer runtime's empty hooks answer.
  if(HEADROOM_FUZZ)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
endfunction()
