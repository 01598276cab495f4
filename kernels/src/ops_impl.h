// Internal interface between ops.cpp and its per-ISA bodies. Not installed.
#pragma once
#include <cstdint>

namespace rwd::detail {

// SwiGLU with the AVX2 exp (see simd_math_avx2.h); out may alias gate or up.
void swiglu_avx2(const float* gate, const float* up, int64_t n, float* out);

} // namespace rwd::detail
