# The daemon end to end on the GPU backend (tests/gpu/daemon/test_*.py, on gemmd_harness.py).
# Label gpu; each script exits 77 ("SKIP: no CUDA device") where gemmd finds no GPU.
if(TARGET gemmd)
  foreach(name gpu_e2e)
    add_test(NAME daemon_${name}
             COMMAND ${GEMMD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/daemon/test_${name}.py
                     --gemmd $<TARGET_FILE:gemmd>)
    set_tests_properties(daemon_${name} PROPERTIES
      LABELS gpu
      TIMEOUT 600
      SKIP_RETURN_CODE 77
      ENVIRONMENT
        "PYTHONPATH=${CMAKE_CURRENT_LIST_DIR}/../integration;PYTHONDONTWRITEBYTECODE=1;PYTHONUNBUFFERED=1")
  endforeach()
endif()
