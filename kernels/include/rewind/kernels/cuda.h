// The CUDA backend's entry points. Builds without CUDA (REWIND_HAVE_CUDA undefined) get inline
// stand-ins that report no device, so callers need no #ifdefs and CPU builds need no nvcc.
#pragma once

namespace rewind {

#if defined(REWIND_HAVE_CUDA)
// Number of CUDA devices visible to this process; 0 when the driver or runtime reports an error
// (no driver, no device).
int cuda_device_count() noexcept;
#else
inline int cuda_device_count() noexcept { return 0; }
#endif

} // namespace rewind
