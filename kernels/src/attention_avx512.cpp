// AVX-512 body of attention for a unit of tokens x the heads sharing one KV head (or several
// adjacent KV heads, block by block: attention_heads.h), in the fixed order of attention_impl.h:
// scores as 16-lane dot products, 4 query rows x 4 positions per step, reduced 16 at a time; the
// vector expf and 16 lane sums; the weighted V sum 16 dimensions per vector (up to 3 rows x 128
// dimensions in registers per V load).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attention_heads.h"
#include "attention_impl.h"
#include "simd_math_avx2.h"

namespace rwd::detail {

namespace {

static_assert(kAttendBlock % 4 == 0, "scores go 4 positions at a time");

inline __mmask16 first_lanes(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }

// Up to 16 elements of a K/V row from index i (mask m), widened to float; other lanes 0.
template <DType T>
inline __m512 load16(const std::byte* row, int64_t i, __mmask16 m) {
    if constexpr (T == DType::F32) return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + i);
    else return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + i));
}

// K (kv = 0) or V (kv = 1) rows [p0, p0 + cnt) of the nh KV heads g[0..nh), each head's rows side
// by side as float in its own g[h].pad: pad[j * head_dim + d]. Row j of every head before row
// j + 1: the heads of a unit are adjacent in a cache row, so that is one contiguous read per
// position (one head alone reads head_dim of every n_head_kv * head_dim elements).
template <DType T>
void copy_rows(const AttendGroup* g, int64_t nh, int kv, int64_t p0, int64_t cnt) {
    const int64_t hd = g[0].head_dim;
    const size_t eb = T == DType::F32 ? 4 : 2;
    if constexpr (T == DType::F32) {
        if (hd % 64 == 0) {
            // 4 loads of a row before its 4 stores, as memcpy does, without a call per row.
            for (int64_t j = 0; j < cnt; ++j)
                for (int64_t h = 0; h < nh; ++h) {
                    const std::byte* row = kv_row(g, h, kv, p0 + j, eb);
                    prefetch_next_block(row, g, size_t(hd) * eb, eb);
                    const auto* src = reinterpret_cast<const float*>(row);
                    float* vb = g[h].pad + j * hd;
                    for (int64_t d = 0; d < hd; d += 64) {
                        __m512 x[4];
#pragma GCC unroll 4
                        for (int c = 0; c < 4; ++c) x[c] = _mm512_loadu_ps(src + d + 16 * c);
#pragma GCC unroll 4
                        for (int c = 0; c < 4; ++c) _mm512_storeu_ps(vb + d + 16 * c, x[c]);
                    }
                }
            return;
        }
        for (int64_t j = 0; j < cnt; ++j)
            for (int64_t h = 0; h < nh; ++h) std::memcpy(g[h].pad + j * hd, kv_row(g, h, kv, p0 + j, eb), size_t(hd) * 4);
        return;
    }
    if (hd % 64 == 0) {
        // F16: 4 loads of a row before its 4 stores, as memcpy does (a load/store loop stalls).
        for (int64_t j = 0; j < cnt; ++j)
            for (int64_t h = 0; h < nh; ++h) {
                const std::byte* row = kv_row(g, h, kv, p0 + j, eb);
                prefetch_next_block(row, g, size_t(hd) * eb, eb);
                const auto* src16 = reinterpret_cast<const __m256i*>(row);
                float* vb = g[h].pad + j * hd;
                for (int64_t d = 0; d < hd; d += 64) {
                    __m256i x[4];
#pragma GCC unroll 4
                    for (int c = 0; c < 4; ++c) x[c] = _mm256_loadu_si256(src16 + d / 16 + c);
#pragma GCC unroll 4
                    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(vb + d + 16 * c, _mm512_cvtph_ps(x[c]));
                }
            }
        return;
    }
    for (int64_t j = 0; j < cnt; ++j)
        for (int64_t h = 0; h < nh; ++h)
            for (int64_t d = 0; d < hd; d += 16) {
                const __mmask16 m = first_lanes(hd - d);
                _mm512_mask_storeu_ps(g[h].pad + j * hd + d, m, load16<T>(kv_row(g, h, kv, p0 + j, eb), d, m));
            }
}

