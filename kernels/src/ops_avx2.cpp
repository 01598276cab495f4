// AVX2 bodies of the element-wise ops whose scalar cost matters in a pass: SwiGLU (one exp per
// FFN element). Every element goes through the same vector code (the tail via a padded copy), so
// an element's value never depends on its index or on n.
#include <immintrin.h>

#include <cstring>

#include "ops_impl.h"
#include "simd_math_avx2.h"

namespace rwd::detail {

namespace {

// silu(g) * u = (g / (1 + exp(-g))) * u, 8 at a time.
inline __m256 swiglu8(__m256 g, __m256 u) {
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

} // namespace

void swiglu_avx2(const float* gate, const float* up, int64_t n, float* out) {
    const int64_t n8 = n & ~int64_t(7);
    for (int64_t i = 0; i < n8; i += 8)
        _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (n8 < n) {
        float g[8] = {}, u[8] = {}, o[8];
        std::memcpy(g, gate + n8, size_t(n - n8) * sizeof(float));
        std::memcpy(u, up + n8, size_t(n - n8) * sizeof(float));
        _mm256_storeu_ps(o, swiglu8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        std::memcpy(out + n8, o, size_t(n - n8) * sizeof(float));
    }
}

} // namespace rwd::detail
