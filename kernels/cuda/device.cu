// Device selection, streams, device memory and copies for the CUDA backend (rewind/kernels/cuda_device.h).
#include <cuda_runtime.h>

#include <string>

#include "cuda_check.cuh"
#include "rewind/kernels/cuda_device.h"

namespace rwd::cuda {

int device_count() noexcept {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky-free error so later calls start clean
        return 0;
    }
    return n;
}

void check_device(int device) {
    const int n = device_count();
    if (n == 0)
        throw Error(ErrorCode::unsupported, "CUDA: no CUDA device is present (or no driver): cannot use cuda:" +
                                                std::to_string(device));
    if (device < 0 || device >= n)
        throw Error(ErrorCode::unsupported, "CUDA: device cuda:" + std::to_string(device) + " does not exist (" +
                                                std::to_string(n) + " device(s): cuda:0 .. cuda:" + std::to_string(n - 1) + ")");
}

DeviceInfo device_info(int device) {
    check_device(device);
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
    DeviceInfo info;
    info.name = p.name;
    info.total_bytes = static_cast<int64_t>(p.totalGlobalMem);
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess) {
        // Double data rate: two transfers per clock.
        info.peak_bandwidth_gbs = 2.0 * double(clock_khz) * 1e3 * double(bus_bits) / 8.0 / 1e9;
    } else {
        cudaGetLastError();
    }
    return info;
}

DeviceScope::DeviceScope(int device) {
    check(cudaGetDevice(&prev_), "cudaGetDevice");
    if (prev_ != device) check(cudaSetDevice(device), "cudaSetDevice");
}

DeviceScope::~DeviceScope() {
    int cur = prev_;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != prev_) cudaSetDevice(prev_);
    cudaGetLastError();
}

Stream::Stream(int device) : device_(device) {
    check_device(device);
    DeviceGuard g(device);
    check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate");
}

Stream::~Stream() {
    if (!s_) return;
    int prev = 0;
    const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
    if (cudaSetDevice(device_) == cudaSuccess) {
        cudaStreamSynchronize(s_);
        cudaStreamDestroy(s_);
    }
    if (have_prev) cudaSetDevice(prev);
    cudaGetLastError();
}

void Stream::synchronize() const { check(cudaStreamSynchronize(s_), "CUDA stream (a kernel or copy failed)"); }

DeviceBuffer::DeviceBuffer(int device, size_t bytes) : device_(device) {
    if (bytes == 0) return;
    check_device(device);
    DeviceGuard g(device);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        throw Error(ErrorCode::capacity, "CUDA: cannot allocate " + std::to_string(bytes) + " bytes on cuda:" +
                                             std::to_string(device) + " (" + cudaGetErrorString(e) + ")");
    }
    p_ = p;
    bytes_ = bytes;
}

void DeviceBuffer::reset() noexcept {
    if (!p_) return;
    int prev = 0;
    const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
    if (cudaSetDevice(device_) == cudaSuccess) cudaFree(p_);
    if (have_prev) cudaSetDevice(prev);
    cudaGetLastError();
    p_ = nullptr;
    bytes_ = 0;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
        reset();
        device_ = o.device_;
        p_ = std::exchange(o.p_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

namespace {
void copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, StreamHandle stream, const char* what) {
    if (bytes == 0) return;
    if (!dst || !src) throw Error(std::string(what) + ": null pointer in a copy of " + std::to_string(bytes) + " bytes");
    check(cudaMemcpyAsync(dst, src, bytes, kind, stream), what);
}
} // namespace

void copy_to_device(void* dst, const void* src, size_t bytes, StreamHandle stream, const char* what) {
    copy(dst, src, bytes, cudaMemcpyHostToDevice, stream, what);
}
void copy_to_host(void* dst, const void* src, size_t bytes, StreamHandle stream, const char* what) {
    copy(dst, src, bytes, cudaMemcpyDeviceToHost, stream, what);
}
void copy_on_device(void* dst, const void* src, size_t bytes, StreamHandle stream, const char* what) {
    copy(dst, src, bytes, cudaMemcpyDeviceToDevice, stream, what);
}
void copy_2d_on_device(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                       StreamHandle stream, const char* what) {
    if (width == 0 || rows == 0) return;
    if (!dst || !src) throw Error(std::string(what) + ": null pointer in a 2D copy");
    if (width > dst_pitch || width > src_pitch) throw Error(ErrorCode::shape, std::string(what) + ": row wider than its pitch");
    check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice, stream), what);
}

DeviceBuffer upload(int device, const void* src, size_t bytes, StreamHandle stream, const char* what) {
    DeviceBuffer b(device, bytes);
    DeviceGuard g(device);
    copy_to_device(b.data(), src, bytes, stream, what);
    check(cudaStreamSynchronize(stream), what);
    return b;
}

} // namespace rwd::cuda
