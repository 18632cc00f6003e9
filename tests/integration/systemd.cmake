# Integration tests of the systemd units, socket activation, sd_notify, the install tree and
# the man pages (tests/integration/systemd/). Each exits 0 (pass), 1 (fail) or 77 (a tool it
# needs is missing here: skip).
if(TARGET gemmd)
  set(_sd_dir ${CMAKE_CURRENT_SOURCE_DIR}/systemd)
  set(_sd_env "PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1")

  # systemd-analyze verify and security on the configured units, with ExecStart pointed at
  # the built gemmd (verify insists that the binary exists); the drain timeout and the socket
  # path agree with config/gemmd.yaml and the client's default address.
  add_test(NAME systemd_units_verify
           COMMAND sh ${_sd_dir}/verify_units.sh ${PROJECT_BINARY_DIR}/systemd
                   ${CMAKE_INSTALL_FULL_BINDIR}/gemmd $<TARGET_FILE:gemmd>
                   ${PROJECT_SOURCE_DIR}/config/gemmd.yaml
                   ${PROJECT_SOURCE_DIR}/client/gemmclient.h)

  # sysusers.d and tmpfiles.d files applied to an empty root: user, groups, /run/gemmd.
  add_test(NAME systemd_sysusers_tmpfiles
           COMMAND sh ${_sd_dir}/check_sysusers_tmpfiles.sh ${PROJECT_SOURCE_DIR}/systemd)

  # The daemon started by systemd-socket-activate serves on the socket it was handed.
  add_test(NAME systemd_socket_activation
           COMMAND ${GEMMD_PYTHON3} ${_sd_dir}/test_socket_activation.py
                   --gemmd $<TARGET_FILE:gemmd>)

  # READY=1, WATCHDOG=1 and STOPPING=1 arrive on NOTIFY_SOCKET.
  add_test(NAME systemd_notify
           COMMAND ${GEMMD_PYTHON3} ${_sd_dir}/test_notify.py --gemmd $<TARGET_FILE:gemmd>)

  # `cmake --install` into a temporary tree holds every file a deployment needs. The list
  # depends on which targets this build has, so CMake passes it.
  set(_sd_expect
    "${CMAKE_INSTALL_BINDIR}/gemmd"
    "${GEMMD_SYSTEMD_UNITDIR}/gemmd.service"
    "${GEMMD_SYSTEMD_UNITDIR}/gemmd.socket"
    "${GEMMD_SYSTEMD_SYSUSERSDIR}/gemmd.conf"
    "${GEMMD_SYSTEMD_TMPFILESDIR}/gemmd.conf"
    "${CMAKE_INSTALL_SYSCONFDIR}/gemmd/gemmd.yaml"
    "${CMAKE_INSTALL_MANDIR}/man8/gemmd.8"
    "${CMAKE_INSTALL_MANDIR}/man1/gemmctl.1"
    "${CMAKE_INSTALL_MANDIR}/man5/gemmd.yaml.5"
    "${CMAKE_INSTALL_MANDIR}/man3/libgemmclient.3"
    "${CMAKE_INSTALL_DOCDIR}/PROTOCOL.md")
  if(TARGET gemmctl)
    list(APPEND _sd_expect "${CMAKE_INSTALL_BINDIR}/gemmctl")
  endif()
  if(TARGET gemmclient)
    list(APPEND _sd_expect
      "${CMAKE_INSTALL_LIBDIR}/libgemmclient.so"
      "${CMAKE_INSTALL_LIBDIR}/libgemmclient.so.*"
      "${CMAKE_INSTALL_INCLUDEDIR}/gemmclient.h"
      "${CMAKE_INSTALL_INCLUDEDIR}/gemmclient_version.h"
      "${CMAKE_INSTALL_LIBDIR}/pkgconfig/gemmclient.pc"
      "${CMAKE_INSTALL_LIBDIR}/cmake/gemmclient/gemmclientConfig.cmake"
      "${CMAKE_INSTALL_LIBDIR}/cmake/gemmclient/gemmclientConfigVersion.cmake"
      "${CMAKE_INSTALL_LIBDIR}/cmake/gemmclient/gemmclientTargets.cmake")
    if(TARGET gemmclient_static)
      list(APPEND _sd_expect "${CMAKE_INSTALL_LIBDIR}/libgemmclient.a")
    endif()
  endif()
  add_test(NAME systemd_install_tree
           COMMAND ${GEMMD_PYTHON3} ${_sd_dir}/test_install_tree.py
                   --build ${PROJECT_BINARY_DIR} --cmake ${CMAKE_COMMAND}
                   --gemmd $<TARGET_FILE:gemmd> ${_sd_expect})

  # `cmake --install` works after scripts/demo.sh's partial build (its target builds every
  # file the install copies).
  add_test(NAME install_after_demo_build
           COMMAND ${GEMMD_PYTHON3} ${_sd_dir}/test_install_targets.py
                   --build ${PROJECT_BINARY_DIR} --demo ${PROJECT_SOURCE_DIR}/scripts/demo.sh)

  # The build takes msgpack-c 6's names (msgpack-c, libmsgpack-c) as well as the old ones.
  add_test(NAME build_msgpack_c6_names
           COMMAND ${GEMMD_PYTHON3} ${_sd_dir}/test_msgpack_names.py
                   --source ${PROJECT_SOURCE_DIR} --cmake ${CMAKE_COMMAND})

  # The man pages render without warnings and document every option the programs accept.
  set(_sd_gemmctl "")
  if(TARGET gemmctl)
    set(_sd_gemmctl $<TARGET_FILE:gemmctl>)
  endif()
  add_test(NAME systemd_man_pages
           COMMAND ${GEMMD_PYTHON3} ${_sd_dir}/test_man_pages.py
                   --source ${PROJECT_SOURCE_DIR} --gemmd $<TARGET_FILE:gemmd>
                   --gemmctl "${_sd_gemmctl}")

  set_tests_properties(systemd_units_verify systemd_sysusers_tmpfiles systemd_socket_activation
                       systemd_notify systemd_install_tree systemd_man_pages
                       install_after_demo_build build_msgpack_c6_names PROPERTIES
    LABELS integration
    TIMEOUT 300
    SKIP_RETURN_CODE 77
    ENVIRONMENT "${_sd_env}")
  # The install test writes a whole install tree: let nothing else run an install beside it.
  set_tests_properties(systemd_install_tree PROPERTIES RESOURCE_LOCK gemmd_install)
endif()
