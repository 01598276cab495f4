// AVX-512 VNNI body of the packed Q4_K/Q5_K/Q6_K product: 16 rows per zmm, vpdpbusd for the quant dots
// (unsigned quants, at most 63, times signed activations, summed straight into int32), vpmulld for
// the sub-block scales, vpdpwssd for the min/offset sums. Arithmetic as kq_packed_body.h states.
#include "kq_packed_body.h"

namespace rwd::detail {

namespace {

struct Zmm16 {
    using I = __m512i;
    using F = __m512;
    static constexpr int kLanes = 16;
    static constexpr int kSub = 9;
    static I load(const uint8_t* p) { return _mm512_load_si512(p); }
    static I izero() { return _mm512_setzero_si512(); }
    static I set1_8(char c) { return _mm512_set1_epi8(c); }
    static I set1_32(int32_t c) { return _mm512_set1_epi32(c); }
    static I and_(I a, I b) { return _mm512_and_si512(a, b); }
    static I or_(I a, I b) { return _mm512_or_si512(a, b); }
    static I add(I a, I b) { return _mm512_add_epi32(a, b); }
    static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
    static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
    template <int N> static I slli16(I a) { return _mm512_slli_epi16(a, N); }
    template <int N> static I srli16(I a) { return _mm512_srli_epi16(a, N); }
    template <int N> static I slli32(I a) { return _mm512_slli_epi32(a, N); }
    static I widen_u8(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static I widen_i8(const uint8_t* p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static I dot(I acc, I w, int32_t x4) { return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(x4)); }
    static I dotw(I acc, I a, int32_t b2) { return _mm512_dpwssd_epi32(acc, a, _mm512_set1_epi32(b2)); }
    static F scales(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    static F zero() { return _mm512_setzero_ps(); }
    static F set1(float f) { return _mm512_set1_ps(f); }
    static F cvt(I i) { return _mm512_cvtepi32_ps(i); }
    static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    static F loadf(const float* p) { return _mm512_loadu_ps(p); }
    static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
};

} // namespace

void kqp_groups_avx512vnni(const KqPackedJob& job, int64_t g0, int64_t g1) { kq_groups<Zmm16>(job, g0, g1); }

} // namespace rwd::detail
