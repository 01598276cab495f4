// AVX2 body of the 4/5/6-bit matmul: int8 dot products with maddubs (unsigned weight quants, at
// most 63, times signed activations: pair sums stay below 2 * 63 * 127, no saturation) and madd.
#include "matmul_quant_tiles.h"

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

} // namespace rwd::detail
