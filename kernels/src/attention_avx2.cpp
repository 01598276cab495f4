// AVX2+FMA body of attention for a unit of tokens x the heads sharing one KV head (or several
// adjacent KV heads, block by block: attention_heads.h), in the fixed order of attention_impl.h:
// scores as 16-lane dot products held in two vectors (2 query rows x 2 positions per step), the
// vector expf, 16 lane sums as two vectors, and the weighted V sum 8 dimensions per vector (3 rows
// x 32 dimensions per V load).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attention_heads.h"
#include "attention_impl.h"
#include "simd_math_avx2.h"

namespace rwd::detail {

namespace {

static_assert(kAttendBlock % 2 == 0, "scores go 2 positions at a time");

// Lanes j < n set (n clamped to 0 .. 8).
inline __m256i first_lanes(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::clamp<int64_t>(n, 0, 8))), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Up to 8 elements (n of them) of a K/V row from index i, widened to float; other lanes 0.
template <DType T>
inline __m256 load8(const std::byte* row, int64_t i, int64_t n) {
    if (n <= 0) return _mm256_setzero_ps();
    if constexpr (T == DType::F32) {
        const float* p = reinterpret_cast<const float*>(row) + i;
        return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, first_lanes(n));
    } else {
        const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + i;
        if (n >= 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        uint16_t tmp[8] = {};
        std::memcpy(tmp, p, size_t(n) * 2);
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tmp)));
    }
}

// K (kv = 0) or V (kv = 1) rows [p0, p0 + cnt) of the nh KV heads g[0..nh), each head's rows side
// by side as float in its own g[h].pad: pad[j * head_dim + d]. Row j of every head before row j + 1:
// the heads of a unit are adjacent in a cache row, so that is one contiguous read per position.
// (One head's rows lie a whole position apart; read alone, 256 of every 2,048 bytes, they stream
// at a third of the machine's bandwidth.)
template <DType T>
void copy_rows(const AttendGroup* g, int64_t nh, int kv, int64_t p0, int64_t cnt) {
    const AttendGroup& a = g[0];
    const size_t eb = T == DType::F32 ? 4 : 2;
    auto src = [&](int64_t h, int64_t j) { return kv_row(g, h, kv, p0 + j, eb); };
    if constexpr (T == DType::F32) {
        if (a.head_dim % 32 == 0) {
            // 8 loads of a row before its 8 stores, as memcpy does (a load/store loop stalls),
            // without a call per 128-256 bytes.
            for (int64_t j = 0; j < cnt; ++j)
                for (int64_t h = 0; h < nh; ++h) {
                    const std::byte* row = src(h, j);
                    prefetch_next_block(row, g, size_t(a.head_dim) * eb, eb);
                    const auto* s32 = reinterpret_cast<const float*>(row);
                    float* vb = g[h].pad + j * a.head_dim;
                    for (int64_t d = 0; d < a.head_dim; d += 32) {
                        __m256 x[4];
#pragma GCC unroll 4
                        for (int c = 0; c < 4; ++c) x[c] = _mm256_loadu_ps(s32 + d + 8 * c);
#pragma GCC unroll 4
                        for (int c = 0; c < 4; ++c) _mm256_storeu_ps(vb + d + 8 * c, x[c]);
                    }
                }
            return;
        }
        // memcpy of F32 rows was ~3x faster than a vector load/store loop here (cache misses 4 KiB apart).
        for (int64_t j = 0; j < cnt; ++j)
            for (int64_t h = 0; h < nh; ++h) std::memcpy(g[h].pad + j * a.head_dim, src(h, j), size_t(a.head_dim) * 4);
        return;
    }
    if (a.head_dim % 64 == 0) {
        // F16: 8 loads of a row before its 8 stores, as memcpy does (a load/store loop stalls).
        for (int64_t j = 0; j < cnt; ++j)
            for (int64_t h = 0; h < nh; ++h) {
                const std::byte* row = src(h, j);
                prefetch_next_block(row, g, size_t(a.head_dim) * eb, eb);
                const auto* src16 = reinterpret_cast<const __m128i*>(row);
                float* vb = g[h].pad;
                for (int64_t d = 0; d < a.head_dim; d += 64) {
                    __m128i x[8];
#pragma GCC unroll 8
                    for (int c = 0; c < 8; ++c) x[c] = _mm_loadu_si128(src16 + d / 8 + c);
#pragma GCC unroll 8
                    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(vb + j * a.head_dim + d + 8 * c, _mm256_cvtph_ps(x[c]));
                }
            }
        return;
    }
    for (int64_t j = 0; j < cnt; ++j)
        for (int64_t h = 0; h < nh; ++h) {
            float* vb = g[h].pad;
            for (int64_t d = 0; d < a.head_dim; d += 8) {
                const int64_t n = a.head_dim - d;
                const __m256 x = load8<T>(src(h, j), d, n);
                if (n >= 8) _mm256_storeu_ps(vb + j * a.head_dim + d, x);
                else _mm256_maskstore_ps(vb + j * a.head_dim + d, first_lanes(n), x);
            }
        }
}

