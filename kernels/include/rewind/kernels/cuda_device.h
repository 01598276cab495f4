// The CUDA backend's device plumbing: device selection, streams, device memory and copies, each
// failure turned into an rwd::Error. No process-global CUDA state: every object names its device
// and owns what it creates. Defined in kernels/cuda/device.cu; only builds with REWIND_HAVE_CUDA
// link these (rewind/kernels/cuda.h's cuda_device_count() works in every build).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

struct CUstream_st; // cudaStream_t is CUstream_st*

namespace rwd::cuda {

using StreamHandle = CUstream_st*;

// Devices visible to this process (0 without a driver or device; never throws).
int device_count() noexcept;
// Throws rwd::Error (unsupported) when `device` is not in [0, device_count()): the message says
// whether there is no device at all.
void check_device(int device);

struct DeviceInfo {
    std::string name;
    int64_t total_bytes = 0;
    double peak_bandwidth_gbs = 0; // from the memory clock and bus width; 0 when unknown
};
DeviceInfo device_info(int device);

// Makes `device` the calling thread's current device while in scope, then restores the previous
// one, so objects on different devices can be driven from one thread (kernels launch on the
// current device's streams).
class DeviceScope {
public:
    explicit DeviceScope(int device);
    ~DeviceScope();
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;

private:
    int prev_ = -1;
};

// A stream on `device`, non-blocking with respect to the legacy default stream. Move-only.
class Stream {
public:
    explicit Stream(int device);
    ~Stream();
    Stream(Stream&& o) noexcept : device_(o.device_), s_(std::exchange(o.s_, nullptr)) {}
    Stream& operator=(Stream&&) = delete;
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    StreamHandle get() const { return s_; }
    int device() const { return device_; }
    // Waits for the stream's work; a kernel fault surfaces here as an rwd::Error.
    void synchronize() const;

private:
    int device_;
    StreamHandle s_ = nullptr;
};

// Device memory on one device. Move-only; empty (null) when default-constructed or of size 0.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(int device, size_t bytes); // throws rwd::Error (capacity) when out of memory
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& o) noexcept
        : device_(o.device_), p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* data() const { return p_; }
    template <class T> T* as() const { return static_cast<T*>(p_); }
    size_t bytes() const { return bytes_; }

private:
    void reset() noexcept;
    int device_ = 0;
    void* p_ = nullptr;
    size_t bytes_ = 0;
};

// Asynchronous copies on `stream` (host memory may be pageable: then the copy is synchronous
// with respect to the host). Throw rwd::Error naming `what` on a CUDA error. bytes == 0 is a no-op.
void copy_to_device(void* dst, const void* src, size_t bytes, StreamHandle stream, const char* what);
void copy_to_host(void* dst, const void* src, size_t bytes, StreamHandle stream, const char* what);
void copy_on_device(void* dst, const void* src, size_t bytes, StreamHandle stream, const char* what);
// dst rows of dst_pitch bytes <- src rows of src_pitch bytes, `rows` rows of `width` bytes.
void copy_2d_on_device(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                       StreamHandle stream, const char* what);

// Blocking upload (for weights, once): allocates and copies.
DeviceBuffer upload(int device, const void* src, size_t bytes, StreamHandle stream, const char* what);

} // namespace rwd::cuda
