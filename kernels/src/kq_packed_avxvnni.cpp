// AVX-VNNI body of the packed Q4_K/Q5_K/Q6_K product: 8 rows per ymm, VEX vpdpbusd for the quant dots
// (unsigned quants, at most 63, times signed activations, summed straight into int32), vpmulld for
// the sub-block scales. Engine and tile shape: kq_packed_ymm.h.
#include "kq_packed_ymm.h"

namespace rwd::detail {

namespace {

struct AvxVnniDot {
    static __m256i scale(__m256i s) { return s; }
    // Two chains per sum, so a token's dot waits on four vpdpbusd latencies, not eight.
    static __m256i q4(const __m256i w[8], const int8_t* x, __m256i s) {
        __m256i p0 = _mm256_setzero_si256(), p1 = _mm256_setzero_si256();
        for (int c = 0; c < 8; c += 2) {
            p0 = _mm256_dpbusd_avx_epi32(p0, w[c], bcast4(x + 4 * c));
            p1 = _mm256_dpbusd_avx_epi32(p1, w[c + 1], bcast4(x + 4 * c + 4));
        }
        return _mm256_mullo_epi32(_mm256_add_epi32(p0, p1), s);
    }
    static __m256i q5(const __m256i w[8], const int8_t* x, __m256i s) { return q4(w, x, s); } // int32 sums: any width
    static __m256i q6(const __m256i w[8], const int8_t* x, __m256i s0, __m256i s1) {
        __m256i p0 = _mm256_setzero_si256(), p1 = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c) {
            p0 = _mm256_dpbusd_avx_epi32(p0, w[c], bcast4(x + 4 * c));
            p1 = _mm256_dpbusd_avx_epi32(p1, w[c + 4], bcast4(x + 16 + 4 * c));
        }
        return _mm256_add_epi32(_mm256_mullo_epi32(p0, s0), _mm256_mullo_epi32(p1, s1));
    }
};

} // namespace

void kqp_groups_avxvnni(const KqPackedJob& job, int64_t g0, int64_t g1) {
    if (job.type == DType::Q4_K) kq_groups_ymm<AvxVnniDot, DType::Q4_K>(job, g0, g1);
    else if (job.type == DType::Q5_K) kq_groups_ymm<AvxVnniDot, DType::Q5_K>(job, g0, g1);
    else kq_groups_ymm<AvxVnniDot, DType::Q6_K>(job, g0, g1);
}

} // namespace rwd::detail