// Scores of 2 query rows at 2 positions whose K rows (float, copied) start at krow[p]: the 16
// lanes of attention_impl.h as two vectors (lo: i % 16 < 8, hi: the rest), acc = fma(q[i], k[i],
// acc) over i ascending; then lo + hi is the tree's j + j+8 and hsum8 the rest; times scale.
template <bool kTail>
inline void score_2x2(const float* const* q, const float* const* krow, int64_t hd, float scale, float* const* dst) {
    __m256 lo[2][2], hi[2][2];
    for (int r = 0; r < 2; ++r)
        for (int p = 0; p < 2; ++p) lo[r][p] = hi[r][p] = _mm256_setzero_ps();
    const float *q0 = q[0], *q1 = q[1], *k0 = krow[0], *k1 = krow[1];
    // kTail: head_dim is no multiple of 16, the last lanes load as 0 (fma(0, 0, acc) = acc).
    auto ld = [&](const float* p, int64_t i) {
        if constexpr (kTail) return load8<DType::F32>(reinterpret_cast<const std::byte*>(p), i, hd - i);
        else return _mm256_loadu_ps(p + i);
    };
    for (int64_t i = 0; i < hd; i += 16) {
        const __m256 q0l = ld(q0, i), q1l = ld(q1, i), k0l = ld(k0, i), k1l = ld(k1, i);
        lo[0][0] = _mm256_fmadd_ps(q0l, k0l, lo[0][0]);
        lo[0][1] = _mm256_fmadd_ps(q0l, k1l, lo[0][1]);
        lo[1][0] = _mm256_fmadd_ps(q1l, k0l, lo[1][0]);
        lo[1][1] = _mm256_fmadd_ps(q1l, k1l, lo[1][1]);
        const __m256 q0h = ld(q0, i + 8), q1h = ld(q1, i + 8), k0h = ld(k0, i + 8), k1h = ld(k1, i + 8);
        hi[0][0] = _mm256_fmadd_ps(q0h, k0h, hi[0][0]);
        hi[0][1] = _mm256_fmadd_ps(q0h, k1h, hi[0][1]);
        hi[1][0] = _mm256_fmadd_ps(q1h, k0h, hi[1][0]);
        hi[1][1] = _mm256_fmadd_ps(q1h, k1h, hi[1][1]);
    }
    for (int r = 0; r < 2; ++r)
        for (int p = 0; p < 2; ++p) dst[r][p] = hsum8(_mm256_add_ps(lo[r][p], hi[r][p])) * scale;
}

// Scores of every row at positions [pb, pb + cnt) from the float block kb (rows head_dim apart),
// 2 rows x 2 positions at a time; a missing row repeats row 0 into `spare`, a missing position
// repeats the last one into the stride's spare slot.
inline void block_scores(const AttendGroup& a, const float* kb, int64_t pb, int64_t cnt, float* spare) {
    const int64_t rows = a.rows();
    for (int64_t r0 = 0; r0 < rows; r0 += 2) {
        const bool two = r0 + 1 < rows;
        const float* q[2] = {a.q_row(r0), a.q_row(two ? r0 + 1 : r0)};
        float* dst0 = a.scores + r0 * a.score_stride + pb;
        float* dst1 = two ? a.scores + (r0 + 1) * a.score_stride + pb : nullptr;
        for (int64_t p0 = 0; p0 < cnt; p0 += 2) {
            const float* krow[2] = {kb + p0 * a.head_dim, kb + std::min(p0 + 1, cnt - 1) * a.head_dim};
            float* d[2] = {dst0 + p0, two ? dst1 + p0 : spare};
            if (a.head_dim % 16 == 0) score_2x2<false>(q, krow, a.head_dim, a.scale, d);
            else score_2x2<true>(q, krow, a.head_dim, a.scale, d);
        }
    }
}

