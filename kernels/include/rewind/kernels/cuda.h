// The CUDA backend's entry points. Builds without CUDA (REWIND_HAVE_CUDA undefined) get inline
// stand-ins that report no device, so callers need no #ifdefs and CPU builds need no nvcc.
#pragma once

#if defined(REWIND_HAVE_CUDA)
// Defined in kernels/cuda/*.cu, as a plain C symbol so the .cu side needs none of our headers.
extern "C" int rewind_cuda_device_count(void) noexcept;
#endif

namespace rwd {

// Number of CUDA devices visible to this process; 0 without CUDA support, and 0 when the driver
// or runtime reports an error (no driver, no device).
inline int cuda_device_count() noexcept {
#if defined(REWIND_HAVE_CUDA)
    return rewind_cuda_device_count();
#else
    return 0;
#endif
}

} // namespace rwd
