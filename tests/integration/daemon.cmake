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
    timeouts            # idle and request-arrival timeouts
    shutdown            # SIGTERM with requests in flight
    reload              # SIGHUP re-reads the config
    connection_cap      # limits.max_connections
    listeners           # unix socket mode, stale/live socket files, long paths, TCP
    config              # --check-config and command-line overrides
  )
  foreach(name ${GEMMD_DAEMON_TESTS})
    set(script ${CMAKE_CURRENT_SOURCE_DIR}/daemon/test_${name}.py)
    if(EXISTS ${script})
      add_test(NAME daemon_${name}
               COMMAND ${GEMMD_PYTHON3} ${script} --gemmd $<TARGET_FILE:gemmd>)
      set_tests_properties(daemon_${name} PROPERTIES
        LABELS integration
        TIMEOUT 300
        SKIP_RETURN_CODE 77
        ENVIRONMENT "PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1")
    endif()
  endforeach()
endif()
