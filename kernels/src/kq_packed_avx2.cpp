// AVX2 body of the packed Q4_K/Q5_K/Q6_K product (CPUs without VNNI): 8 rows per ymm, maddubs pair
// sums added in int16 where they cannot overflow, madd to apply the sub-block scales. Engine and
// tile shape: kq_packed_ymm.h.
#include "kq_packed_ymm.h"

namespace rwd::detail {

namespace {

inline __m256i mb(__m256i w, const int8_t* x) { return _mm256_maddubs_epi16(w, bcast4(x)); }

struct Avx2Dot {
    // (s, s) in the two int16 halves of each lane, from int32 lanes holding small s (|s| < 2^15).
    static __m256i scale(__m256i s) { return _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(s, 16)); }
    // maddubs pair sums of 4-bit quants are at most 2 * 15 * 127 in magnitude, so all eight add up
    // exactly in int16 (<= 30480); one madd applies sc_j.
    static __m256i q4(const __m256i w[8], const int8_t* x, __m256i s) {
        const __m256i p = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(mb(w[0], x), mb(w[1], x + 4)),
                                                            _mm256_add_epi16(mb(w[2], x + 8), mb(w[3], x + 12))),
                                           _mm256_add_epi16(_mm256_add_epi16(mb(w[4], x + 16), mb(w[5], x + 20)),
                                                            _mm256_add_epi16(mb(w[6], x + 24), mb(w[7], x + 28))));
        return _mm256_madd_epi16(p, s);
    }
    // 5-bit quants: pair sums up to 2 * 31 * 127, so four of them (16 columns) fit int16
    // (<= 31496); a madd per half applies sc_j.
    static __m256i q5(const __m256i w[8], const int8_t* x, __m256i s) {
        const __m256i p0 = _mm256_add_epi16(_mm256_add_epi16(mb(w[0], x), mb(w[1], x + 4)),
                                            _mm256_add_epi16(mb(w[2], x + 8), mb(w[3], x + 12)));
        const __m256i p1 = _mm256_add_epi16(_mm256_add_epi16(mb(w[4], x + 16), mb(w[5], x + 20)),
                                            _mm256_add_epi16(mb(w[6], x + 24), mb(w[7], x + 28)));
        return _mm256_add_epi32(_mm256_madd_epi16(p0, s), _mm256_madd_epi16(p1, s));
    }
    // 6-bit quants: pair sums up to 2 * 63 * 127, so two of them (one 8-column half of a 16-column
    // sub-block) still fit int16 before madd applies sc.
    static __m256i q6(const __m256i w[8], const int8_t* x, __m256i s0, __m256i s1) {
        const __m256i p0 = _mm256_add_epi16(mb(w[0], x), mb(w[1], x + 4));
        const __m256i p1 = _mm256_add_epi16(mb(w[2], x + 8), mb(w[3], x + 12));
        const __m256i p2 = _mm256_add_epi16(mb(w[4], x + 16), mb(w[5], x + 20));
        const __m256i p3 = _mm256_add_epi16(mb(w[6], x + 24), mb(w[7], x + 28));
        return _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(p0, s0), _mm256_madd_epi16(p1, s0)),
                                _mm256_add_epi32(_mm256_madd_epi16(p2, s1), _mm256_madd_epi16(p3, s1)));
    }
};

} // namespace

void kqp_groups_avx2(const KqPackedJob& job, int64_t g0, int64_t g1) {
    if (job.type == DType::Q4_K) kq_groups_ymm<Avx2Dot, DType::Q4_K>(job, g0, g1);
    else if (job.type == DType::Q5_K) kq_groups_ymm<Avx2Dot, DType::Q5_K>(job, g0, g1);
    else if (job.n_tokens == 1) {
        alignas(64) float part[kKqPackRows]; // unused: the whole group in one sweep
        for (int64_t g = g0; g < g1; ++g) kq_tile<Ymm8, DType::Q6_K, 1>(job, g, 0, 0, job.nb, part);
    }
    else kq_groups_ymm<Avx2Dot, DType::Q6_K>(job, g0, g1);
}

} // namespace rwd::detail
