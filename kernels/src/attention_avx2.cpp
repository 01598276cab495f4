// AVX2+FMA body of attention for a unit of tokens x heads sharing one KV head. Fixed order, depending only on the row's own
// inputs: dots as 8-lane FMA chains reduced 8 positions at a time, a vector exp, an 8-lane sum
// of weights, and the weighted V sum in two accumulators (even / odd positions).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attention_impl.h"
#include "simd_math_avx2.h"

namespace rwd::detail {

namespace {

template <DType T>
inline __m256 load8(const void* base, int64_t idx) {
    if constexpr (T == DType::F32) return _mm256_loadu_ps(static_cast<const float*>(base) + idx);
    else return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + idx)));
}

template <DType T>
inline float load1(const void* base, int64_t idx) {
    if constexpr (T == DType::F32) return static_cast<const float*>(base)[idx];
    else return _cvtsh_ss(static_cast<const uint16_t*>(base)[idx]);
}

// Lane j of the result = the sum of acc[j]'s lanes, as ((0+1)+(2+3)) + ((4+5)+(6+7)).
inline __m256 reduce8(const __m256 acc[8]) {
    const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
    const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// Scores of every head in the group for positions [p, p + 8), whose K rows start at `row0` and lie
// `rs` bytes apart: each position's dot is an 8-lane FMA chain over head_dim, reduce8, then the
// head_dim % 8 tail in scalar, times scale. The 8 K rows stay in L1 while the heads use them.
// `out8` receives the 8 scores of head g at out8 + g * a.score_stride.
template <DType T>
inline void dots8(const AttendGroup& a, const std::byte* row0, size_t rs, int64_t hd8, float* out8) {
    const __m256 scale = _mm256_set1_ps(a.scale);
    for (int64_t g = 0; g < a.rows(); ++g) {
        const float* q = a.q_row(g);
        __m256 acc[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
        for (int64_t i = 0; i < hd8; i += 8) {
            const __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, load8<T>(row0 + j * rs, i), acc[j]);
        }
        float* dst = out8 + g * a.score_stride;
        if (hd8 == a.head_dim) {
            _mm256_storeu_ps(dst, _mm256_mul_ps(reduce8(acc), scale));
        } else {
            alignas(32) float s[8];
            _mm256_store_ps(s, reduce8(acc));
            for (int j = 0; j < 8; ++j) {
                float v = s[j];
                for (int64_t i = hd8; i < a.head_dim; ++i) v += q[i] * load1<T>(row0 + j * rs, i);
                dst[j] = v * a.scale;
            }
        }
    }
}

// Copies K or V rows [p0, p1) of this KV head side by side into blk (head_dim elements each),
// then zero rows up to the next multiple of 8 (their scores land in spare slots of the stride).
template <DType T>
void copy_block(const AttendGroup& a, const void* src, int64_t p0, int64_t p1, std::byte* blk) {
    const size_t eb = T == DType::F32 ? 4 : 2;
    const size_t row = size_t(a.head_dim) * eb, rs = size_t(a.kv_stride) * eb;
    const auto* base = static_cast<const std::byte*>(src) + size_t(p0) * rs;
    const int64_t n = p1 - p0;
    for (int64_t j = 0; j < n; ++j) std::memcpy(blk + size_t(j) * row, base + size_t(j) * rs, row);
    const int64_t n8 = (n + 7) & ~int64_t(7);
    if (n8 > n) std::memset(blk + size_t(n) * row, 0, size_t(n8 - n) * row);
}

// All scores, a block of kAttendBlock positions at a time: the block's K rows copied side by
// side, then groups of 8 positions (the last one zero-padded into the spare score slots, which
// the stride leaves room for), so every position uses the same code.
template <DType T>
void all_scores(const AttendGroup& a, int64_t hd8, std::byte* blk) {
    const size_t row = size_t(a.head_dim) * (T == DType::F32 ? 4 : 2);
    const int64_t n = a.n_pos_row(a.rows() - 1); // the last token sees the most
    for (int64_t pb = 0; pb < n; pb += kAttendBlock) {
        const int64_t pe = std::min(n, pb + kAttendBlock);
        copy_block<T>(a, a.k, pb, pe, blk);
        for (int64_t p = pb; p < pe; p += 8) dots8<T>(a, blk + size_t(p - pb) * row, row, hd8, a.scores + p);
    }
}

// Turns one head's scores into softmax numerators in place; returns 1 / their sum. The tail goes
// through a padded copy so every position uses the same vector exp; padding lanes are -inf -> 0
// and add exactly nothing.
inline float softmax_numerators(float* scores, int64_t n) {
    // The max is exact in any order: 8 lanes, then across them, then the tail.
    const int64_t n8 = n & ~int64_t(7);
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n8; i += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(scores + i));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m8);
    float m = -INFINITY;
    for (int j = 0; j < 8; ++j) m = lanes[j] > m ? lanes[j] : m;
    for (int64_t i = n8; i < n; ++i) m = scores[i] > m ? scores[i] : m;
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sumv = _mm256_setzero_ps();
    for (int64_t i = 0; i < n8; i += 8) {
        const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + i), mv));
        _mm256_storeu_ps(scores + i, e);
        sumv = _mm256_add_ps(sumv, e);
    }
    if (n8 < n) {
        float tail[8];
        for (int j = 0; j < 8; ++j) tail[j] = n8 + j < n ? scores[n8 + j] : -INFINITY;
        const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(tail), mv));
        _mm256_storeu_ps(tail, e);
        std::memcpy(scores + n8, tail, size_t(n - n8) * sizeof(float));
        sumv = _mm256_add_ps(sumv, e);
    }
    return 1.0f / hsum8(sumv);
}

