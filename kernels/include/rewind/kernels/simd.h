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

// The instruction sets a kernel call may use, lowest first. Each level is a cap: a call at level L
// runs the best body L allows, so a whole pass can be run as a CPU without the higher sets would
// run it (ContextOptions::simd), and every level gives the same bits.
//   Scalar  - no SIMD intrinsics.
//   Avx2    - plain AVX2 + FMA + F16C: no VNNI of any kind (maddubs/madd for int8 products).
//   AvxVnni - Avx2 plus AVX-VNNI (VEX-encoded 256-bit vpdpbusd), as on AVX2-only CPUs that have it.
//   Avx512  - AVX-512 F/BW/VL/DQ, plus AVX512-VNNI and AVX-VNNI wherever the CPU has them.
// Levels are not nested on every CPU: one with AVX-512 but not AVX-VNNI runs Avx512 and Avx2, not
// AvxVnni. Compare levels with the helpers below, not by their order.
enum class SimdLevel { Scalar, Avx2, AvxVnni, Avx512 };
// The best level this CPU (and OS) supports: Avx512 needs avx512f/bw/vl/dq, Avx2 needs
// avx2+fma+f16c, AvxVnni needs Avx2 and avxvnni. Detected once and cached.
SimdLevel detect_simd();
// "scalar", "avx2", "avx-vnni", "avx512" ("unknown" for a value that is no SimdLevel).
const char* simd_name(SimdLevel l);
// The level simd_name() calls `name` (case-sensitive; "avxvnni" is accepted too). Throws
// rwd::Error (argument) naming the accepted names for anything else.
SimdLevel parse_simd(const char* name);
// Whether this CPU can run level `l` (false for a value that is no SimdLevel).
bool simd_supported(SimdLevel l);
// Throws rwd::Error (unsupported), naming `l` and the CPU's best level, if this CPU cannot run `l`
// (it would fault); (argument) for a value that is no SimdLevel.
void require_simd(SimdLevel l);
// Every level this CPU can run, lowest first (Scalar always): what tests compare across.
std::vector<SimdLevel> supported_simd_levels();
// Whether level `l` allows AVX2 bodies (every level but Scalar) and AVX-512 bodies.
inline bool simd_has_avx2(SimdLevel l) { return l == SimdLevel::Avx2 || l == SimdLevel::AvxVnni || l == SimdLevel::Avx512; }
inline bool simd_has_avx512(SimdLevel l) { return l == SimdLevel::Avx512; }

} // namespace rwd