// 16 vectors to 16 sums, each summed by the tree of attention_impl.h (lanes j + j+8, j + j+4,
// j + j+2, 0 + 1), for all 16 at once: z[4b + k] is the sum of a[4k + b].
inline __m512 reduce16(const __m512 a[16]) {
    __m512 c[8], e[4], g[2];
    for (int k = 0; k < 8; ++k)
        c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44), _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xEE));
    for (int k = 0; k < 4; ++k)
        e[k] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0x88), _mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0xDD));
    for (int k = 0; k < 2; ++k)
        g[k] = _mm512_add_ps(_mm512_shuffle_ps(e[2 * k], e[2 * k + 1], 0x44), _mm512_shuffle_ps(e[2 * k], e[2 * k + 1], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], 0x88), _mm512_shuffle_ps(g[0], g[1], 0xDD));
}

// Scores of 4 query rows at 4 positions whose K rows (float) start at krow[p]: 16 lane sums acc = fma(q[i], k[i], acc) over
// i ascending (lane i % 16), then the tree; times scale into dst[r][p].
// kSteps > 0: head_dim is exactly 16 * kSteps (unrolled, no masks); 0: any head_dim.
template <int kSteps>
__attribute__((always_inline)) inline void score_4x4(const float* const* q, const std::byte* const* krow, int64_t hd,
                                                     __m512 scale, float* const* dst) {
    if constexpr (kSteps > 0) hd = 16 * kSteps;
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) acc[r][p] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int64_t i = 0; i < hd; i += 16) {
        const __mmask16 m = kSteps > 0 ? __mmask16(0xFFFF) : first_lanes(hd - i);
        __m512 qv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) qv[r] = _mm512_maskz_loadu_ps(m, q[r] + i);
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            const __m512 kv = load16<DType::F32>(krow[p], i, m);
#pragma GCC unroll 4
            for (int r = 0; r < 4; ++r) acc[r][p] = _mm512_fmadd_ps(qv[r], kv, acc[r][p]);
        }
    }
    __m512 a[16];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k)
#pragma GCC unroll 4
        for (int b = 0; b < 4; ++b) a[4 * k + b] = acc[b][k]; // z[4r + p] = score of row r, position p
    const __m512 z = _mm512_mul_ps(reduce16(a), scale);
    _mm_storeu_ps(dst[0], _mm512_castps512_ps128(z));
    _mm_storeu_ps(dst[1], _mm512_extractf32x4_ps(z, 1));
    _mm_storeu_ps(dst[2], _mm512_extractf32x4_ps(z, 2));
    _mm_storeu_ps(dst[3], _mm512_extractf32x4_ps(z, 3));
}

// Scores of every row at positions [pb, pb + cnt) from float K rows at `k`, `rs` bytes apart,
// 4 rows x 4 positions at a time. Missing rows of the last group repeat row 0 into `spare`;
// positions past cnt repeat the last row, and their scores land in the stride's spare slots.
template <int kSteps>
void block_scores(const AttendGroup& a, const std::byte* k, size_t rs, int64_t pb, int64_t cnt, __m512 scale, float* spare) {
    const int64_t rows = a.rows();
    for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        const float* q[4];
        float* dst[4];
        for (int64_t r = 0; r < 4; ++r) {
            const bool real = r0 + r < rows;
            q[r] = a.q_row(real ? r0 + r : 0);
            dst[r] = real ? a.scores + (r0 + r) * a.score_stride + pb : spare;
        }
        for (int64_t p0 = 0; p0 < cnt; p0 += 4) {
            const std::byte* krow[4];
            for (int64_t p = 0; p < 4; ++p) krow[p] = k + size_t(std::min(p0 + p, cnt - 1)) * rs;
            float* d[4];
            for (int64_t r = 0; r < 4; ++r) d[r] = dst[r] == spare ? spare : dst[r] + p0;
            score_4x4<kSteps>(q, krow, a.head_dim, scale, d);
        }
    }
}

