// Run-time CPU feature detection through cpuid and xgetbv (not __builtin_cpu_supports, whose
// feature names differ between compilers), and the SIMD level the kernels dispatch on.
#include "rewind/kernels/simd.h"

#include <string>

#include "rewind/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace rwd {

namespace {

#if defined(__x86_64__) || defined(__i386__)
bool bit(unsigned reg, int b) { return (reg >> b) & 1u; }

// XCR0 via xgetbv: which register states the OS saves on a context switch.
unsigned long long xcr0() {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<unsigned long long>(hi) << 32) | lo;
}
#endif

CpuFeatures detect() {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = bit(c, 27);
    if (!osxsave) return f;
    const unsigned long long x = xcr0();
    const bool ymm = (x & 0x6) == 0x6;            // SSE + AVX state
    const bool zmm = ymm && (x & 0xe0) == 0xe0;   // opmask + upper ZMM state
    const bool avx = bit(c, 28) && ymm;
    f.fma = avx && bit(c, 12);
    f.f16c = avx && bit(c, 29);
    unsigned max_leaf = __get_cpuid_max(0, nullptr);
    if (max_leaf < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = avx && bit(b, 5);
    f.avx512f = zmm && bit(b, 16);
    f.avx512dq = f.avx512f && bit(b, 17);
    f.avx512bw = f.avx512f && bit(b, 30);
    f.avx512vl = f.avx512f && bit(b, 31);
    f.avx512vnni = f.avx512f && bit(c, 11);
    __cpuid_count(7, 1, a, b, c, d);
    f.avxvnni = avx && bit(a, 4);
#endif
    return f;
}

bool has_avx2(const CpuFeatures& f) { return f.avx2 && f.fma && f.f16c; }
bool has_avx512(const CpuFeatures& f) { return has_avx2(f) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq; }

SimdLevel level_of(const CpuFeatures& f) {
    if (has_avx512(f)) return SimdLevel::Avx512;
    if (has_avx2(f)) return f.avxvnni ? SimdLevel::AvxVnni : SimdLevel::Avx2;
    return SimdLevel::Scalar;
}

bool is_level(SimdLevel l) {
    return l == SimdLevel::Scalar || l == SimdLevel::Avx2 || l == SimdLevel::AvxVnni || l == SimdLevel::Avx512;
}

constexpr SimdLevel kAllLevels[] = {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::AvxVnni, SimdLevel::Avx512};

} // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures f = detect(); // immutable after first use
    return f;
}

SimdLevel detect_simd() {
    static const SimdLevel level = level_of(cpu_features());
    return level;
}

const char* simd_name(SimdLevel l) {
    switch (l) {
    case SimdLevel::Scalar: return "scalar";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::AvxVnni: return "avx-vnni";
    case SimdLevel::Avx512: return "avx512";
    }
    return "unknown";
}

SimdLevel parse_simd(const char* name) {
    const std::string n = name ? name : "";
    for (SimdLevel l : kAllLevels)
        if (n == simd_name(l)) return l;
    if (n == "avxvnni") return SimdLevel::AvxVnni;
    throw Error(ErrorCode::argument, "unknown SIMD level '" + n + "' (expected scalar, avx2, avx-vnni or avx512)");
}

bool simd_supported(SimdLevel l) {
    const CpuFeatures& f = cpu_features();
    switch (l) {
    case SimdLevel::Scalar: return true;
    case SimdLevel::Avx2: return has_avx2(f);
    case SimdLevel::AvxVnni: return has_avx2(f) && f.avxvnni;
    case SimdLevel::Avx512: return has_avx512(f);
    }
    return false;
}

void require_simd(SimdLevel l) {
    if (!is_level(l)) throw Error("unknown SIMD level " + std::to_string(int(l)));
    if (!simd_supported(l))
        throw Error(ErrorCode::unsupported, std::string("SIMD level ") + simd_name(l) + " is not supported by this CPU (it has " +
                    simd_name(detect_simd()) + ")");
}

std::vector<SimdLevel> supported_simd_levels() {
    std::vector<SimdLevel> v;
    for (SimdLevel l : kAllLevels)
        if (simd_supported(l)) v.push_back(l);
    return v;
}

} // namespace rwd
