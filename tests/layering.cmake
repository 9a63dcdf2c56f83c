# The lower layers (core/, call/, plan/, memory/) include no CUDA header and nothing of a backend
# (cpu/, cuda/, device/, layer/), so that they build and test without CUDA; and in plan/ only
# overrides_env.cpp reads the environment. Run as `cmake -DSOURCE_DIR=<src> -P layering.cmake`.

cmake_minimum_required(VERSION 3.25)

set(failures "")
foreach(layer core call plan memory)
  file(GLOB_RECURSE files "${SOURCE_DIR}/${layer}/*")
  foreach(file IN LISTS files)
    file(STRINGS "${file}" includes REGEX "^#include [<\"](cuda|cublas|nv|cpu/|cuda/|device/|layer/)")
    foreach(line IN LISTS includes)
      list(APPEND failures "${file}: ${line}")
    endforeach()
    get_filename_component(name "${file}" NAME)
    if(layer STREQUAL "plan" AND NOT name STREQUAL "overrides_env.cpp")
      file(STRINGS "${file}" reads REGEX "getenv\\(")
      foreach(line IN LISTS reads)
        list(APPEND failures "${file}: reads the environment: ${line}")
      endforeach()
    endif()
  endforeach()
endforeach()
if(failures)
  list(JOIN failures "\n" text)
  message(FATAL_ERROR "lower layers reach a backend or the environment:\n${text}")
endif()
