// AVX-512 (F/BW/VL/DQ) matmul body: 16-lane vector traits for the shared tile engine
// (matmul_tiles.h). Q8_0 takes two blocks per step (lanes 0-7: even blocks, 8-15: odd blocks).
// Only entered when detect_simd() reports Avx512.
#include <immintrin.h>

#include "matmul_tiles.h"

namespace rwd::detail {

namespace {

struct Avx512 {
    using F = __m512;
    using I = __m512i;
    static constexpr int kLanes = 16;
    static constexpr int kQ8Blocks = 2;
    // Float tiles: rows per tile for 1..9 tokens, accumulators + the operands kept in registers
    // (min(tokens, rows) + 1) within the 32 zmm registers.
    static constexpr int kMaxTokensFloat = 9;
    static constexpr int kRowsFloat[9] = {12, 10, 7, 6, 5, 4, 3, 3, 3};
    // Q8_0 tiles: rows per tile for 1, 2, 3, 4 tokens (at most 18 accumulators).
    static constexpr int kRowsQ8[4] = {8, 6, 4, 3};

    static F zero() { return _mm512_setzero_ps(); }
    static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
    // Lane sums of four accumulators, each as: fold the 256-bit halves (lane i + lane i+8), then
    // ((0+1)+(2+3)) + ((4+5)+(6+7)) over the folded lanes.
    static __m256 fold(F v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }
    static __m128 reduce4(F a, F b, F c, F d) {
        const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(fold(a), fold(b)), _mm256_hadd_ps(fold(c), fold(d)));
        return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    }
    static F load_x(const float* p) { return _mm512_loadu_ps(p); }
    template <DType T>
    static F load(const std::byte* row, int64_t k) {
        if constexpr (T == DType::F32) {
            return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
        } else if constexpr (T == DType::F16) {
            return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
        } else {
            const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
            return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
        }
    }
    // Blocks b and b+1 (not adjacent in memory: 34-byte blocks) in the low and high halves.
    static I q8_load(const BlockQ8_0* b) {
        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[0].qs));
        const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[1].qs));
        return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    static F q8_scale(const BlockQ8_0* b) {
        return _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(b[0].d)), _mm256_set1_ps(_cvtsh_ss(b[1].d)), 1);
    }
    // The last block of an odd count: low half only, high half zero.
    static I q8_load_one(const BlockQ8_0* b) {
        return _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs)));
    }
    static F q8_scale_one(const BlockQ8_0* b) { return _mm512_zextps256_ps512(_mm256_set1_ps(_cvtsh_ss(b->d))); }
    // fma on lanes 0-7 only; lanes 8-15 keep acc exactly.
    static F fma_low(F a, F b, F acc) { return _mm512_mask3_fmadd_ps(a, b, acc, __mmask16(0x00ff)); }
    static I q8_abs(I w) { return _mm512_abs_epi8(w); } // |w| as unsigned bytes (-128 -> 128)
    // Exact int8 x int8 products summed into 16 int32 lanes (lane j: 4 adjacent products), as
    // float: |w| times x carrying w's sign. AVX-512 has no vpsignb, so x is negated where w < 0
    // (where w = 0 the product is 0 either way). |x| <= 127: negation is exact and the pairwise
    // int16 sums (<= 2 * 128 * 127) cannot saturate.
    static F q8_dot(I aw, I w, I x) {
        const __m512i sx = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
        const __m512i p16 = _mm512_maddubs_epi16(aw, sx);
        return _mm512_cvtepi32_ps(_mm512_madd_epi16(p16, _mm512_set1_epi16(1)));
    }
};

} // namespace

void matmul_rows_avx512(const MatmulJob& job, int64_t r0, int64_t r1) { matmul_rows<Avx512>(job, r0, r1); }

} // namespace rwd::detail
