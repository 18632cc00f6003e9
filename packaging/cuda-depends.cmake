# gemmd_cuda_depends(<out-var> <cuda-version>): the gemmd package's Depends entries for the
# CUDA libraries a GPU build links, libcudart.so.MAJOR and libcublas.so.MAJOR. They come from
# NVIDIA's repository (cuda-cudart-13-0, libcublas-13-0: named by the toolkit's major and
# minor), not Debian's, so dpkg-shlibdeps names no package for them and the package would
# install on a machine where gemmd then fails to start. Each is given with the name a Debian
# archive would use (libcudart13, libcublas13) as an alternative. apt refuses the package, or
# pulls these in from a configured NVIDIA repository.
function(gemmd_cuda_depends out version)
  if(NOT version MATCHES "^([0-9]+)\\.([0-9]+)")
    message(FATAL_ERROR "gemmd_cuda_depends: no MAJOR.MINOR in the CUDA version '${version}'")
  endif()
  set(major ${CMAKE_MATCH_1})
  set(mm ${CMAKE_MATCH_1}-${CMAKE_MATCH_2})
  set(${out} "cuda-cudart-${mm} | libcudart${major}, libcublas-${mm} | libcublas${major}"
      PARENT_SCOPE)
endfunction()
