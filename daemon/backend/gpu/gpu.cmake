# The GPU backend (gd_backend_gpu.h), added to gemmd_core when CUDA is there.
# Included by daemon/CMakeLists.txt under if(GEMMD_HAVE_CUDA), which lists the files
# (GEMMD_GPU_BACKEND_SOURCES). The files are host C11 against the CUDA runtime API;
# the kernels come from gemmkernels_gpu.
target_sources(gemmd_core PRIVATE ${GEMMD_GPU_BACKEND_SOURCES})
target_compile_definitions(gemmd_core PUBLIC GEMMD_HAVE_CUDA=1)
target_link_libraries(gemmd_core PUBLIC gemmkernels_gpu CUDA::cudart Threads::Threads)
