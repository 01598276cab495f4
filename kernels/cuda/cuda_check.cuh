// Private to kernels/cuda: turning cudaError_t into rwd::Error, and launch checks.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "rewind/error.h"

namespace rwd::cuda {

// Throws rwd::Error (code `code`) "what: CUDA error NAME (text)" unless e is cudaSuccess.
inline void check(cudaError_t e, const char* what, ErrorCode code = ErrorCode::state) {
    if (e == cudaSuccess) return;
    if (e == cudaErrorMemoryAllocation) code = ErrorCode::capacity;
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice)
        code = ErrorCode::unsupported;
    const std::string msg = std::string(what) + ": CUDA error " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    throw Error(code, msg);
}

// After a kernel launch: a bad configuration is reported at once (asynchronous faults surface at
// the next synchronisation).
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

// Makes `device` current for the calling thread while in scope (the previous one restored after),
// so objects on different devices can be used from one thread without global state.
class DeviceGuard {
public:
    explicit DeviceGuard(int device) {
        check(cudaGetDevice(&prev_), "cudaGetDevice");
        if (prev_ != device) check(cudaSetDevice(device), "cudaSetDevice");
    }
    ~DeviceGuard() {
        int cur = prev_;
        if (cudaGetDevice(&cur) == cudaSuccess && cur != prev_) cudaSetDevice(prev_);
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int prev_ = 0;
};

inline unsigned grid_1d(int64_t n, int block) { return static_cast<unsigned>((n + block - 1) / block); }

} // namespace rwd::cuda
