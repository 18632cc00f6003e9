# blas/ integration tests, label integration: libgemmd_blas against the real gemmd (the C
# entry points, the reference BLAS test programs, NumPy through LD_PRELOAD and the Debian
# alternative). Python drivers on gemmd_harness.py; exit 0 pass, 1 fail, 77 skip.
if(TARGET gemmd AND TARGET gemmd_blas)
  set(_gb_it ${CMAKE_CURRENT_SOURCE_DIR}/blas)
  set(_gb_env "PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1")
  add_executable(test_cblas ${_gb_it}/test_cblas.c)
  target_link_libraries(test_cblas PRIVATE gemmd_blas Threads::Threads m)
  add_test(NAME blas_reference
           COMMAND ${GEMMD_PYTHON3} ${_gb_it}/test_blas.py --gemmd $<TARGET_FILE:gemmd>
                   --lib $<TARGET_FILE:gemmd_blas> --cblas $<TARGET_FILE:test_cblas>)
  add_test(NAME blas_numpy
           COMMAND ${GEMMD_PYTHON3} ${_gb_it}/test_blas_numpy.py --gemmd $<TARGET_FILE:gemmd>
                   --lib $<TARGET_FILE:gemmd_blas>)
  set_tests_properties(blas_reference blas_numpy PROPERTIES
    LABELS integration
    TIMEOUT 900
    SKIP_RETURN_CODE 77
    ENVIRONMENT "${_gb_env}")
  # the system-wide alternative: with the package tests (root, GEMMD_SYSTEM_TESTS=1)
  add_test(NAME blas_alternative
           COMMAND ${GEMMD_PYTHON3} ${_gb_it}/test_blas_numpy.py --gemmd $<TARGET_FILE:gemmd>
                   --lib $<TARGET_FILE:gemmd_blas> --alternative)
  set_tests_properties(blas_alternative PROPERTIES
    LABELS package
    TIMEOUT 900
    SKIP_RETURN_CODE 77
    RUN_SERIAL TRUE
    ENVIRONMENT "${_gb_env}")
endif()
