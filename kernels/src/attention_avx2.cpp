// AVX2+FMA body of one (token, head) of attention. Fixed order, depending only on the row's own
// inputs: dots as 8-lane FMA chains reduced 8 positions at a time, a vector exp, an 8-lane sum
// of weights, and the weighted V sum in two accumulators (even / odd positions).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "attention_impl.h"
#include "simd_math_avx2.h"

namespace rewind::detail {

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

// Scores for positions [p, p + valid), valid <= 8, as one group of 8: each position's dot is an
// 8-lane FMA chain over head_dim, reduce8, then the head_dim % 8 tail in scalar, times scale.
// A short last group repeats its last row in the unused lanes, which are then dropped; a
// position's value depends only on p and n_pos (fixed for a token), never on the batch.
template <DType T>
inline void dots8(const AttendRow& a, int64_t p, int64_t valid, int64_t hd8) {
    const size_t eb = T == DType::F32 ? 4 : 2;
    const std::byte* rows[8];
    for (int j = 0; j < 8; ++j)
        rows[j] = static_cast<const std::byte*>(a.k) + size_t((p + (j < valid ? j : valid - 1)) * a.kv_stride) * eb;
    __m256 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < hd8; i += 8) {
        const __m256 qv = _mm256_loadu_ps(a.q + i);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, load8<T>(rows[j], i), acc[j]);
    }
    alignas(32) float s[8];
    _mm256_store_ps(s, reduce8(acc));
    for (int j = 0; j < valid; ++j) {
        float v = s[j];
        for (int64_t i = hd8; i < a.head_dim; ++i) v += a.q[i] * load1<T>(rows[j], i);
        a.scores[p + j] = v * a.scale;
    }
}

template <DType T>
void attend(const AttendRow& a) {
    const int64_t n = a.n_pos;
    const int64_t hd8 = a.head_dim & ~int64_t(7);
    for (int64_t p = 0; p < n; p += 8) dots8<T>(a, p, n - p < 8 ? n - p : 8, hd8);

    // Max (exact in any order).
    float m = -INFINITY;
    for (int64_t i = 0; i < n; ++i) m = a.scores[i] > m ? a.scores[i] : m;

    // Weights and their sum. The tail goes through a padded copy so every position uses the same
    // vector exp; padding lanes are -inf -> 0 and add exactly nothing.
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sumv = _mm256_setzero_ps();
    const int64_t n8 = n & ~int64_t(7);
    for (int64_t i = 0; i < n8; i += 8) {
        const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(a.scores + i), mv));
        _mm256_storeu_ps(a.scores + i, e);
        sumv = _mm256_add_ps(sumv, e);
    }
    if (n8 < n) {
        float tail[8];
        for (int j = 0; j < 8; ++j) tail[j] = n8 + j < n ? a.scores[n8 + j] : -INFINITY;
        const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(tail), mv));
        _mm256_storeu_ps(tail, e);
        std::memcpy(a.scores + n8, tail, size_t(n - n8) * sizeof(float));
        sumv = _mm256_add_ps(sumv, e);
    }
    const float inv = 1.0f / hsum8(sumv);
    const __m256 invv = _mm256_set1_ps(inv);

    // out = (sum_p w[p] * v[p]) * inv, 32 dims at a time, even and odd positions in separate
    // accumulators (added at the end) to keep two FMA chains per register in flight.
    int64_t d0 = 0;
    for (; d0 + 32 <= hd8; d0 += 32) {
        __m256 ev[4], od[4];
        for (int c = 0; c < 4; ++c) ev[c] = od[c] = _mm256_setzero_ps();
        int64_t q = 0;
        for (; q + 2 <= n; q += 2) {
            const __m256 w0 = _mm256_set1_ps(a.scores[q]), w1 = _mm256_set1_ps(a.scores[q + 1]);
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) {
                ev[c] = _mm256_fmadd_ps(w0, load8<T>(a.v, q * a.kv_stride + d0 + 8 * c), ev[c]);
                od[c] = _mm256_fmadd_ps(w1, load8<T>(a.v, (q + 1) * a.kv_stride + d0 + 8 * c), od[c]);
            }
        }
        if (q < n) {
            const __m256 w0 = _mm256_set1_ps(a.scores[q]);
            for (int c = 0; c < 4; ++c) ev[c] = _mm256_fmadd_ps(w0, load8<T>(a.v, q * a.kv_stride + d0 + 8 * c), ev[c]);
        }
        for (int c = 0; c < 4; ++c) _mm256_storeu_ps(a.out + d0 + 8 * c, _mm256_mul_ps(_mm256_add_ps(ev[c], od[c]), invv));
    }
    for (; d0 < hd8; d0 += 8) {
        __m256 ev = _mm256_setzero_ps(), od = _mm256_setzero_ps();
        int64_t q = 0;
        for (; q + 2 <= n; q += 2) {
            ev = _mm256_fmadd_ps(_mm256_set1_ps(a.scores[q]), load8<T>(a.v, q * a.kv_stride + d0), ev);
            od = _mm256_fmadd_ps(_mm256_set1_ps(a.scores[q + 1]), load8<T>(a.v, (q + 1) * a.kv_stride + d0), od);
        }
        if (q < n) ev = _mm256_fmadd_ps(_mm256_set1_ps(a.scores[q]), load8<T>(a.v, q * a.kv_stride + d0), ev);
        _mm256_storeu_ps(a.out + d0, _mm256_mul_ps(_mm256_add_ps(ev, od), invv));
    }
    for (int64_t d = hd8; d < a.head_dim; ++d) {
        float s = 0.0f;
        for (int64_t q = 0; q < n; ++q) s += a.scores[q] * load1<T>(a.v, q * a.kv_stride + d);
        a.out[d] = s * inv;
    }
}

} // namespace

void attend_avx2(const AttendRow& a) {
    if (a.kv_type == DType::F32) attend<DType::F32>(a);
    else attend<DType::F16>(a);
}

} // namespace rewind::detail
