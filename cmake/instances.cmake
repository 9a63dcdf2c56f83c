# The CUDA kernels' instance files, generated from src/plan/cuda_tables.hpp, the one list of
# compiled variants per route: cmake/instances.cpp includes the tables, so the compiler
# evaluates them as the planner and the kernels do (no second copy, no parsing). Compiled and
# run here at configure time; editing the tables or the generator re-runs it at the next build.
# Sets HEED_CUDA_INSTANCES (one translation unit per instance), HEED_CUDA_BELOW_SM90_INSTANCES
# (those for devices below 9.0 only) and HEED_GENERATED_DIR (to add to
# the kernels' include path: it holds cuda/hopper_wgmma.cuh).
set(HEED_GENERATED_DIR ${PROJECT_BINARY_DIR}/generated)
file(MAKE_DIRECTORY ${HEED_GENERATED_DIR}/cuda/instances)
try_run(heed_instances_run heed_instances_compiled ${PROJECT_BINARY_DIR}/cmake/instances
  ${PROJECT_SOURCE_DIR}/cmake/instances.cpp
  CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${PROJECT_SOURCE_DIR}/src"
  CXX_STANDARD 20
  CXX_STANDARD_REQUIRED ON
  COMPILE_OUTPUT_VARIABLE heed_instances_compile_output
  RUN_OUTPUT_VARIABLE heed_instances_output
  ARGS ${HEED_GENERATED_DIR})
if(NOT heed_instances_compiled)
  message(FATAL_ERROR "heed: cmake/instances.cpp (the CUDA instance generator) does not compile:\n"
                      "${heed_instances_compile_output}")
endif()
if(NOT heed_instances_run EQUAL 0)
  message(FATAL_ERROR "heed: the CUDA instance generator failed (${heed_instances_run}):\n${heed_instances_output}")
endif()
string(STRIP "${heed_instances_output}" heed_instances_output)
string(REPLACE "\n" ";" heed_instance_lines "${heed_instances_output}")
# HEED_CUDA_BELOW_SM90_INSTANCES: those a 9.0 device never runs (marked by the generator).
set(HEED_CUDA_INSTANCES)
set(HEED_CUDA_BELOW_SM90_INSTANCES)
foreach(line IN LISTS heed_instance_lines)
  if(line MATCHES "^below-sm90:(.*)$")
    list(APPEND HEED_CUDA_INSTANCES ${CMAKE_MATCH_1})
    list(APPEND HEED_CUDA_BELOW_SM90_INSTANCES ${CMAKE_MATCH_1})
  else()
    list(APPEND HEED_CUDA_INSTANCES ${line})
  endif()
endforeach()
list(LENGTH HEED_CUDA_INSTANCES heed_instance_count)
message(STATUS "heed: ${heed_instance_count} CUDA instance files from src/plan/cuda_tables.hpp")
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/src/plan/cuda_tables.hpp ${PROJECT_SOURCE_DIR}/cmake/instances.cpp)
