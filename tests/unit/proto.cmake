# proto/ unit tests (Check), one program per concern, label unit.
add_library(tp_util STATIC ${CMAKE_CURRENT_LIST_DIR}/proto/tp_util.c)
target_link_libraries(tp_util PUBLIC gemmproto PkgConfig::CHECK)
foreach(t types roundtrip header stream limits addr shm resident cuda)
  add_executable(test_proto_${t} ${CMAKE_CURRENT_LIST_DIR}/proto/test_proto_${t}.c)
  target_link_libraries(test_proto_${t} PRIVATE tp_util)
  add_test(NAME proto_${t} COMMAND test_proto_${t})
  set_tests_properties(proto_${t} PROPERTIES LABELS unit TIMEOUT 120)
endforeach()

# f16/bf16 conversions (gemmhalf): bit for bit against NumPy's float16, which half_numpy.py
# writes into a temporary directory, and against float64 definitions of both formats.
add_executable(test_proto_half ${CMAKE_CURRENT_LIST_DIR}/proto/test_proto_half.c)
target_link_libraries(test_proto_half PRIVATE gemmhalf PkgConfig::CHECK m)
target_compile_definitions(test_proto_half PRIVATE
  TP_PYTHON="${GEMMD_PYTHON3}" TP_HALF_SCRIPT="${CMAKE_CURRENT_LIST_DIR}/proto/half_numpy.py")
add_test(NAME proto_half COMMAND test_proto_half)
set_tests_properties(proto_half PROPERTIES LABELS unit TIMEOUT 120)

# fp8 conversions (gemmhalf): every code, every tie, random values against a brute-force nearest.
add_executable(test_proto_fp8 ${CMAKE_CURRENT_LIST_DIR}/proto/test_proto_fp8.c)
target_link_libraries(test_proto_fp8 PRIVATE gemmhalf PkgConfig::CHECK m)
add_test(NAME proto_fp8 COMMAND test_proto_fp8)
set_tests_properties(proto_fp8 PROPERTIES LABELS unit TIMEOUT 120)
