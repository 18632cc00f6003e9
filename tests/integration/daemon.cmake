# Integration tests of gemmd itself: the real daemon on temporary sockets, driven through real
# sockets by Python scripts (tests/integration/daemon/test_*.py) built on gemmd_harness.py.
# Each script exits 0 (pass), 1 (fail) or 77 (a feature it tests is absent: skip).
if(TARGET gemmd)
  set(GEMMD_DAEMON_TESTS
    gemm_forms          # every GEMM form against a float64 reference
    methods             # ping, info, stats
    pipelining          # many requests in flight on one connection, replies by msgid
    concurrency         # many clients at once
    errors              # every error code the daemon produces
    disconnects         # clients vanishing mid-payload and with a job running
    backpressure        # max_requests_in_flight, max_buffered_bytes
    fair_shares         # non-readers block only themselves; full daemon means wait, not refuse
    timeouts            # idle and request-arrival timeouts
    shutdown            # SIGTERM with requests in flight
    reload              # SIGHUP re-reads the config
    connection_cap      # limits.max_connections
    listeners           # unix socket mode, stale/live socket files, long paths, TCP
    config              # --check-config and command-line overrides
    metrics             # /metrics (promtool), /healthz, /readyz on metrics.listen
    prometheus          # a real Prometheus scrapes gemmd; counters read back by its query API
    journal             # log_target journal: structured fields on a fake journal socket
    check_config        # -h, option errors, --check-config's checks beyond the parser
    shm                 # shared-memory regions: operands and results, every misuse
    auth                # auth.token_file, the auth method, exposed TCP refused without a token
    resident            # put / free, {"handle": N} operands, broadcast_b, quotas
    epilogue            # the bias row and ReLU / GELU against float64, every misuse
    out_dtype           # f32 / f64 results rounded once to f16 / bf16, c in the out dtype
    i8                  # the integer gemm, bit for bit: i8 operands, i32 c and result
    fp8                 # the fp8 gemm: e4m3 / e5m2 operands, scales, f32 c and result
    specials            # infinities and NaNs in A, B and c come out as IEEE arithmetic makes them
    complex             # c64 / c128 with complex alpha, beta and conj against complex128
    ld                  # lda / ldb / ldc: submatrices used where they lie in a region
    cuda_ipc_cpu        # cuda_register refused (UNIMPLEMENTED) by the CPU backend
    hostile_peers       # no peer holds the room others need; auth, ops and descriptors hold
  )
  foreach(name ${GEMMD_DAEMON_TESTS})
    set(script ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_${name}.py)
    add_test(NAME daemon_${name}
             COMMAND ${GEMMD_PYTHON3} ${script} --gemmd $<TARGET_FILE:gemmd>)
    set_tests_properties(daemon_${name} PROPERTIES
      LABELS integration
      TIMEOUT 300
      SKIP_RETURN_CODE 77
      ENVIRONMENT "PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1")
  endforeach()

  # The same suites on three loop threads (`loops: 3`): connections spread over the loops,
  # each loop's admission line, the caps and shares across loops, drain, reload and metrics.
  # Label loops: CI also runs them under ThreadSanitizer (GEMMD_TSAN).
  foreach(name gemm_forms pipelining concurrency disconnects backpressure fair_shares timeouts
               shutdown reload connection_cap shm resident metrics methods)
    set(script ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_${name}.py)
    add_test(NAME daemon_loops3_${name}
             COMMAND ${GEMMD_PYTHON3} ${script} --gemmd $<TARGET_FILE:gemmd>)
    set_tests_properties(daemon_loops3_${name} PROPERTIES
      LABELS "integration;loops"
      TIMEOUT 600
      SKIP_RETURN_CODE 77
      ENVIRONMENT
        "GEMMD_TEST_LOOPS=3;PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1")
  endforeach()
endif()

