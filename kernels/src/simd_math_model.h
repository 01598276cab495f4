// Exact scalar models of simd_math_avx2.h's vector math, for the scalar bodies that must give the
// SIMD bodies' bits (attention's softmax, SwiGLU). Plain C++: included by any file, any ISA.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "exp_constants.h"

namespace rwd::detail {

// exp_avx2 / exp_avx512 lane by lane: the same clamps (max/min as the vector instructions order
// their operands, so NaN clamps to -87), the same rounding of n (nearest even), the same fmas in
// the same order, the same 2^n. It gives exp_avx2's bits for every input.
inline float exp_avx2_model(float x) {
    const float lo = exp_c::lo, hi = exp_c::hi;
    const bool zero = x < lo, inf = x > hi; // ordered compares: false for NaN
    x = x > lo ? x : lo;                    // _mm256_max_ps(x, lo)
    x = x < hi ? x : hi;                    // _mm256_min_ps(x, hi)
    const float n = std::nearbyint(x * exp_c::log2e);
    float r = std::fma(-n, exp_c::ln2_hi, x); // fnmadd: -(n*c) + x
    r = std::fma(-n, exp_c::ln2_lo, r);
    float y = exp_c::p0;
    y = std::fma(y, r, exp_c::p1);
    y = std::fma(y, r, exp_c::p2);
    y = std::fma(y, r, exp_c::p3);
    y = std::fma(y, r, exp_c::p4);
    y = std::fma(y, r, exp_c::p5);
    y = std::fma(y, r * r, r + 1.0f);
    const uint32_t e = uint32_t(int32_t(n) + 127) << 23; // n in [-126, 127]: a normal 2^n
    float p2;
    std::memcpy(&p2, &e, sizeof p2);
    y = y * p2;
    if (inf) y = std::numeric_limits<float>::infinity();
    return zero ? 0.0f : y;
}

} // namespace rwd::detail
