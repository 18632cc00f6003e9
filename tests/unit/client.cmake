# client/ unit tests (Check), label unit: the .npy reader and writer cross-checked with numpy,
# address refusals, error strings, client-side timeouts and lost connections (fake servers, no
# daemon), and the shared library's exported symbols.
set(_gc_unit ${CMAKE_CURRENT_LIST_DIR}/client)

add_executable(test_client_npy ${_gc_unit}/test_client_npy.c)
target_link_libraries(test_client_npy PRIVATE gctl_util PkgConfig::CHECK)
target_compile_definitions(test_client_npy PRIVATE
  GCTL_PYTHON="${GEMMD_PYTHON3}" GCTL_NPY_SCRIPT="${_gc_unit}/npy_py.py")
add_test(NAME client_npy COMMAND test_client_npy)

add_executable(test_client_lib ${_gc_unit}/test_client_lib.c)
target_link_libraries(test_client_lib PRIVATE gemmclient_static gemmproto PkgConfig::CHECK
                                              Threads::Threads)
# the fake servers speak proto themselves (gc_internal.h brings its headers)
target_include_directories(test_client_lib PRIVATE ${CMAKE_SOURCE_DIR}/client/lib)
add_test(NAME client_lib COMMAND test_client_lib)

# Only the GC_EXPORT functions of gemmclient.h leave libgemmclient.so, all of them.
add_test(NAME client_exports
         COMMAND sh ${_gc_unit}/check_exports.sh $<TARGET_FILE:gemmclient>
                 ${CMAKE_SOURCE_DIR}/client/gemmclient.h)

set_tests_properties(client_npy client_lib client_exports PROPERTIES LABELS unit TIMEOUT 120)

# scripts/check-layers.py's rules beyond daemon/ (client/lib's layers, no circle in any folder,
# which folder includes which, no import circle in python/gemmd), each shown a small tree that
# breaks it; the real tree is checked by daemon_layers.
add_test(NAME check_layers_repository
         COMMAND ${GEMMD_PYTHON3} -W error ${CMAKE_CURRENT_LIST_DIR}/layers/test_check_layers_repo.py)
set_tests_properties(check_layers_repository PROPERTIES LABELS unit TIMEOUT 60)
