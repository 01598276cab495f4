// Where a Context runs its forward pass: the CPU (default) or a CUDA device ("cuda:N"). The CUDA
// backend exists only in builds with the CUDA toolkit (REWIND_CUDA=AUTO finds it); asking for it
// elsewhere, or on a machine without a GPU, is a clear rwd::Error (unsupported), never a crash.
#pragma once
#include <string>
#include <string_view>

namespace rwd {

enum class DeviceKind { Cpu, Cuda };

struct Device {
    DeviceKind kind = DeviceKind::Cpu;
    int index = 0; // CUDA device ordinal (0 for the CPU)
    bool operator==(const Device&) const = default;
};

// "cpu", "cuda" (= cuda:0) or "cuda:N" with N a decimal ordinal below 1000. Throws rwd::Error
// (argument) for anything else, naming the text.
Device parse_device(std::string_view text);
// "cpu" or "cuda:N".
std::string device_name(const Device& d);
// Whether this build contains the CUDA backend.
bool cuda_backend_built() noexcept;
// Throws rwd::Error (unsupported) when `d` cannot run here: the CUDA backend is not built, no CUDA
// device (or driver) is present, or the ordinal is out of range. The CPU is always available.
void require_device(const Device& d);

struct DeviceDescription {
    std::string name;              // "CPU" or the GPU's name
    double peak_bandwidth_gbs = 0; // a GPU's memory bandwidth from its clock and bus width; 0: unknown
};
// What `d` is. Throws as require_device.
DeviceDescription describe_device(const Device& d);

} // namespace rwd
