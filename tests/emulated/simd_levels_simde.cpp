// The SIMD levels of the test_*_simde binaries: this CPU's AVX2 (native) plus AvxVnni and Avx512
// with AVX512-VNNI, whose bodies are the SIMDe builds (tests/CMakeLists.txt). Stands in for
// kernels/src/simd.cpp, whose every external symbol it defines, so the linker never takes that
// one from librewind_kernels.a. Without AVX2 on the CPU only Scalar is claimed (the other levels
// also run native AVX2 bodies).
#include <cpuid.h>

#include <string>
#include <vector>

#include "rewind/error.h"
#include "rewind/kernels/simd.h"

namespace rwd {
namespace {

// AVX2 + FMA as the compiler's CPU check reports them, F16C (which clang's check does not name)
// from cpuid leaf 1, ECX bit 29.
bool cpu_has_avx2() {
    static const bool has = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1u);
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    }();
    return has;
}

} // namespace

std::vector<SimdLevel> supported_simd_levels() {
    if (!cpu_has_avx2()) return {SimdLevel::Scalar};
    return {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::AvxVnni, SimdLevel::Avx512};
}
// What the emulated machine has: the CPU's AVX2, then AVX-512 F/BW/VL/DQ, AVX512-VNNI, AVX-VNNI.
const CpuFeatures& cpu_features() {
    static const CpuFeatures f = [] {
        CpuFeatures c;
        c.avx2 = c.fma = c.f16c = cpu_has_avx2();
        c.avx512f = c.avx512bw = c.avx512vl = c.avx512dq = c.avx512vnni = c.avxvnni = c.avx2;
        return c;
    }();
    return f;
}
SimdLevel detect_simd() { return cpu_has_avx2() ? SimdLevel::Avx512 : SimdLevel::Scalar; }
const char* simd_name(SimdLevel l) {
    switch (l) {
    case SimdLevel::Scalar: return "scalar";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::AvxVnni: return "avx-vnni (SIMDe)";
    case SimdLevel::Avx512: return "avx512 (SIMDe)";
    }
    return "unknown";
}
// No allocation: the kernels ask on every call.
bool simd_supported(SimdLevel l) {
    if (l == SimdLevel::Scalar) return true;
    return cpu_has_avx2() && (l == SimdLevel::Avx2 || l == SimdLevel::AvxVnni || l == SimdLevel::Avx512);
}
// The error rules of simd.cpp: argument for a value that is no level, unsupported naming both.
void require_simd(SimdLevel l) {
    if (std::string(simd_name(l)) == "unknown") throw Error("unknown SIMD level " + std::to_string(int(l)));
    if (!simd_supported(l))
        throw Error(ErrorCode::unsupported, std::string("SIMD level ") + simd_name(l) + " is not supported by this CPU (it has " +
                    simd_name(detect_simd()) + ")");
}
SimdLevel parse_simd(const char* name) {
    const std::string n = name ? name : "";
    for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::AvxVnni, SimdLevel::Avx512})
        if (n == simd_name(l)) return l;
    throw Error(ErrorCode::argument, "unknown SIMD level '" + n + "' (expected scalar, avx2, avx-vnni or avx512)");
}

} // namespace rwd
