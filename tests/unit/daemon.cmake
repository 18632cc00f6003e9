# daemon/ and the CPU path of kernels/: unit tests (Check), label unit.
#   daemon_config   config parsing (defaults equal config/gemmd.yaml, every error form), sizes, CLI
#   daemon_sched    admission arithmetic, memory budget, the job life against a fake backend
#   daemon_stats    latency histogram buckets
#   daemon_timeouts which connection timeout applies, and when
#   daemon_replyq   the reply queue: the stalled-reader clock against a real socketpair
#   daemon_bufcache the CPU backend's operand buffer cache: fit, limits, what is never kept
#   daemon_metrics  the Prometheus text of a snapshot, readiness
#   daemon_journal  journal entries' structured fields, when the journal is used
#   daemon_problem  the one translation of a wire gemm into a kernel problem (gd_problem)
#   kernels_cpu     the CPU GEMM against a float64 reference; f16/bf16 conversions
if(TARGET gemmd_core)
  foreach(t config sched stats timeouts metrics journal replyq bufcache problem)
    add_executable(test_daemon_${t} ${CMAKE_CURRENT_LIST_DIR}/daemon/test_daemon_${t}.c)
    target_link_libraries(test_daemon_${t} PRIVATE gemmd_core PkgConfig::CHECK)
    add_test(NAME daemon_unit_${t} COMMAND test_daemon_${t})
    set_tests_properties(daemon_unit_${t} PROPERTIES LABELS unit TIMEOUT 120)
  endforeach()
  target_compile_definitions(test_daemon_config PRIVATE
    GEMMD_DEFAULT_CONFIG="${PROJECT_SOURCE_DIR}/config/gemmd.yaml")
endif()

add_executable(test_kernels_cpu ${CMAKE_CURRENT_LIST_DIR}/daemon/test_kernels_cpu.c)
target_link_libraries(test_kernels_cpu PRIVATE gemmkernels_cpu PkgConfig::CHECK m)
add_test(NAME kernels_cpu COMMAND test_kernels_cpu)
set_tests_properties(kernels_cpu PROPERTIES LABELS unit TIMEOUT 120)

# The shipped config/gemmd.yaml passes the daemon's own --check-config.
if(TARGET gemmd)
  add_test(NAME daemon_check_default_config
           COMMAND gemmd --check-config --config ${PROJECT_SOURCE_DIR}/config/gemmd.yaml)
  set_tests_properties(daemon_check_default_config PROPERTIES LABELS unit TIMEOUT 30
                       PASS_REGULAR_EXPRESSION "configuration ok")
endif()

# daemon/'s folders are layers that include and call one way, with no circle of files
# (scripts/check-layers.py says which arrow broke the rule).
add_test(NAME daemon_layers
         COMMAND ${GEMMD_PYTHON3} ${PROJECT_SOURCE_DIR}/scripts/check-layers.py
                 ${PROJECT_SOURCE_DIR}/daemon)
set_tests_properties(daemon_layers PROPERTIES LABELS unit TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "layers hold")
