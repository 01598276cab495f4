// AVX-VNNI body of the packed Q8_0 product: 8 rows per ymm, VEX vpdpbusd on weights offset by 128
// (unsigned) against the signed activations; the offset's 128 x sum(x) is taken off up front.
#include "q8_packed_body.h"

namespace rwd::detail {
namespace {

struct AvxVnni {
    using F = __m256;
    using I = __m256i;
    using P = __m256i;
    static constexpr int kLanes = 8;
    static I load(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
    static P prep(I w) { return _mm256_xor_si256(w, _mm256_set1_epi8(char(0x80))); } // w + 128
    static I init(int32_t sum) { return _mm256_set1_epi32(-128 * sum); }
    static I dot(I acc, P w, int32_t x4) { return _mm256_dpbusd_avx_epi32(acc, w, _mm256_set1_epi32(x4)); }
    static F scales(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static F zero() { return _mm256_setzero_ps(); }
    static F set1(float f) { return _mm256_set1_ps(f); }
    static F cvt(I i) { return _mm256_cvtepi32_ps(i); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
};

} // namespace

void q8p_groups_avxvnni(const Q8PackedJob& job, int64_t g0, int64_t g1) { q8p_groups<AvxVnni>(job, g0, g1); }

} // namespace rwd::detail
