// Device discovery for the CUDA backend: the one CUDA runtime call the CPU side needs so far.
// Declared in rewind/kernels/cuda.h as a plain C symbol.
#include <cuda_runtime.h>

extern "C" int rewind_cuda_device_count(void) noexcept {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the error so later runtime calls start clean
        return 0;
    }
    return n;
}
