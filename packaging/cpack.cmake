# Debian packages from the install components, with CPack's DEB generator:
#   gemmd               the daemon, gemmd.yaml (a conffile), units, sysusers.d and tmpfiles.d
#                       files, gemmd(8), gemmd.yaml(5), PROTOCOL.md
#   gemmctl             the command line and gemmctl(1)
#   libgemmclientN      the shared library (N: the soname's major version)
#   libgemmclient-dev   headers, static library, pkg-config and CMake files, libgemmclient(3)
#   libgemmd-blasN      libgemmd_blas.so.N, the BLAS gemms on gemmd (LD_PRELOAD, or an
#                       alternative for libblas.so.3 that the administrator installs: the
#                       package never switches the system's BLAS by itself), libgemmd_blas(7)
#   python3-gemmclient  the Python client, when python/ installs a component named python
# Build them with scripts/package.sh (a tree configured with the prefix /usr). Dependencies on
# Debian's libraries come from dpkg-shlibdeps; between these packages from the components.

get_cmake_property(_gemmd_components COMPONENTS)
set(CPACK_COMPONENTS_ALL gemmd gemmctl libgemmclient libgemmclient-dev libgemmd-blas)
if("python" IN_LIST _gemmd_components)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gemmd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "gemmd")
set(GEMMD_PACKAGE_MAINTAINER "gemmd maintainers <gemmd@localhost>" CACHE STRING
    "The Maintainer field of the Debian packages")
set(CPACK_PACKAGE_CONTACT "${GEMMD_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "GEMM over a socket")
set(CPACK_PACKAGE_DESCRIPTION
    "gemmd multiplies matrices for other programs: clients send GEMM requests over a Unix or TCP socket in msgpack-RPC; it runs them on the GPUs, or on the CPU with OpenBLAS.")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
# dpkg-shlibdeps must find libgemmclient, which is not installed yet when gemmctl is packaged.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR}/client)
if(GEMMD_HAVE_CUDA)
  # cuBLAS comes from NVIDIA's installer or repository, not Debian: dpkg-shlibdeps finds it
  # here and names no package for it; the gemmd package's Depends name them (below).
  list(APPEND CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CUDAToolkit_LIBRARY_DIR})
endif()

set(CPACK_DEBIAN_GEMMD_PACKAGE_NAME gemmd)
set(CPACK_DEBIAN_GEMMD_PACKAGE_SECTION misc)
# systemd-sysusers and systemd-tmpfiles for the maintainer scripts; a GPU build, the CUDA
# runtime and cuBLAS it links (packaging/cuda-depends.cmake).
set(CPACK_DEBIAN_GEMMD_PACKAGE_DEPENDS "systemd")
if(GEMMD_HAVE_CUDA)
  include(${CMAKE_CURRENT_LIST_DIR}/cuda-depends.cmake)
  gemmd_cuda_depends(_gemmd_cuda_depends "${CUDAToolkit_VERSION}")
  string(APPEND CPACK_DEBIAN_GEMMD_PACKAGE_DEPENDS ", ${_gemmd_cuda_depends}")
endif()
set(CPACK_DEBIAN_GEMMD_PACKAGE_SUGGESTS "gemmctl")
set(CPACK_DEBIAN_GEMMD_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION_SUMMARY}: the daemon
 ${CPACK_PACKAGE_DESCRIPTION}
 .
 The service runs as the system user gemmd; members of the group gemmd may use
 /run/gemmd/gemmd.sock.")
set(_gemmd_pkg ${PROJECT_BINARY_DIR}/packaging/gemmd)
set(GEMMD_PKG_CONFIG_FILE ${CMAKE_INSTALL_FULL_SYSCONFDIR}/gemmd/gemmd.yaml)
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(GEMMD_PKG_CONFIG_FILE /etc/gemmd/gemmd.yaml)
endif()
foreach(_script postinst prerm postrm conffiles)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/debian/gemmd.${_script} ${_gemmd_pkg}/${_script} @ONLY)
endforeach()
set(CPACK_DEBIAN_GEMMD_PACKAGE_CONTROL_EXTRA
    ${_gemmd_pkg}/postinst ${_gemmd_pkg}/prerm ${_gemmd_pkg}/postrm ${_gemmd_pkg}/conffiles)

set(CPACK_DEBIAN_GEMMCTL_PACKAGE_NAME gemmctl)
set(CPACK_DEBIAN_GEMMCTL_PACKAGE_SECTION utils)
set(CPACK_COMPONENT_GEMMCTL_DEPENDS libgemmclient)
# verify's float64 reference loads OpenBLAS at run time when it is there (seconds instead of a
# minute at 4000^2 x 2000) and falls back to a loop: wanted, not needed.
set(CPACK_DEBIAN_GEMMCTL_PACKAGE_RECOMMENDS "libopenblas0")
set(CPACK_DEBIAN_GEMMCTL_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION_SUMMARY}: the command line
 gemmctl sends work to gemmd: ping, info, stats, gemm from NumPy .npy files,
 bench and verify.")

set(CPACK_DEBIAN_LIBGEMMCLIENT_PACKAGE_NAME libgemmclient${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_LIBGEMMCLIENT_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_LIBGEMMCLIENT_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION_SUMMARY}: client library
 libgemmclient lets a C program send matrix products to gemmd.")

set(CPACK_DEBIAN_LIBGEMMCLIENT-DEV_PACKAGE_NAME libgemmclient-dev)
set(CPACK_DEBIAN_LIBGEMMCLIENT-DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_LIBGEMMCLIENT-DEV_DEPENDS libgemmclient)
# gemmclient.pc requires msgpack (Requires.private) and the static library links it.
set(CPACK_DEBIAN_LIBGEMMCLIENT-DEV_PACKAGE_DEPENDS "libmsgpack-dev")
set(CPACK_DEBIAN_LIBGEMMCLIENT-DEV_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION_SUMMARY}: client library, development files
 Headers, the static library, pkg-config and CMake package files and the
 libgemmclient(3) man page.")

set(CPACK_DEBIAN_LIBGEMMD-BLAS_PACKAGE_NAME libgemmd-blas${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_LIBGEMMD-BLAS_PACKAGE_SECTION libs)
# the CPU BLAS is opened at run time (dlopen), so dpkg-shlibdeps cannot see it
set(CPACK_DEBIAN_LIBGEMMD-BLAS_PACKAGE_DEPENDS "libopenblas0-pthread | libblas3")
set(CPACK_DEBIAN_LIBGEMMD-BLAS_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION_SUMMARY}: BLAS library
 libgemmd_blas sends the large sgemm/dgemm calls of unchanged programs (NumPy, SciPy,
 R, Octave, Fortran) to gemmd, through LD_PRELOAD or as an alternative for
 libblas.so.3; everything else runs on the system's CPU BLAS. See libgemmd_blas(7).")

if("python" IN_LIST CPACK_COMPONENTS_ALL)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-gemmclient)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3, python3-msgpack")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS "python3-numpy")
  set(CPACK_DEBIAN_PYTHON_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION_SUMMARY}: Python client
 A Python client for gemmd.")
endif()

include(CPack)