// out[r][d0 .. d0 + 16C) (last vector masked by `last`) continued over positions [p0, p1) of the
// V block: acc = fma(w[r][p], vb[p][d], acc), p ascending. The accumulators live in `out` between
// blocks, so the sum runs in exactly the order of one long loop.
template <int R, int C>
inline void pv_rows(const float* vb, int64_t hd, int64_t d0, __mmask16 last, const float* const* w, float* const* out,
                    int64_t p0, int64_t p1) {
    __m512 acc[R][C];
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_maskz_loadu_ps(c == C - 1 ? last : __mmask16(0xFFFF), out[r] + d0 + 16 * c);
    for (int64_t p = p0; p < p1; ++p) {
        const float* vr = vb + p * hd + d0;
        __m512 vv[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) vv[c] = _mm512_maskz_loadu_ps(c == C - 1 ? last : __mmask16(0xFFFF), vr + 16 * c);
#pragma GCC unroll 6
        for (int r = 0; r < R; ++r) {
            const __m512 wb = _mm512_set1_ps(w[r][p]);
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(wb, vv[c], acc[r][c]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(out[r] + d0 + 16 * c, c == C - 1 ? last : __mmask16(0xFFFF), acc[r][c]);
}

// Every dimension of R rows: whole 128-dimension chunks, then one chunk of the rest (last vector masked).
template <int R>
void pv_dims(const float* vb, int64_t hd, const float* const* w, float* const* out, int64_t p0, int64_t p1) {
    if constexpr (R > 3) {
        // More rows only where at most 4 vectors per row fit in registers (head_dim <= 64).
        const int64_t c = (hd + 15) / 16;
        const __mmask16 last = first_lanes(hd - 16 * (c - 1));
        switch (c) {
        case 1: pv_rows<R, 1>(vb, hd, 0, last, w, out, p0, p1); break;
        case 2: pv_rows<R, 2>(vb, hd, 0, last, w, out, p0, p1); break;
        case 3: pv_rows<R, 3>(vb, hd, 0, last, w, out, p0, p1); break;
        default: pv_rows<R, 4>(vb, hd, 0, last, w, out, p0, p1); break;
        }
        return;
    }
    int64_t d = 0;
    for (; hd - d >= 128; d += 128) pv_rows<R, 8>(vb, hd, d, 0xFFFF, w, out, p0, p1);
    const int64_t rest = hd - d;
    if (rest == 0) return;
    const int64_t c = (rest + 15) / 16;
    const __mmask16 last = first_lanes(rest - 16 * (c - 1));
    switch (c) {
    case 1: pv_rows<R, 1>(vb, hd, d, last, w, out, p0, p1); break;
    case 2: pv_rows<R, 2>(vb, hd, d, last, w, out, p0, p1); break;
    case 3: pv_rows<R, 3>(vb, hd, d, last, w, out, p0, p1); break;
    case 4: pv_rows<R, 4>(vb, hd, d, last, w, out, p0, p1); break;
    case 5: pv_rows<R, 5>(vb, hd, d, last, w, out, p0, p1); break;
    case 6: pv_rows<R, 6>(vb, hd, d, last, w, out, p0, p1); break;
    case 7: pv_rows<R, 7>(vb, hd, d, last, w, out, p0, p1); break;
    default: pv_rows<R, 8>(vb, hd, d, last, w, out, p0, p1); break;
    }
}

// exp_reduced's lane ops on 16 floats.
struct Avx512ExpOps {
    static __m512 set1(float c) { return _mm512_set1_ps(c); }
    static __m512 mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
    static __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
    static __m512 round(__m512 a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static __m512 fmadd(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
    static __m512 fnmadd(__m512 a, __m512 b, __m512 c) { return _mm512_fnmadd_ps(a, b, c); }
};

// exp_avx2 on 16 lanes, the same steps.
inline __m512 exp_avx512(__m512 x) {
    const __m512 lo = _mm512_set1_ps(exp_c::lo);
    const __m512 hi = _mm512_set1_ps(exp_c::hi);
    const __mmask16 zero_mask = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    const __mmask16 inf_mask = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    __m512 n;
    __m512 y = exp_reduced<Avx512ExpOps>(x, n);
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    y = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
    y = _mm512_mask_blend_ps(inf_mask, y, _mm512_set1_ps(__builtin_inff()));
    return _mm512_maskz_mov_ps(__mmask16(~zero_mask), y);
}

// One row's scores [0, n) into softmax numerators in place; returns 1 / their sum (16 lane sums,
// then lanes j + j+8, j + j+4, j + j+2, 0 + 1).
inline float softmax_numerators(float* s, int64_t n) {
    __m512 m16 = _mm512_set1_ps(-INFINITY);
    for (int64_t p = 0; p < n; p += 16)
        // x first: maxps returns its second operand for a NaN, so NaN scores are skipped as in
        // the scalar model (s > m ? s : m).
        m16 = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), first_lanes(n - p), s + p), m16);
    const __m512 mv = _mm512_set1_ps(_mm512_reduce_max_ps(m16));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t p = 0; p < n; p += 16) {
        const __mmask16 m = first_lanes(n - p);
        const __m512 e = _mm512_maskz_mov_ps(m, exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(s + p), mv)));
        _mm512_storeu_ps(s + p, e);
        sum = _mm512_add_ps(sum, e);
    }
    return 1.0f / hsum8(_mm256_add_ps(_mm512_castps512_ps256(sum), _mm512_extractf32x8_ps(sum, 1)));
}

