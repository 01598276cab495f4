// Exact scalar models of simd_math_avx2.h's vector math, for the scalar bodies that must give the
// SIMD bodies' bits (attention's softmax, SwiGLU). Plain C++: included by any file, any ISA.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "exp_core.h"

namespace rwd::detail {

// exp_reduced's lane ops on one float: std::fma rounds once, as the vector fmas do.
struct ScalarExpOps {
    static float set1(float c) { return c; }
    static float mul(float a, float b) { return a * b; }
    static float add(float a, float b) { return a + b; }
    static float round(float a) { return std::nearbyint(a); }
    static float fmadd(float a, float b, float c) { return std::fma(a, b, c); }
    static float fnmadd(float a, float b, float c) { return std::fma(-a, b, c); }
};

// exp_avx2 / exp_avx512 lane by lane: the same clamps (max/min as the vector instructions order
// their operands, so NaN clamps to -87), the same rounding of n (nearest even), the same fmas in
// the same order, the same 2^n. It gives exp_avx2's bits for every input.
inline float exp_avx2_model(float x) {
    const float lo = exp_c::lo, hi = exp_c::hi;
    const bool zero = x < lo, inf = x > hi; // ordered compares: false for NaN
    x = x > lo ? x : lo;                    // _mm256_max_ps(x, lo)
    x = x < hi ? x : hi;                    // _mm256_min_ps(x, hi)
    float n;
    float y = exp_reduced<ScalarExpOps>(x, n);
    const uint32_t e = uint32_t(int32_t(n) + 127) << 23; // n in [-126, 127]: a normal 2^n
    float p2;
    std::memcpy(&p2, &e, sizeof p2);
    y = y * p2;
    if (inf) y = std::numeric_limits<float>::infinity();
    return zero ? 0.0f : y;
}

} // namespace rwd::detail
