# client/ integration tests, label integration: libgemmclient and gemmctl against the real
# gemmd, and docs/c-library.md's C example built against the installed library. Python drivers
# (built on gemmd_harness.py) start the daemons; exit 0 pass, 1 fail, 77 skip.
if(TARGET gemmd)
  set(_gc_it ${CMAKE_CURRENT_SOURCE_DIR}/client)
  set(_gc_env "PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1")

  add_executable(test_client_e2e ${_gc_it}/test_client_e2e.c)
  # no msgpack-c: the info and stats maps are read through gc_map_*
  target_link_libraries(test_client_e2e PRIVATE gemmclient gctl_util PkgConfig::CHECK)

  add_test(NAME client_e2e
           COMMAND ${GEMMD_PYTHON3} ${_gc_it}/test_client_e2e.py --gemmd $<TARGET_FILE:gemmd>
                   --bin $<TARGET_FILE:test_client_e2e>)
  add_test(NAME client_gemmctl
           COMMAND ${GEMMD_PYTHON3} ${_gc_it}/test_gemmctl.py --gemmd $<TARGET_FILE:gemmd>
                   --gemmctl $<TARGET_FILE:gemmctl>)
  add_test(NAME client_readme_example
           COMMAND ${GEMMD_PYTHON3} ${_gc_it}/test_readme_example.py --gemmd $<TARGET_FILE:gemmd>
                   --doc ${CMAKE_SOURCE_DIR}/docs/c-library.md --build ${CMAKE_BINARY_DIR}
                   --cc ${CMAKE_C_COMPILER} --sanitize ${GEMMD_SANITIZE})
  add_test(NAME client_gemmctl_newuser
           COMMAND ${GEMMD_PYTHON3} ${_gc_it}/test_gemmctl_newuser.py --gemmd $<TARGET_FILE:gemmd>
                   --gemmctl $<TARGET_FILE:gemmctl>)
  add_test(NAME client_gemmctl_cli
           COMMAND ${GEMMD_PYTHON3} ${_gc_it}/test_gemmctl_cli.py --gemmd $<TARGET_FILE:gemmd>
                   --gemmctl $<TARGET_FILE:gemmctl>)
  # issue 15: address lists, idle closes; the token in a test of its own, as it skips (77)
  # until the daemon lists the "auth" feature
  set(_gc_scaleout ${GEMMD_PYTHON3} ${_gc_it}/test_client_scaleout.py --gemmd $<TARGET_FILE:gemmd>
      --bin $<TARGET_FILE:test_client_e2e> --gemmctl $<TARGET_FILE:gemmctl>)
  add_test(NAME client_scaleout COMMAND ${_gc_scaleout})
  add_test(NAME client_token COMMAND ${_gc_scaleout} --token)
  # issue 34: the automatic scratch region and leading dimensions
  add_executable(test_client_scratch ${_gc_it}/test_client_scratch.c)
  target_link_libraries(test_client_scratch PRIVATE gemmclient m)
  add_test(NAME client_scratch
           COMMAND ${GEMMD_PYTHON3} ${_gc_it}/test_client_scratch.py --gemmd $<TARGET_FILE:gemmd>
                   --bin $<TARGET_FILE:test_client_scratch>)
  set_tests_properties(client_e2e client_gemmctl client_readme_example client_gemmctl_cli
                       client_gemmctl_newuser
                       client_scaleout client_token client_scratch PROPERTIES
    LABELS integration
    TIMEOUT 300
    SKIP_RETURN_CODE 77
    ENVIRONMENT "${_gc_env}")
  # its prefix recipe runs a whole cmake --install of this build tree
  set_tests_properties(client_readme_example PROPERTIES RESOURCE_LOCK gemmd_install)
endif()