// out[r][d0 .. d0 + 8C) (last vector masked by `last`) continued over positions [p0, p1) of the
// V block: acc = fma(w[r][p], vb[p][d], acc), p ascending. The accumulators live in `out` between
// blocks, so the sum runs in exactly the order of one long loop.
template <int R, int C>
inline void pv_rows(const float* vb, int64_t hd, int64_t d0, int64_t last_n, const float* const* w, float* const* out,
                    int64_t p0, int64_t p1) {
    const __m256i last = first_lanes(last_n);
    auto ld = [&](const float* p, int c) { return c == C - 1 && last_n < 8 ? _mm256_maskload_ps(p, last) : _mm256_loadu_ps(p); };
    __m256 acc[R][C];
#pragma GCC unroll 3
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) acc[r][c] = ld(out[r] + d0 + 8 * c, c);
    for (int64_t p = p0; p < p1; ++p) {
        const float* vr = vb + p * hd + d0;
#pragma GCC unroll 3
        for (int r = 0; r < R; ++r) {
            const __m256 wb = _mm256_broadcast_ss(w[r] + p);
#pragma GCC unroll 4
            for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wb, ld(vr + 8 * c, c), acc[r][c]);
        }
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
            float* o = out[r] + d0 + 8 * c;
            if (c == C - 1 && last_n < 8) _mm256_maskstore_ps(o, last, acc[r][c]);
            else _mm256_storeu_ps(o, acc[r][c]);
        }
}

// Every dimension of R rows: whole 32-dimension chunks, then one chunk of the rest.
template <int R>
void pv_dims(const float* vb, int64_t hd, const float* const* w, float* const* out, int64_t p0, int64_t p1) {
    int64_t d = 0;
    for (; hd - d >= 32; d += 32) pv_rows<R, 4>(vb, hd, d, 8, w, out, p0, p1);
    const int64_t rest = hd - d;
    if (rest == 0) return;
    const int64_t c = (rest + 7) / 8;
    const int64_t last_n = rest - 8 * (c - 1);
    if (c == 1) pv_rows<R, 1>(vb, hd, d, last_n, w, out, p0, p1);
    else if (c == 2) pv_rows<R, 2>(vb, hd, d, last_n, w, out, p0, p1);
    else if (c == 3) pv_rows<R, 3>(vb, hd, d, last_n, w, out, p0, p1);
    else pv_rows<R, 4>(vb, hd, d, last_n, w, out, p0, p1); // 25 .. 31 dimensions left
}

// One row's scores [0, n) into softmax numerators in place; returns 1 / their sum: 16 lane sums
// as two vectors (positions 16k + 0..7 and 16k + 8..15), then lanes j + j+8 (lo + hi), and
// hsum8's j + j+4, j + j+2, 0 + 1.
inline float softmax_numerators(float* s, int64_t n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 m8 = ninf;
    for (int64_t p = 0; p < n; p += 8) {
        // x first: maxps returns its second operand for a NaN, so NaN scores are skipped as in
        // the scalar model (s > m ? s : m).
        const __m256 x = _mm256_blendv_ps(ninf, _mm256_loadu_ps(s + p), _mm256_castsi256_ps(first_lanes(n - p)));
        m8 = _mm256_max_ps(x, m8);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m8);
    float m = -INFINITY;
    for (int j = 0; j < 8; ++j) m = lanes[j] > m ? lanes[j] : m;
    const __m256 mv = _mm256_set1_ps(m);
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int64_t p = 0; p < n; p += 8) {
        const __m256 e = _mm256_and_ps(_mm256_castsi256_ps(first_lanes(n - p)), exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + p), mv)));
        _mm256_storeu_ps(s + p, e);
        if ((p & 8) == 0) lo = _mm256_add_ps(lo, e);
        else hi = _mm256_add_ps(hi, e);
    }
    return 1.0f / hsum8(_mm256_add_ps(lo, hi));
}

// This body's parts of the shared block loop (attention_heads.h).
struct Avx2 {
    template <DType T>
    static void copy_rows(const AttendGroup* g, int64_t nh, int kv, int64_t p0, int64_t cnt) {
        rwd::detail::copy_rows<T>(g, nh, kv, p0, cnt);
    }
    static void block_scores(const AttendGroup& a, int64_t pb, int64_t cnt) {
        float spare[2];
        rwd::detail::block_scores(a, a.pad, pb, cnt, spare);
    }
    static float softmax_numerators(float* s, int64_t n) { return rwd::detail::softmax_numerators(s, n); }
    // 3 rows per V load.
    static void block_pv(const AttendGroup& a, int64_t pb, int64_t pe) {
        pv_chunks(a, pb, pe, 3, [&](int64_t R, const float* const* w, float* const* out, int64_t p0, int64_t p1) {
            if (R == 3) pv_dims<3>(a.pad, a.head_dim, w, out, p0, p1);
            else if (R == 2) pv_dims<2>(a.pad, a.head_dim, w, out, p0, p1);
            else pv_dims<1>(a.pad, a.head_dim, w, out, p0, p1);
        });
    }
    static void scale_row(float* o, int64_t hd, float inv) {
        for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
    }
};

} // namespace

void attend_heads_avx2(const AttendGroup* g, int64_t nh) {
    if (g[0].kv_type == DType::F32) attend_heads_blocks<Avx2, DType::F32>(g, nh);
    else attend_heads_blocks<Avx2, DType::F16>(g, nh);
}

} // namespace rwd::detail
