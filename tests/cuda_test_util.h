// Shared helpers of the CUDA tests: the skip rule (no device: skip, saying so), and device buffers
// filled from and read back into host vectors. Only included where REWIND_HAVE_CUDA is defined.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "rewind/kernels/cuda_device.h"

// Skips the current test when this machine has no CUDA device (CI builds run these binaries on
// machines without a GPU; scripts/gpu-check.sh runs them on one).
#define REWIND_REQUIRE_CUDA_DEVICE()                                                                          \
    do {                                                                                                      \
        if (rwd::cuda::device_count() == 0)                                                                   \
            GTEST_SKIP() << "no CUDA device on this machine (or no driver): this GPU test runs in "           \
                            "scripts/gpu-check.sh on a machine with one";                                     \
    } while (0)

namespace rwd::test {

// A device copy of `host` on device 0 (synchronous).
template <class T>
cuda::DeviceBuffer to_device(const std::vector<T>& host, const cuda::Stream& s) {
    return cuda::upload(0, host.data(), host.size() * sizeof(T), s.get(), "test upload");
}

// n elements of a device buffer, copied back (synchronous).
template <class T>
std::vector<T> to_host(const void* dev, size_t n, const cuda::Stream& s) {
    std::vector<T> out(n);
    cuda::copy_to_host(out.data(), dev, n * sizeof(T), s.get(), "test download");
    s.synchronize();
    return out;
}

// An uninitialised device buffer of n elements.
template <class T>
cuda::DeviceBuffer device_array(size_t n) {
    return cuda::DeviceBuffer(0, n * sizeof(T));
}

} // namespace rwd::test
