# proto/ unit tests (Check), one program per concern, label unit.
add_library(tp_util STATIC ${CMAKE_CURRENT_LIST_DIR}/proto/tp_util.c)
target_link_libraries(tp_util PUBLIC gemmproto PkgConfig::CHECK)
foreach(t types roundtrip header stream limits addr)
  add_executable(test_proto_${t} ${CMAKE_CURRENT_LIST_DIR}/proto/test_proto_${t}.c)
  target_link_libraries(test_proto_${t} PRIVATE tp_util)
  add_test(NAME proto_${t} COMMAND test_proto_${t})
  set_tests_properties(proto_${t} PROPERTIES LABELS unit TIMEOUT 120)
endforeach()
