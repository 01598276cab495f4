// Vector math shared by the AVX2 kernels: a Cephes-style expf and a fixed-order horizontal sum.
// Included only by *_avx2.cpp and *_avx512.cpp files (anonymous namespace: never merged with code
// built for other ISAs).
#pragma once
#include <immintrin.h>

#include "exp_core.h"

namespace rwd::detail {
namespace {

// exp_reduced's lane ops on 8 floats.
struct Avx2ExpOps {
    static __m256 set1(float c) { return _mm256_set1_ps(c); }
    static __m256 mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
    static __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
    static __m256 round(__m256 a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static __m256 fmadd(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
    static __m256 fnmadd(__m256 a, __m256 b, __m256 c) { return _mm256_fnmadd_ps(a, b, c); }
};

// exp(x) for 8 floats, about 1-2 ulp: x = n*ln2 + r with n = round(x*log2(e)) and ln2 split in
// two parts so r is accurate, a degree-6 polynomial for e^r, and 2^n built in the exponent bits.
// Below -87 the result is 0 (so -inf gives 0); above 88.376 (where 2^n would leave the normal
// range) it is +inf, as expf overflows.
inline __m256 exp_avx2(__m256 x) {
    const __m256 lo = _mm256_set1_ps(exp_c::lo);
    const __m256 hi = _mm256_set1_ps(exp_c::hi);
    const __m256 zero_mask = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    const __m256 inf_mask = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n;
    __m256 y = exp_reduced<Avx2ExpOps>(x, n);
    // n is in [-126, 127] after the clamp, so 2^n is a normal float.
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), inf_mask);
    return _mm256_andnot_ps(zero_mask, y);
}

// Fixed pairwise reduction of 8 lanes: 128-bit halves, then (0+2, 1+3), then 0+1.
inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

} // namespace
} // namespace rwd::detail
