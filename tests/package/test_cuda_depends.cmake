# cmake -DSOURCE=DIR -DBUILD=DIR -DHAVE_CUDA=ON|OFF -P test_cuda_depends.cmake
# The gemmd package of a GPU build depends on the CUDA runtime and cuBLAS it links
# (libcudart.so.13, libcublas.so.13), which dpkg-shlibdeps cannot name: before, the package
# installed anywhere and gemmd failed at start. Checks packaging/cuda-depends.cmake's names for
# two toolkit versions and, in a GPU build tree, the Depends CPack was configured with.
include(${SOURCE}/packaging/cuda-depends.cmake)
foreach(case "13.0.88;cuda-cudart-13-0 | libcudart13, libcublas-13-0 | libcublas13"
             "12.4.131;cuda-cudart-12-4 | libcudart12, libcublas-12-4 | libcublas12")
  list(GET case 0 version)
  list(GET case 1 want)
  gemmd_cuda_depends(got "${version}")
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "CUDA ${version}: '${got}', expected '${want}'")
  endif()
endforeach()
if(HAVE_CUDA)
  file(READ ${BUILD}/CPackConfig.cmake config)
  if(NOT config MATCHES "CPACK_DEBIAN_GEMMD_PACKAGE_DEPENDS \"systemd, cuda-cudart-[0-9]+-[0-9]+ \\| libcudart[0-9]+, libcublas-[0-9]+-[0-9]+ \\| libcublas[0-9]+\"")
    message(FATAL_ERROR "the GPU build's gemmd package does not depend on cudart and cuBLAS")
  endif()
  message(STATUS "GPU build: the gemmd package depends on cudart and cuBLAS")
endif()
message(STATUS "PASS")
