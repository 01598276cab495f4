// AVX2+FMA body of ggml's dot product order (ggml_compat_impl.h): a 16-lane AVX-512 accumulator
// is two 8-lane ones here; FMA is the same IEEE operation lane by lane, so the bits match the
// scalar emulation and the AVX-512 build of ggml.
#include <immintrin.h>

#include "ggml_compat_impl.h"

namespace rwd::detail {

float ggml_dot_avx2(const float* x, const float* w, int64_t cols) {
    const int64_t np = cols & ~(kGgmlDotStep - 1);
    // acc[2a] holds lanes 0..7 of ggml's accumulator a, acc[2a+1] lanes 8..15.
    __m256 acc[8];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (int64_t i = 0; i < np; i += kGgmlDotStep)
        for (int j = 0; j < 8; ++j)
            acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j), _mm256_loadu_ps(w + i + 8 * j), acc[j]);
    // Accumulators: 0 += 2, 1 += 3, then 0 += 1.
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
    // 16 lanes: upper half + lower half, then again on 4 lanes, then (0+2) + (1+3).
    const __m256 s8 = _mm256_add_ps(hi, lo);
    const __m128 s4 = _mm_add_ps(_mm256_extractf128_ps(s8, 1), _mm256_castps256_ps128(s8));
    alignas(16) float v[4];
    _mm_store_ps(v, s4);
    double sum = double((v[0] + v[2]) + (v[1] + v[3]));
    for (int64_t k = np; k < cols; ++k) sum += double(x[k] * w[k]);
    return float(sum);
}

float tinyblas_dot_avx2(const float* x, const float* w, int64_t cols) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps(); // lanes 0..7 and 8..15
    for (int64_t i = 0; i < cols; i += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), hi);
    }
    const __m256 s8 = _mm256_add_ps(hi, lo);
    const __m128 s4 = _mm_add_ps(_mm256_extractf128_ps(s8, 1), _mm256_castps256_ps128(s8));
    alignas(16) float v[4];
    _mm_store_ps(v, s4);
    return (v[0] + v[2]) + (v[1] + v[3]);
}

} // namespace rwd::detail
