// AVX2 body of the packed Q8_0 product for CPUs without VNNI: 8 rows per ymm (two per group),
// |w| x (x carrying w's sign) with maddubs, pairs summed to int32 with madd. Arithmetic as
// q8_packed_body.h states (exact int32 block dot, then s = fma(float(isum), d_w * d_x, s)).
// The tile shape is this body's own: with 16 ymm registers, the shared engine's tile (|w| and w
// for both 8-row halves, 32 vectors, plus per-token sums) is all spills. Here one half's eight
// |w| vectors stay in registers, w is read from L1 as vpsignb's memory operand, and every token of
// the tile takes its block dot against them; the float sums live in a small L1 array. M: the
// matrix has offsets (Q4_1 / Q5_1), a second fma per block.
#include <immintrin.h>

#include "q8_packed_impl.h"
#include "ymm_rows16.h"

namespace rwd::detail {
namespace {

template <bool M>
void q8p_tile_avx2(const Q8PackedJob& job, int64_t g, int64_t t0, int64_t nt) {
    const int64_t nb = job.nb, n = job.x.n_tokens;
    const std::byte* grp = job.w + size_t(g) * job.group_bytes;
    const auto* qs = reinterpret_cast<const int8_t*>(grp);
    const uint16_t* sc = q8p_scales(job, grp);
    const uint16_t* mn = q8p_mins(job, grp);
    const __m256i ones = _mm256_set1_epi16(1);

    alignas(32) __m256 acc[kWidePassTokens][2]; // [token][half]
    for (int64_t t = 0; t < nt; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();

    for (int64_t b = 0; b < nb; ++b) {
        const int8_t* wb = qs + b * kQ8PackBlockBytes;
        // 8 KiB ahead, every line (as q8_packed_body.h's engine).
        for (int l = 0; l < 8; ++l) _mm_prefetch(reinterpret_cast<const char*>(wb + 16 * kQ8PackBlockBytes + 64 * l), _MM_HINT_T0);
#pragma GCC unroll 1
        for (int v = 0; v < 2; ++v) {
            const int8_t* wv = wb + v * 32; // [8 column groups, 64 bytes apart][8 rows][4]
            __m256i a[8];
            for (int q = 0; q < 8; ++q) {
                const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(wv + 64 * q));
                a[q] = _mm256_sign_epi8(w, w); // |w| as unsigned bytes (-128 -> 128)
            }
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + b * kQ8PackRows + v * 8)));
            __m256 mw = _mm256_setzero_ps();
            if constexpr (M) mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mn + b * kQ8PackRows + v * 8)));
            const int8_t* xb = job.x.qs + (b * n + t0) * 32;
            const float* dx = job.x.d + b * n + t0;
            const int32_t* xs = job.x.sum + b * n + t0;
#pragma GCC unroll 1
            for (int64_t t = 0; t < nt; ++t, xb += 32) {
                // |x| <= 127: negation is exact and pair sums (<= 2 * 128 * 127) cannot saturate.
                __m256i p[8];
                for (int q = 0; q < 8; ++q) {
                    const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(wv + 64 * q));
                    p[q] = _mm256_madd_epi16(_mm256_maddubs_epi16(a[q], _mm256_sign_epi8(bcast4(xb + 4 * q), w)), ones);
                }
                const __m256i is = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3])),
                                                    _mm256_add_epi32(_mm256_add_epi32(p[4], p[5]), _mm256_add_epi32(p[6], p[7])));
                const __m256 dxt = _mm256_set1_ps(dx[t]);
                acc[t][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, dxt), acc[t][v]);
                if constexpr (M) acc[t][v] = _mm256_fmadd_ps(_mm256_set1_ps(float(xs[t])), _mm256_mul_ps(mw, dxt), acc[t][v]);
            }
        }
    }

    const int64_t r0 = g * kQ8PackRows;
    const int64_t nr = job.rows - r0 < kQ8PackRows ? job.rows - r0 : kQ8PackRows;
    static_assert(kQ8PackRows == 16, "store_rows16 writes 16-row groups");
    for (int64_t t = 0; t < nt; ++t) store_rows16(job.y + (t0 + t) * job.rows + r0, acc[t][0], acc[t][1], nr);
}

} // namespace

void q8p_groups_avx2(const Q8PackedJob& job, int64_t g0, int64_t g1) {
    const int64_t n = job.x.n_tokens;
    const int64_t per = even_part(n, kWidePassTokens);
    for (int64_t g = g0; g < g1; ++g)
        for (int64_t t0 = 0; t0 < n; t0 += per) {
            const int64_t nt = t0 + per < n ? per : n - t0;
            if (job.mins) q8p_tile_avx2<true>(job, g, t0, nt);
            else q8p_tile_avx2<false>(job, g, t0, nt);
        }
}

} // namespace rwd::detail
