// Device discovery for the CUDA backend: the one CUDA runtime call the CPU side needs so far.
#include <cuda_runtime.h>

#include "rewind/kernels/cuda.h"

namespace rewind {

int cuda_device_count() noexcept {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky error so later calls start clean
        return 0;
    }
    return n;
}

} // namespace rewind