// This body's parts of the shared block loop (attention_heads.h). Each block of K rows is first
// copied side by side as float (reading 4 rows in place, 4 KiB apart, was slower even for a single
// token) and then read from L1 by every group of rows.
struct Avx512 {
    template <DType T>
    static void copy_rows(const AttendGroup* g, int64_t nh, int kv, int64_t p0, int64_t cnt) {
        rwd::detail::copy_rows<T>(g, nh, kv, p0, cnt);
    }
    static void block_scores(const AttendGroup& a, int64_t pb, int64_t cnt) {
        alignas(64) float spare[16];
        const __m512 scale = _mm512_set1_ps(a.scale);
        const auto* kb = reinterpret_cast<const std::byte*>(a.pad);
        const size_t rs = size_t(a.head_dim) * 4;
        if (a.head_dim == 64) rwd::detail::block_scores<4>(a, kb, rs, pb, cnt, scale, spare);
        else if (a.head_dim == 128) rwd::detail::block_scores<8>(a, kb, rs, pb, cnt, scale, spare);
        else rwd::detail::block_scores<0>(a, kb, rs, pb, cnt, scale, spare);
    }
    static float softmax_numerators(float* s, int64_t n) { return rwd::detail::softmax_numerators(s, n); }
    // Output rows per V load: 3 x 8 accumulators + 8 V vectors for 128 dimensions; up to 64
    // dimensions 6 x 4 accumulators, so each V vector and weight load serves twice the FMAs.
    // 4 rows (one token) as 2 + 2 rather than 3 + 1: the same loads, less loop overhead.
    static void block_pv(const AttendGroup& a, int64_t pb, int64_t pe) {
        const int64_t step = a.rows() == 4 ? 2 : a.head_dim <= 64 ? 6 : 3;
        static_assert(kMaxPvRows >= 6, "6 rows per chunk up to 64 dimensions");
        pv_chunks(a, pb, pe, step, [&](int64_t R, const float* const* w, float* const* out, int64_t p0, int64_t p1) {
            const float* blk = a.pad;
            const int64_t hd = a.head_dim;
            if (R == 6) pv_dims<6>(blk, hd, w, out, p0, p1);
            else if (R == 5) pv_dims<5>(blk, hd, w, out, p0, p1);
            else if (R == 4) pv_dims<4>(blk, hd, w, out, p0, p1);
            else if (R == 3) pv_dims<3>(blk, hd, w, out, p0, p1);
            else if (R == 2) pv_dims<2>(blk, hd, w, out, p0, p1);
            else pv_dims<1>(blk, hd, w, out, p0, p1);
        });
    }
    static void scale_row(float* o, int64_t hd, float inv) {
        const __m512 iv = _mm512_set1_ps(inv);
        for (int64_t d = 0; d < hd; d += 16) {
            const __mmask16 m = first_lanes(hd - d);
            _mm512_mask_storeu_ps(o + d, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, o + d), iv));
        }
    }
};

} // namespace

void attend_heads_avx512(const AttendGroup* g, int64_t nh) {
    if (g[0].kv_type == DType::F32) attend_heads_blocks<Avx512, DType::F32>(g, nh);
    else attend_heads_blocks<Avx512, DType::F16>(g, nh);
}

} // namespace rwd::detail
