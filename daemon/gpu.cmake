# The GPU backend (gd_backend_gpu.h), added to gemmd_core when CUDA is there.
# Included by daemon/CMakeLists.txt under if(GEMMD_HAVE_CUDA). The files are
# host C11 against the CUDA runtime API; the kernels come from gemmkernels_gpu.
target_sources(gemmd_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/gd_gpu_backend.c
  ${CMAKE_CURRENT_LIST_DIR}/gd_gpu_device.c
  ${CMAKE_CURRENT_LIST_DIR}/gd_gpu_info.c
  ${CMAKE_CURRENT_LIST_DIR}/gd_gpu_input.c
  ${CMAKE_CURRENT_LIST_DIR}/gd_gpu_jobs.c
  ${CMAKE_CURRENT_LIST_DIR}/gd_gpu_pool.c
  ${CMAKE_CURRENT_LIST_DIR}/gd_gpu_staging.c
  ${CMAKE_CURRENT_LIST_DIR}/gd_gpu_worker.c)
target_compile_definitions(gemmd_core PUBLIC GEMMD_HAVE_CUDA=1)
target_link_libraries(gemmd_core PUBLIC gemmkernels_gpu CUDA::cudart Threads::Threads)