# gemmd_fake: the real daemon (main.c and every module) with the GPU backend over the fake CUDA
# runtime of tests/gpu/daemon/fake_cuda.c, so the GPU backend's paths through the session
# (results in many staging-sized chunks, pause/resume) run end to end through real sockets on
# a machine without a GPU, and under the sanitizers. It needs only the CUDA runtime headers
# (no nvcc): built when they are found, also in -DGEMMD_WITH_CUDA=OFF builds.
if(TARGET gemmd_core)
  find_path(GEMMD_CUDA_RUNTIME_INCLUDE cuda_runtime_api.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
endif()
if(GEMMD_CUDA_RUNTIME_INCLUDE AND TARGET gemmd_core)
  add_executable(gemmd_fake
    ${PROJECT_SOURCE_DIR}/daemon/main.c
    ${GEMMD_CORE_SOURCES}
    ${GEMMD_GPU_BACKEND_SOURCES}
    ${PROJECT_SOURCE_DIR}/tests/gpu/daemon/fake_cuda.c
    ${PROJECT_SOURCE_DIR}/tests/gpu/daemon/fake_cuda_ipc.c)
  target_include_directories(gemmd_fake PRIVATE
    ${GEMMD_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/kernels ${GEMMD_CUDA_RUNTIME_INCLUDE})
  target_compile_definitions(gemmd_fake PRIVATE
    GEMMD_HAVE_CUDA=1 GEMMD_VERSION="${PROJECT_VERSION}")
  target_link_libraries(gemmd_fake PRIVATE
    gemmproto gemmhalf gemmkernels_cpu
    PkgConfig::UV PkgConfig::YAML PkgConfig::SYSTEMD PkgConfig::MSGPACK PkgConfig::MHD
    Threads::Threads m)

  # reply_order: replies of other requests never land inside a result that leaves in several
  # chunks. memory_wait: time spent waiting for device memory is not a request timeout.
  # staging_hold: a client that does not read its result holds no staging other jobs need.
  # No SKIP_RETURN_CODE: the fake device is always there, so a skip is a failure.
  # memory_on_demand: no device memory at start, info and /metrics show it, given back idle.
  # readyz: /readyz turns 503 when the only device leaves service (a fake fault).
  # On two fake devices: spread (one pipelining connection's jobs go to both, replies whole and
  # right); small_jobs (the small-job lane from several connections beside large jobs, the lane
  # off, SIGTERM with small jobs in flight).
  # gemmd_fake_test(NAME SCRIPT DEVICES [ENV...]): SCRIPT against gemmd_fake on DEVICES fake
  # devices, as test NAME.
  function(gemmd_fake_test name script devices)
    add_test(NAME ${name} COMMAND ${GEMMD_PYTHON3} ${script} --gemmd $<TARGET_FILE:gemmd_fake>)
    set_tests_properties(${name} PROPERTIES
      LABELS integration
      TIMEOUT 300
      ENVIRONMENT
        "${ARGN};FAKE_CUDA_DEVICES=${devices};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1;PYTHONUNBUFFERED=1")
  endfunction()
  foreach(name reply_order memory_wait staging_hold memory_on_demand readyz spread small_jobs)
    set(fake_devices 1)
    if(name STREQUAL "spread" OR name STREQUAL "small_jobs")
      set(fake_devices 2)
    endif()
    gemmd_fake_test(daemon_fake_${name}
                    ${PROJECT_SOURCE_DIR}/tests/gpu/daemon/test_gpu_${name}.py ${fake_devices})
  endforeach()

  # The small-job lane, two devices and regions with connections on three loop threads: every
  # loop's jobs batched together on one device's lane, each result back on its own loop.
  foreach(name small_jobs spread)
    gemmd_fake_test(daemon_fake_loops3_${name}
                    ${PROJECT_SOURCE_DIR}/tests/gpu/daemon/test_gpu_${name}.py 2 GEMMD_TEST_LOOPS=3)
    set_tests_properties(daemon_fake_loops3_${name} PROPERTIES LABELS "integration;loops"
                         TIMEOUT 600)
  endforeach()
  gemmd_fake_test(daemon_fake_loops3_shm ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_shm.py 2
                  GEMMD_TEST_BACKEND=gpu GEMMD_TEST_LOOPS=3)
  set_tests_properties(daemon_fake_loops3_shm PROPERTIES LABELS "integration;loops" TIMEOUT 600)

  # device faults and failed launches at the moments that matter (a blocked gemm, a small
  # batch, results streaming, a region in use): answered or closed, never a crash or a hang.
  gemmd_fake_test(daemon_fake_faults ${PROJECT_SOURCE_DIR}/tests/gpu/daemon/test_gpu_faults.py 1
                  GEMMD_TEST_BACKEND=gpu)

  # shared memory on the GPU backend, two devices: operands copied from regions into staging
  # (pausing while it is full), or straight to the device once registered, in row blocks, or
  # split across both devices; results written into regions.
  gemmd_fake_test(daemon_fake_shm ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_shm.py 2
                  GEMMD_TEST_BACKEND=gpu)

  # resident operands and broadcast_b on the GPU backend, two devices: copies from a resident
  # operand pause and resume like a region's; a shared B runs as plain pieces.
  gemmd_fake_test(daemon_fake_resident ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_resident.py 2
                  GEMMD_TEST_BACKEND=gpu)

  # every GPU of the box, over two and four fake devices: a gemm in regions split N ways by
  # the devices' speed, replicas of a resident operand per device and their eviction, and a
  # device faulting during its part of a split (one error, the others serve on).
  foreach(devices 2 4)
    gemmd_fake_test(daemon_fake_multi${devices}
                    ${PROJECT_SOURCE_DIR}/tests/gpu/daemon/test_gpu_multi.py ${devices}
                    GEMMD_TEST_BACKEND=gpu)
  endforeach()

  # the epilogue on the GPU backend: the small lane batches by shape and epilogue, bias rows at
  # each entry's C; the general path's bias copied to C's start.
  gemmd_fake_test(daemon_fake_epilogue ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_epilogue.py 1
                  GEMMD_TEST_BACKEND=gpu)

  # the output cast on the GPU backend: f16 / bf16 results of f32 / f64 gemms, the small lane
  # batching by shape and out dtype, results through staging, regions and resident c in the
  # out dtype; on two devices, a gemm split between them whose parent runs in row blocks.
  gemmd_fake_test(daemon_fake_out_dtype ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_out_dtype.py 2
                  GEMMD_TEST_BACKEND=gpu)

  # the integer gemm on the GPU backend: the small lane batching i8 apart from f32, staging,
  # regions with row blocks, and on two devices a split.
  gemmd_fake_test(daemon_fake_i8 ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_i8.py 2
                  GEMMD_TEST_BACKEND=gpu)
  # the fp8 gemm likewise, and one shape with different scales in flight (never one batch)
  gemmd_fake_test(daemon_fake_fp8 ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_fp8.py 2
                  GEMMD_TEST_BACKEND=gpu)

  # IEEE special values on the GPU backend: alone, and beside plain jobs of their shape in flight
  gemmd_fake_test(daemon_fake_specials ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_specials.py 1
                  GEMMD_TEST_BACKEND=gpu)

  # hostile and careless peers on the GPU backend: stalled holders, the line, the shares
  gemmd_fake_test(daemon_fake_hostile_peers
                  ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_hostile_peers.py 1
                  GEMMD_TEST_BACKEND=gpu)
  # the complex gemm on the GPU backend: the small lane batching by alpha_im / conj, staging,
  # regions and resident operands; on two devices, splits of a complex gemm.
  gemmd_fake_test(daemon_fake_complex ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_complex.py 2
                  GEMMD_TEST_BACKEND=gpu)
  # leading dimensions on the GPU backend: 2D copies in and out of the packed device copies
  gemmd_fake_test(daemon_fake_ld ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_ld.py 1
                  GEMMD_TEST_BACKEND=gpu)

  # CUDA IPC operands (cuda_register): a client whose fake device memory (a memfd the daemon
  # opens through /proc) holds A, B, C and the result; every dtype, the attacks, and the
  # regions released with its connection. The client is on fake device 1 of 2: the daemon
  # finds its device by PCI bus id.
  add_executable(cuda_ipc_client_fake
    ${PROJECT_SOURCE_DIR}/tests/gpu/daemon/cuda_ipc_client.c
    ${PROJECT_SOURCE_DIR}/tests/gpu/daemon/fake_cuda.c
    ${PROJECT_SOURCE_DIR}/tests/gpu/daemon/fake_cuda_ipc.c
    ${PROJECT_SOURCE_DIR}/kernels/gk_problem.c
    ${PROJECT_SOURCE_DIR}/kernels/gk_epilogue_host.c)
  target_include_directories(cuda_ipc_client_fake PRIVATE
    ${PROJECT_SOURCE_DIR}/kernels ${GEMMD_CUDA_RUNTIME_INCLUDE})
  target_link_libraries(cuda_ipc_client_fake PRIVATE
    gemmclient_static gemmproto gemmhalf Threads::Threads m)
  add_test(NAME daemon_fake_cuda_ipc
           COMMAND ${GEMMD_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/gpu/daemon/test_gpu_cuda_ipc.py
                   --gemmd $<TARGET_FILE:gemmd_fake>)
  set_tests_properties(daemon_fake_cuda_ipc PROPERTIES
    LABELS integration
    TIMEOUT 300
    ENVIRONMENT
      "FAKE_CUDA_DEVICES=2;CUDA_IPC_DEVICE=1;CUDA_IPC_CLIENT=$<TARGET_FILE:cuda_ipc_client_fake>;PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1;PYTHONUNBUFFERED=1")

  # backend gpu with no device says why (CUDA's reason), not only that there is none.
  add_test(NAME daemon_fake_no_device_reason
           COMMAND gemmd_fake --backend gpu --config ${PROJECT_SOURCE_DIR}/config/gemmd.yaml)
  set_tests_properties(daemon_fake_no_device_reason PROPERTIES
    LABELS integration
    TIMEOUT 30
    ENVIRONMENT "FAKE_CUDA_DEVICES=0"
    PASS_REGULAR_EXPRESSION "backend gpu: no CUDA device found: [a-zA-Z]")
endif()
