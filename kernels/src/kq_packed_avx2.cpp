// AVX2 body of the packed Q4_K/Q6_K product: 8 rows per ymm (a group of 16 is two), maddubs + madd
// for the quant dots (quants at most 63 times activations of at most 127 in magnitude: pair sums
// below 2 * 63 * 127, no saturation), vpmulld for the sub-block scales, madd for the min/offset
// sums. Arithmetic as kq_packed_body.h states.
#include "kq_packed_body.h"

namespace rwd::detail {

namespace {

struct Ymm8 {
    using I = __m256i;
    using F = __m256;
    static constexpr int kLanes = 8;
    static constexpr int kSub = 6;
    static constexpr bool kI16Sums = true; // Q4_K: sub-block dots summed in int16 (see kq_tile)
    static I maddubs(I w, int32_t x4) { return _mm256_maddubs_epi16(w, _mm256_set1_epi32(x4)); }
    static I add16(I a, I b) { return _mm256_add_epi16(a, b); }
    static I madd(I a, I b) { return _mm256_madd_epi16(a, b); }
    static I load(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
    static I izero() { return _mm256_setzero_si256(); }
    static I set1_8(char c) { return _mm256_set1_epi8(c); }
    static I set1_32(int32_t c) { return _mm256_set1_epi32(c); }
    static I and_(I a, I b) { return _mm256_and_si256(a, b); }
    static I or_(I a, I b) { return _mm256_or_si256(a, b); }
    static I add(I a, I b) { return _mm256_add_epi32(a, b); }
    static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
    static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
    template <int N> static I slli16(I a) { return _mm256_slli_epi16(a, N); }
    template <int N> static I srli16(I a) { return _mm256_srli_epi16(a, N); }
    template <int N> static I slli32(I a) { return _mm256_slli_epi32(a, N); }
    static I widen_u8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
    static I widen_i8(const uint8_t* p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
    static I dot(I acc, I w, int32_t x4) {
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, _mm256_set1_epi32(x4)), _mm256_set1_epi16(1)));
    }
    static I dotw(I acc, I a, int32_t b2) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, _mm256_set1_epi32(b2))); }
    static F scales(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static F zero() { return _mm256_setzero_ps(); }
    static F set1(float f) { return _mm256_set1_ps(f); }
    static F cvt(I i) { return _mm256_cvtepi32_ps(i); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
};

} // namespace

void kqp_groups_avx2(const KqPackedJob& job, int64_t g0, int64_t g1) { kq_groups<Ymm8>(job, g0, g1); }

} // namespace rwd::detail
