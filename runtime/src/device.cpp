// Device names ("cpu", "cuda:N") and the availability check behind `--device`.
#include "rewind/device.h"

#include <charconv>

#include "rewind/error.h"
#include "rewind/kernels/cuda.h"
#if defined(REWIND_HAVE_CUDA)
#include "rewind/kernels/cuda_device.h"
#endif

namespace rwd {

Device parse_device(std::string_view text) {
    if (text == "cpu") return {};
    if (text == "cuda") return {DeviceKind::Cuda, 0};
    constexpr std::string_view prefix = "cuda:";
    if (text.size() > prefix.size() && text.size() <= prefix.size() + 3 && text.substr(0, prefix.size()) == prefix) {
        const std::string_view num = text.substr(prefix.size());
        int index = -1;
        const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
        if (ec == std::errc() && end == num.data() + num.size() && index >= 0) return {DeviceKind::Cuda, index};
    }
    throw Error(ErrorCode::argument, "unknown device '" + std::string(text) + "' (expected cpu, cuda or cuda:N)");
}

std::string device_name(const Device& d) {
    return d.kind == DeviceKind::Cpu ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

bool cuda_backend_built() noexcept {
#if defined(REWIND_HAVE_CUDA)
    return true;
#else
    return false;
#endif
}

void require_device(const Device& d) {
    if (d.kind == DeviceKind::Cpu) return;
    if (d.kind != DeviceKind::Cuda) throw Error(ErrorCode::argument, "unknown device kind");
    if (!cuda_backend_built())
        throw Error(ErrorCode::unsupported, "device " + device_name(d) +
                                                ": this build of rewind has no CUDA backend (configure with the CUDA "
                                                "toolkit present and REWIND_CUDA=AUTO or ON)");
    const int n = cuda_device_count();
    if (n == 0)
        throw Error(ErrorCode::unsupported, "device " + device_name(d) + ": no CUDA device is present (or no driver)");
    if (d.index < 0 || d.index >= n)
        throw Error(ErrorCode::unsupported, "device " + device_name(d) + " does not exist (" + std::to_string(n) +
                                                " CUDA device(s): cuda:0 .. cuda:" + std::to_string(n - 1) + ")");
}

DeviceDescription describe_device(const Device& d) {
    require_device(d);
    if (d.kind == DeviceKind::Cpu) return {"CPU", 0};
#if defined(REWIND_HAVE_CUDA)
    const cuda::DeviceInfo info = cuda::device_info(d.index);
    return {info.name, info.peak_bandwidth_gbs};
#else
    return {};
#endif
}

} // namespace rwd
