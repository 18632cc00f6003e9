# The Python client (python/gemmd) against the real daemon, with Debian's python3-pytest:
# tests/integration/python/test_*.py. The same gemm and aio tests run on the GPU backend from
# tests/gpu/daemon.cmake.
if(TARGET gemmd)
  set(GEMMD_PYTEST ${GEMMD_PYTHON3} -m pytest -q -p no:cacheprovider -p no:hypothesispytest)
  set(GEMMD_PYTEST_ENV
    "PYTHONPATH=${PROJECT_SOURCE_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}"
    "PYTHONDONTWRITEBYTECODE=1")
  foreach(name gemm errors aio shm autoshm scale resident out_dtype i8 fp8 limits complex)
    add_test(NAME python_client_${name}
             COMMAND ${GEMMD_PYTEST} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_${name}.py
                     --gemmd $<TARGET_FILE:gemmd>)
  endforeach()
  # cmake --install and pip install, as README.md says them
  add_test(NAME python_client_install
           COMMAND ${GEMMD_PYTEST} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_install.py
                   --gemmd $<TARGET_FILE:gemmd> --build-dir ${PROJECT_BINARY_DIR})
  set_tests_properties(python_client_gemm python_client_errors python_client_aio python_client_shm
                       python_client_autoshm
                       python_client_scale python_client_resident python_client_out_dtype
                       python_client_i8 python_client_fp8 python_client_limits python_client_complex
                       python_client_install PROPERTIES
    LABELS integration
    TIMEOUT 600
    ENVIRONMENT "${GEMMD_PYTEST_ENV}")
endif()

# deploy/haproxy/gemmd.cfg with a real HAProxy: three daemons, 16 clients, one killed and one
# restarted mid-run (skips where haproxy is not installed; scripts/install-deps.sh installs it)
if(TARGET gemmd)
  add_test(NAME python_haproxy
           COMMAND ${GEMMD_PYTEST} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_haproxy.py
                   --gemmd $<TARGET_FILE:gemmd>)
  set_tests_properties(python_haproxy PROPERTIES
    LABELS integration
    TIMEOUT 600
    ENVIRONMENT "${GEMMD_PYTEST_ENV}")
endif()

# examples/ (C and Python) and PROTOCOL.md's minimal client
if(TARGET gemmd)
  add_test(NAME python_examples
           COMMAND ${GEMMD_PYTEST} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_examples.py
                   --gemmd $<TARGET_FILE:gemmd> --build-dir ${PROJECT_BINARY_DIR})
  set_tests_properties(python_examples PROPERTIES
    LABELS integration
    TIMEOUT 600
    ENVIRONMENT "${GEMMD_PYTEST_ENV}")
endif()
