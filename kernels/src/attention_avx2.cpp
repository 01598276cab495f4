// AVX2+FMA body of one (token, head) of attention. Fixed order, depending only on the row's own
// inputs: dots as one 8-lane FMA chain per position + hsum8 (+ scalar tail), vector exp, an
// 8-lane sum of weights, and the weighted V sum kept in two accumulators (even / odd positions).
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

// q·k for positions [p, p+NP): NP independent chains, each in the one fixed order.
template <DType T, int NP>
inline void dots(const AttendRow& a, int64_t p, int64_t hd8) {
    __m256 acc[NP];
#pragma GCC unroll 8
    for (int j = 0; j < NP; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < hd8; i += 8) {
        const __m256 qv = _mm256_loadu_ps(a.q + i);
#pragma GCC unroll 8
        for (int j = 0; j < NP; ++j) acc[j] = _mm256_fmadd_ps(qv, load8<T>(a.k, (p + j) * a.kv_stride + i), acc[j]);
    }
    for (int j = 0; j < NP; ++j) {
        float s = hsum8(acc[j]);
        for (int64_t i = hd8; i < a.head_dim; ++i) s += a.q[i] * load1<T>(a.k, (p + j) * a.kv_stride + i);
        a.scores[p + j] = s * a.scale;
    }
}

template <DType T>
void attend(const AttendRow& a) {
    const int64_t n = a.n_pos;
    const int64_t hd8 = a.head_dim & ~int64_t(7);
    int64_t p = 0;
    for (; p + 4 <= n; p += 4) dots<T, 4>(a, p, hd8);
    for (; p < n; ++p) dots<T, 1>(a, p, hd8);

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
