// AVX-512 VNNI body of the 4/5/6-bit matmul: vpdpbusd for the 32-blocks (unsigned weight quants
// times signed activations, summed straight into int32) and, for the K-quants, 512-bit maddubs
// with vpdpwssd applying the per-16 scales, two 32-chunks per instruction. The int sums equal the
// other bodies' exactly; the float steps are the shared ones of matmul_quant_tiles.h.
#include "matmul_quant_tiles.h"

namespace rwd::detail {

namespace {

struct DotVnni {
    static __m256i dot32(__m256i w, __m256i x) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x); }
    template <int U>
    static __m256i dot256(const uint8_t* w, const int16_t* scv, const int8_t* x) {
        __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < U / 32; c += 2) {
            const __m512i p = _mm512_maddubs_epi16(_mm512_load_si512(w + 32 * c), _mm512_loadu_si512(x + 32 * c));
            acc = _mm512_dpwssd_epi32(acc, p, _mm512_load_si512(scv + 16 * c));
        }
        return _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1));
    }
};

} // namespace

void quant_rows_avx512vnni(const QuantJob& job, int64_t r0, int64_t r1) { quant_rows<DotVnni>(job, r0, r1); }

} // namespace rwd::detail
