// SIMD levels the CPU kernels can run at, and the run-time CPU check that picks one. Kept apart
// from matmul.h so the other kernels (attention, ops) can name a level too.
#pragma once
#include <vector>

namespace rwd {

enum class SimdLevel { Scalar, Avx2, Avx512 };
// What this CPU (and OS) supports: Avx512 needs avx512f/bw/vl/dq, Avx2 needs avx2+fma+f16c.
// Detected once and cached.
SimdLevel detect_simd();
const char* simd_name(SimdLevel l);
// Throws rwd::Error if `l` is above what detect_simd() reports (it would fault).
void require_simd(SimdLevel l);
// Every level this CPU can run, lowest first (Scalar always): what tests compare across.
std::vector<SimdLevel> supported_simd_levels();

} // namespace rwd
