# The daemon end to end on the GPU backend (tests/gpu/daemon/test_*.py, on gemmd_harness.py;
# gpu_shm runs integration/daemon/test_shm.py's in-place tests, which take the harness's default
# backend: GEMMD_TEST_BACKEND). Label gpu; each script exits 77 ("SKIP: no CUDA device") where
# gemmd finds no GPU.
if(TARGET gemmd)
  # gpu_resident: resident operands and the shared B, and a layer's shapes timed (TIMING lines)
  # gpu_epilogue: the bias row and the activations against float64, small lane and general path
  # gpu_out_dtype: the output cast (f32 / f64 to f16 / bf16) likewise
  # gpu_i8: the integer gemm, bit for bit, on kernel 17 and its K-major copies
  # gpu_fp8: the fp8 gemm within its accumulation bound, on kernels 19 and 20
  # gpu_multi: a gemm split across every GPU, resident replicas per GPU (test_gpu_multi.py)
  # gpu_ld: leading dimensions, operands packed on the device by 2D copies (test_ld.py)
  foreach(name gpu_e2e gpu_reply_order gpu_memory_on_demand gpu_spread gpu_small_jobs gpu_shm
          gpu_resident gpu_epilogue gpu_out_dtype gpu_i8 gpu_fp8 gpu_multi gpu_ld)
    add_test(NAME daemon_${name}
             COMMAND ${GEMMD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/daemon/test_${name}.py
                     --gemmd $<TARGET_FILE:gemmd>)
    set_tests_properties(daemon_${name} PROPERTIES
      LABELS gpu
      TIMEOUT 600
      SKIP_RETURN_CODE 77
      ENVIRONMENT
        "GEMMD_TEST_BACKEND=gpu;PYTHONPATH=${CMAKE_CURRENT_LIST_DIR}/../integration;PYTHONDONTWRITEBYTECODE=1;PYTHONUNBUFFERED=1")
  endforeach()
endif()

# CUDA IPC operands on a real GPU: cuda_ipc_client (the real CUDA runtime) keeps its operands
# in cudaMalloc'd memory and gemmd reads and writes them there (test_gpu_cuda_ipc.py; it prints
# the client's PASS/FAIL lines, exits 77 without a GPU).
if(TARGET gemmd)
  add_executable(cuda_ipc_client ${CMAKE_CURRENT_LIST_DIR}/daemon/cuda_ipc_client.c)
  target_link_libraries(cuda_ipc_client PRIVATE gemmclient_static gemmproto gemmhalf CUDA::cudart m)
  add_test(NAME daemon_gpu_cuda_ipc
           COMMAND ${GEMMD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/daemon/test_gpu_cuda_ipc.py
                   --gemmd $<TARGET_FILE:gemmd>)
  set_tests_properties(daemon_gpu_cuda_ipc PROPERTIES
    LABELS gpu
    TIMEOUT 600
    SKIP_RETURN_CODE 77
    ENVIRONMENT
      "GEMMD_TEST_BACKEND=gpu;CUDA_IPC_CLIENT=$<TARGET_FILE:cuda_ipc_client>;$<$<TARGET_EXISTS:example_cuda_gemm>:EXAMPLE_CUDA_GEMM=$<TARGET_FILE:example_cuda_gemm>>;PYTHONPATH=${CMAKE_CURRENT_LIST_DIR}/../integration;PYTHONDONTWRITEBYTECODE=1;PYTHONUNBUFFERED=1")
endif()

# The backend's host logic over a fake CUDA runtime (fake_cuda.c: streams are threads, devices
# are host memory): staging, pause/resume, spills, chunked output, memory waits, faults. Needs
# only the CUDA headers, so it runs (label unit) on any machine that builds with CUDA.
add_executable(test_gpu_backend_fake
  ${CMAKE_CURRENT_LIST_DIR}/daemon/test_gpu_backend_fake.c
  ${CMAKE_CURRENT_LIST_DIR}/daemon/fake_cuda.c
  ${CMAKE_CURRENT_LIST_DIR}/daemon/fake_cuda_ipc.c
  ${GEMMD_GPU_BACKEND_SOURCES}
  ${PROJECT_SOURCE_DIR}/daemon/backend/gpu/gd_gpu_config.c
  ${PROJECT_SOURCE_DIR}/daemon/core/gd_region.c
  ${PROJECT_SOURCE_DIR}/daemon/core/gd_problem.c
  ${PROJECT_SOURCE_DIR}/daemon/util/gd_log.c
  ${PROJECT_SOURCE_DIR}/kernels/gk_problem.c
    ${PROJECT_SOURCE_DIR}/kernels/gk_epilogue_host.c)
target_include_directories(test_gpu_backend_fake PRIVATE
  ${GEMMD_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/kernels ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(test_gpu_backend_fake PRIVATE gemmproto gemmhalf Threads::Threads m)
add_test(NAME gpu_backend_fake COMMAND test_gpu_backend_fake)
set_tests_properties(gpu_backend_fake PROPERTIES LABELS unit TIMEOUT 120)

# The Python client's gemm, aio and automatic scratch tests on the GPU backend (exit 77 without a GPU).
if(TARGET gemmd)
  add_test(NAME python_client_gpu
           COMMAND ${GEMMD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/daemon/pytest_or_skip.py
                   -q -p no:cacheprovider -p no:hypothesispytest
                   ${CMAKE_CURRENT_LIST_DIR}/../integration/python/test_gemm.py
                   ${CMAKE_CURRENT_LIST_DIR}/../integration/python/test_aio.py
                   ${CMAKE_CURRENT_LIST_DIR}/../integration/python/test_autoshm.py
                   --gemmd $<TARGET_FILE:gemmd>)
  set_tests_properties(python_client_gpu PROPERTIES
    LABELS gpu
    TIMEOUT 600
    SKIP_RETURN_CODE 77
    ENVIRONMENT "GEMMD_TEST_BACKEND=gpu;PYTHONDONTWRITEBYTECODE=1")
endif()
