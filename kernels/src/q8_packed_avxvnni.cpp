// AVX-VNNI body of the packed Q8_0 product: 8 rows per ymm, VEX vpdpbusd on weights offset by 128
// (unsigned) against the signed activations; the offset's 128 x sum(x) is taken off up front.
#include "q8_packed_body.h"

namespace rwd::detail {
namespace {

struct AvxVnni : Ymm8 {
    using P = __m256i;
    static P prep(I w) { return _mm256_xor_si256(w, _mm256_set1_epi8(char(0x80))); } // w + 128
    static I init(int32_t sum) { return _mm256_set1_epi32(-128 * sum); }
    static I dot(I acc, P w, int32_t x4) { return _mm256_dpbusd_avx_epi32(acc, w, _mm256_set1_epi32(x4)); }
};

} // namespace

void q8p_groups_avxvnni(const Q8PackedJob& job, int64_t g0, int64_t g1) { q8p_groups<AvxVnni>(job, g0, g1); }

} // namespace rwd::detail
