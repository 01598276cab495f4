// AVX-512 (F/BW) body of the packed Q8_0 product for CPUs without VNNI: 16 rows per zmm,
// |w| x (x carrying w's sign) with maddubs, pairs summed to int32 with madd.
#include "q8_packed_body.h"

namespace rwd::detail {
namespace {

struct Avx512 {
    using F = __m512;
    using I = __m512i;
    struct P {
        __m512i a;     // |w| as unsigned bytes (-128 -> 128)
        __mmask64 neg; // w < 0
    };
    static constexpr int kLanes = 16;
    static I load(const int8_t* p) { return _mm512_loadu_si512(p); }
    static P prep(I w) { return P{_mm512_abs_epi8(w), _mm512_movepi8_mask(w)}; }
    static I init(int32_t) { return _mm512_setzero_si512(); }
    // |x| <= 127: negation is exact and pair sums (<= 2 * 128 * 127) cannot saturate.
    static I dot(I acc, const P& w, int32_t x4) {
        const __m512i x = _mm512_set1_epi32(x4);
        const __m512i sx = _mm512_mask_sub_epi8(x, w.neg, _mm512_setzero_si512(), x);
        return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w.a, sx), _mm512_set1_epi16(1)));
    }
    static F scales(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    static F zero() { return _mm512_setzero_ps(); }
    static F set1(float f) { return _mm512_set1_ps(f); }
    static F cvt(I i) { return _mm512_cvtepi32_ps(i); }
    static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
};

} // namespace

void q8p_groups_avx512(const Q8PackedJob& job, int64_t g0, int64_t g1) { q8p_groups<Avx512>(job, g0, g1); }

} // namespace rwd::detail
