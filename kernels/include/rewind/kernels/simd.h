// SIMD levels the CPU kernels can run at, and the run-time CPU check that picks one. Kept apart
// from matmul.h so the other kernels (attention, ops) can name a level too.
#pragma once
#include <vector>

namespace rwd {

// The CPU features rewind's kernels care about, as the CPU and the OS (saved register state)
// report them. Read with cpuid/xgetbv, so it works the same with every compiler.
struct CpuFeatures {
    bool avx2 = false, fma = false, f16c = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
    bool avx512vnni = false; // vpdpbusd on 512-bit vectors (AVX512_VNNI)
    bool avxvnni = false;    // vpdpbusd on 256-bit vectors, VEX-encoded (AVX-VNNI)
};
// Detected once and cached; immutable afterwards.
const CpuFeatures& cpu_features();

enum class SimdLevel { Scalar, Avx2, Avx512 };
// What this CPU (and OS) supports: Avx512 needs avx512f/bw/vl/dq, Avx2 needs avx2+fma+f16c.
// Detected once and cached.
SimdLevel detect_simd();
const char* simd_name(SimdLevel l);
// Throws rwd::Error (unsupported) if `l` is above what detect_simd() reports (it would fault);
// (argument) for a value that is no SimdLevel.
void require_simd(SimdLevel l);
// Every level this CPU can run, lowest first (Scalar always): what tests compare across.
std::vector<SimdLevel> supported_simd_levels();

} // namespace rwd
