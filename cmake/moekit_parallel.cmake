# moekit's tensor / expert parallelism on the CUDA side: find NCCL (optional) and wire it into
# moekit::cuda, and make sure the parallel entry table (moekit_cuda_parallel_v1, src/cuda/parallel.cu)
# is linked into every client of moekit::cuda. Include once, after moekit_cuda is defined:
#   include(${PROJECT_SOURCE_DIR}/cmake/moekit_parallel.cmake)
# NCCL is looked for in MOEKIT_NCCL_ROOT, then the CUDA toolkit (CUDA 13 ships nccl.h and libnccl
# under /usr/local/cuda), then the system. Without it, the Communicator and the tp_/ep_ ops throw
# Error(kNotSupported); the EP bookkeeping kernels work either way.
include_guard(GLOBAL)

if(NOT TARGET moekit_cuda)
  return()
endif()

set(MOEKIT_NCCL_ROOT "" CACHE PATH "Where NCCL is installed (include/nccl.h, lib/libnccl.so)")
set(_moekit_nccl_hints ${MOEKIT_NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _moekit_nccl_hints ${CUDAToolkit_LIBRARY_ROOT})
endif()
find_path(MOEKIT_NCCL_INCLUDE_DIR nccl.h
          HINTS ${_moekit_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(MOEKIT_NCCL_LIBRARY NAMES nccl libnccl.so.2
             HINTS ${_moekit_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64)

if(MOEKIT_NCCL_INCLUDE_DIR AND MOEKIT_NCCL_LIBRARY)
  set(MOEKIT_NCCL_FOUND ON CACHE INTERNAL "moekit::cuda links NCCL")
  target_include_directories(moekit_cuda PRIVATE ${MOEKIT_NCCL_INCLUDE_DIR})
  target_compile_definitions(moekit_cuda PRIVATE MOEKIT_WITH_NCCL=1)
  # The absolute path exports as is, so find_package(moekit) clients link the same library.
  target_link_libraries(moekit_cuda PUBLIC ${MOEKIT_NCCL_LIBRARY})
  message(STATUS "moekit: NCCL ${MOEKIT_NCCL_LIBRARY}")
else()
  set(MOEKIT_NCCL_FOUND OFF CACHE INTERNAL "moekit::cuda links NCCL")
  message(STATUS "moekit: NCCL not found (tp_fused_moe / ep_fused_moe will throw kNotSupported)")
endif()

# moekit::core reaches the parallel entry table through a weak reference; this pulls it out of
# the archive, as --undefined=moekit_cuda_backend_v1 does for the backend.
target_link_options(moekit_cuda INTERFACE "LINKER:--undefined=moekit_cuda_parallel_v1")

# The multi-GPU benchmark rank program (tools/bench_multi), next to moekit-bench.
if(MOEKIT_BUILD_TOOLS AND MOEKIT_NCCL_FOUND AND EXISTS ${PROJECT_SOURCE_DIR}/tools/bench_multi/CMakeLists.txt)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tools/bench_multi ${PROJECT_BINARY_DIR}/tools/bench_multi)
endif()
