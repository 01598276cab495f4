// AVX2 body of the 4/5/6-bit matmul: int8 dot products with maddubs (unsigned weight quants, at
// most 63, times signed activations: pair sums stay below 2 * 63 * 127, no saturation) and madd.
#include "matmul_quant_tiles.h"

#include <cmath>
#include <cstring>

namespace rwd::detail {

namespace {

struct DotAvx2 {
    // Eight int32 lanes whose sum is sum_i w[i] * x[i] over 32 bytes.
    static __m256i dot32(__m256i w, __m256i x) {
        return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
    }
    // Lanes summing to sum over 32-chunks c of sum_k scv[c][k] * (pair k of chunk c's products).
    template <int U>
    static __m256i dot256(const uint8_t* w, const int16_t* scv, const int8_t* x) {
        __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int c = 0; c < U / 32; ++c) {
            const __m256i p = _mm256_maddubs_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(w + 32 * c)),
                                                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * c)));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_load_si256(reinterpret_cast<const __m256i*>(scv + 16 * c))));
        }
        return acc;
    }
};

} // namespace

void quant_rows_avx2(const QuantJob& job, int64_t r0, int64_t r1) { quant_rows<DotAvx2>(job, r0, r1); }

// ggml's Q8_K rule for the 256-blocks (quantize_act), with AVX2: the same comparisons, products
// and round-half-to-even, so the same bytes (the bit-for-bit tests across levels check it).
void quantize_act256_avx2(const float* x, int64_t cols, void* act) {
    auto* a = static_cast<Act256*>(act);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < cols / 256; ++b) {
        const float* xb = x + 256 * b;
        __m256 m = _mm256_setzero_ps();
        // max_ps returns its second operand when either is NaN: a NaN input is skipped, as the
        // scalar rule's `>` skips it.
        for (int i = 0; i < 256; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb + i)), m);
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, m);
        float amax = 0.0f;
        for (float l : lanes) amax = l > amax ? l : amax;
        if (amax == 0.0f) {
            std::memset(&a[b], 0, sizeof(Act256));
            continue;
        }
        // The scalar rule keeps the first value whose magnitude reaches the maximum.
        float vmax = 0.0f;
        for (int i = 0; i < 256; ++i)
            if (std::fabs(xb[i]) == amax) {
                vmax = xb[i];
                break;
            }
        const float iscale = -127.0f / vmax;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
        const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (int i = 0; i < 256; i += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; ++k) {
                const __m256 v = _mm256_round_ps(_mm256_mul_ps(is, _mm256_loadu_ps(xb + i + 8 * k)),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[k] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(v), lo), hi);
            }
            const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(a[b].qs + i), _mm256_permutevar8x32_epi32(p, order));
        }
        for (int k = 0; k < 16; ++k) {
            int s = 0;
            for (int i = 0; i < 16; ++i) s += a[b].qs[16 * k + i];
            a[b].bsums[k] = int16_t(s);
        }
        a[b].d = 1.0f / iscale;
    }
}


} // namespace rwd::detail
