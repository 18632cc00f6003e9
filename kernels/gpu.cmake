# gemmkernels_gpu: every GPU kernel, the registry and the selector.
# (filled by the GPU kernels work)