// ev/od[0 .. 8C) += w[q] * v[q][d0 ..] for positions [q0, q1): even positions into ev, odd into
// od (q0 even). The accumulators live in memory between calls, so a head's sums continue across
// position blocks in exactly the order of one long loop.
template <DType T, int C>
inline void weighted_v(float* ev_mem, float* od_mem, const float* w, const void* v, int64_t kv_stride, int64_t d0,
                       int64_t q0, int64_t q1) {
    __m256 ev[C], od[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
        ev[c] = _mm256_loadu_ps(ev_mem + 8 * c);
        od[c] = _mm256_loadu_ps(od_mem + 8 * c);
    }
    int64_t q = q0;
    for (; q + 2 <= q1; q += 2) {
        const __m256 w0 = _mm256_set1_ps(w[q]), w1 = _mm256_set1_ps(w[q + 1]);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
            ev[c] = _mm256_fmadd_ps(w0, load8<T>(v, q * kv_stride + d0 + 8 * c), ev[c]);
            od[c] = _mm256_fmadd_ps(w1, load8<T>(v, (q + 1) * kv_stride + d0 + 8 * c), od[c]);
        }
    }
    if (q < q1) {
        const __m256 w0 = _mm256_set1_ps(w[q]);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) ev[c] = _mm256_fmadd_ps(w0, load8<T>(v, q * kv_stride + d0 + 8 * c), ev[c]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
        _mm256_storeu_ps(ev_mem + 8 * c, ev[c]);
        _mm256_storeu_ps(od_mem + 8 * c, od[c]);
    }
}

template <DType T>
void attend(const AttendGroup& a) {
    const int64_t rows = a.rows();
    const int64_t n_max = a.n_pos_row(rows - 1);
    const int64_t hd8 = a.head_dim & ~int64_t(7);
    // Scores of every row at every position the last token sees; a row ignores those past its own
    // n_pos (each dot depends only on its q row and K row, so the extra ones change nothing).
    all_scores<T>(a, hd8, reinterpret_cast<std::byte*>(a.pad));

    for (int64_t g = 0; g < rows; ++g) a.inv[g] = softmax_numerators(a.scores + g * a.score_stride, a.n_pos_row(g));

    // out = (sum_p w[p] * v[p]) * inv: `out` holds the even-position accumulators, `odd` the odd.
    for (int64_t g = 0; g < rows; ++g)
        for (int64_t d = 0; d < hd8; ++d) a.out_row(g)[d] = a.odd[g * a.head_dim + d] = 0.0f;
    // Each block of V rows is copied side by side once and used by every row while in L1; a
    // row's blocks end at its own n. Blocks start at even positions, so the pairing holds.
    auto* blk = reinterpret_cast<std::byte*>(a.pad);
    for (int64_t pb = 0; pb < n_max; pb += kAttendBlock) {
        const int64_t pe_max = std::min(n_max, pb + kAttendBlock);
        copy_block<T>(a, a.v, pb, pe_max, blk);
        for (int64_t g = 0; g < rows; ++g) {
            const int64_t n = a.n_pos_row(g);
            if (pb >= n) continue;
            const int64_t cnt = std::min(n, pe_max) - pb;
            const float* w = a.scores + g * a.score_stride + pb;
            float* ev = a.out_row(g);
            float* od = a.odd + g * a.head_dim;
            int64_t d0 = 0;
            for (; d0 + 32 <= hd8; d0 += 32) weighted_v<T, 4>(ev + d0, od + d0, w, blk, a.head_dim, d0, 0, cnt);
            for (; d0 < hd8; d0 += 8) weighted_v<T, 1>(ev + d0, od + d0, w, blk, a.head_dim, d0, 0, cnt);
        }
    }
    for (int64_t g = 0; g < rows; ++g) {
        const int64_t n = a.n_pos_row(g);
        const float* w = a.scores + g * a.score_stride;
        float* out = a.out_row(g);
        const float* od = a.odd + g * a.head_dim;
        const float r = a.inv[g];
        const __m256 rv = _mm256_set1_ps(r);
        for (int64_t d = 0; d < hd8; d += 8)
            _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_add_ps(_mm256_loadu_ps(out + d), _mm256_loadu_ps(od + d)), rv));
        for (int64_t d = hd8; d < a.head_dim; ++d) {
            float s = 0.0f;
            for (int64_t q = 0; q < n; ++q) s += w[q] * load1<T>(a.v, q * a.kv_stride + d);
            out[d] = s * r;
        }
    }
}

} // namespace

void attend_avx2(const AttendGroup& a) {
    if (a.kv_type == DType::F32) attend<DType::F32>(a);
    else attend<DType::F16>(a);
}

} // namespace rwd::detail
