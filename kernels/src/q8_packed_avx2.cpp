// AVX2 body of the packed Q8_0 product for CPUs without VNNI: 8 rows per ymm (two per group),
// |w| x (x carrying w's sign) with maddubs, pairs summed to int32 with madd.
#include "q8_packed_body.h"

namespace rwd::detail {
namespace {

struct Avx2 : Ymm8 {
    struct P {
        __m256i a; // |w| as unsigned bytes (-128 -> 128)
        __m256i w;
    };
    static P prep(I w) { return P{_mm256_sign_epi8(w, w), w}; }
    static I init(int32_t) { return _mm256_setzero_si256(); }
    // |x| <= 127: negation is exact and pair sums (<= 2 * 128 * 127) cannot saturate.
    static I dot(I acc, const P& w, int32_t x4) {
        const __m256i sx = _mm256_sign_epi8(_mm256_set1_epi32(x4), w.w);
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w.a, sx), _mm256_set1_epi16(1)));
    }
};

} // namespace

void q8p_groups_avx2(const Q8PackedJob& job, int64_t g0, int64_t g1) { q8p_groups<Avx2>(job, g0, g1); }

} // namespace rwd::detail
