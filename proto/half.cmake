# gemmhalf: f16/bf16 <-> float (gp_half.h), fp8 <-> float (gp_fp8.h). Pure C with no
# dependencies, apart from libgemmproto, so that the kernels' CPU path, the client tools and the GPU tests link it
# without msgpack. Included by proto/CMakeLists.txt and by the kernels-only build
# (tests/gpu/standalone).
add_library(gemmhalf STATIC ${CMAKE_CURRENT_LIST_DIR}/gp_half.c ${CMAKE_CURRENT_LIST_DIR}/gp_fp8.c)
target_include_directories(gemmhalf PUBLIC ${CMAKE_CURRENT_LIST_DIR})
