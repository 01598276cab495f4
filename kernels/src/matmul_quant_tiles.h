// The SIMD engine of the 4/5/6-bit matmul, written once over a dot-product traits type D (AVX2:
// maddubs/madd; AVX-512 VNNI: vpdpbusd/vpdpwssd). Included only by matmul_quant_avx2.cpp and
// matmul_quant_avx512vnni.cpp; everything sits in an anonymous namespace so code built with one
// ISA's flags is never merged into another's.
//
// Eight rows at a time: each unit (block or super-block) of the eight rows is unpacked once into
// L1 (quants, per-16 scales, float factors), then every token of the call (in chunks of kTokens)
// takes its exact int sums per row, the eight rows' sums are reduced into one vector (lane i = row
// i) and the float steps of matmul_quant.h run on the eight rows at once. Rows past the last group
// of eight go to the scalar body, which computes the same bits.
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "matmul_quant_unpack.h"

namespace rwd::detail {
namespace {

constexpr int kRowsPerGroup = 8;
constexpr int kTokens = 16;

// Lane i of the result = the sum of the eight int32 lanes of v[i] (exact).
inline __m256i reduce8(const __m256i* v) {
    const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]);
    const __m256i h23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]);
    const __m256i h67 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23); // rows 0-3: low 128 bits lanes 0-3, high lanes 4-7
    const __m256i b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// The quants of one unit into q, as the portable unpack32/unpack256 write them, with plain AVX2
// (the bit-for-bit tests against the scalar body check that they agree).
inline __m256i nibbles(__m128i v) { // bytes 0-15: low nibbles, 16-31: high nibbles
    const __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}
// Byte i = 0x10 where bit i of the 32-bit word h is set, else 0.
inline __m256i bit4_of(uint32_t h) {
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(h)),
                                              _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2,
                                                               2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(0x10));
}

template <DType T>
inline void unpack_quants(const std::byte* blk, uint8_t* q) {
    const auto* p = reinterpret_cast<const uint8_t*>(blk);
    auto store = [&](int at, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(q + at), v); };
    auto load = [&](int at) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + at)); };
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    if constexpr (T == DType::Q4_0 || T == DType::Q4_1) {
        store(0, nibbles(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + (T == DType::Q4_0 ? 2 : 4)))));
    } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
        constexpr int at = T == DType::Q5_0 ? 2 : 4;
        uint32_t h;
        std::memcpy(&h, p + at, 4);
        store(0, _mm256_or_si256(nibbles(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + at + 4))), bit4_of(h)));
    } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
        constexpr int qs = T == DType::Q5_K ? 48 : 16;
        const __m256i qh = T == DType::Q5_K ? load(16) : _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k) {
            const __m256i v = load(qs + 32 * k);
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if constexpr (T == DType::Q5_K) {
                const __m256i b0 = _mm256_set1_epi8(char(1 << (2 * k))), b1 = _mm256_set1_epi8(char(2 << (2 * k)));
                const __m256i s = _mm256_set1_epi8(0x10);
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), s));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), s));
            }
            store(64 * k, lo);
            store(64 * k + 32, hi);
        }
    } else {
        const __m256i m30 = _mm256_set1_epi8(0x30);
        for (int h = 0; h < 2; ++h) {
            const __m256i l0 = load(64 * h), l1 = load(64 * h + 32), hb = load(128 + 32 * h);
            store(128 * h, _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)));
            store(128 * h + 32, _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)));
            store(128 * h + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30)));
            store(128 * h + 96,
                  _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)));
        }
    }
}

// The factors of one unit (sc, c, d1, d2) without the quants.
template <DType T>
inline void unpack_factors(const std::byte* blk, Unit& u) {
    if constexpr (T == DType::Q6_K) {
        const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
        for (int k = 0; k < 16; ++k) {
            u.sc[k] = sc[k];
            u.c[k] = int16_t(32 * sc[k]);
        }
        uint16_t hd;
        std::memcpy(&hd, blk + 208, 2);
        u.d1 = _cvtsh_ss(hd);
        u.d2 = 0.0f;
    } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
        uint16_t hd, hdmin;
        std::memcpy(&hd, blk, 2);
        std::memcpy(&hdmin, blk + 2, 2);
        uint8_t sc[8], m[8];
        unpack_q4k_scales(reinterpret_cast<const uint8_t*>(blk) + 4, sc, m);
        for (int k = 0; k < 16; ++k) {
            u.sc[k] = sc[k / 2];
            u.c[k] = m[k / 2];
        }
        u.d1 = _cvtsh_ss(hd);
        u.d2 = _cvtsh_ss(hdmin);
    } else {
        uint16_t hd, hm = 0;
        std::memcpy(&hd, blk, 2);
        if constexpr (T == DType::Q4_1 || T == DType::Q5_1) std::memcpy(&hm, blk + 2, 2);
        u.d1 = _cvtsh_ss(hd);
        u.d2 = _cvtsh_ss(hm);
        const int16_t c = T == DType::Q4_0 ? 8 : T == DType::Q5_0 ? 16 : -1;
        u.sc[0] = u.sc[1] = 1;
        u.c[0] = u.c[1] = c;
    }
}

// One group of eight rows, unit b: unpacked state.
template <int U>
struct GroupUnit {
    alignas(64) uint8_t q[kRowsPerGroup][U];
    alignas(64) int16_t scv[kRowsPerGroup][U / 32][16]; // per 32-chunk: scale of its first 16 (x8), second 16 (x8)
    alignas(64) int16_t c[kRowsPerGroup][16];
    alignas(32) float d1[kRowsPerGroup];
    alignas(32) float d2[kRowsPerGroup];
};

template <class D, DType T, int U>
void rows_group(const QuantJob& job, int64_t r, GroupUnit<U>& g) {
    const int64_t nu = job.cols / U;
    const size_t unit_bytes = job.row_bytes / size_t(nu);
    const auto* w = static_cast<const std::byte*>(job.w) + size_t(r) * job.row_bytes;
    for (int64_t t0 = 0; t0 < job.n_tokens; t0 += kTokens) {
        const int nt = int(job.n_tokens - t0 < kTokens ? job.n_tokens - t0 : kTokens);
        __m256 acc[kTokens];
        for (int t = 0; t < nt; ++t) acc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nu; ++b) {
            for (int i = 0; i < kRowsPerGroup; ++i) {
                Unit u;
                const std::byte* blk = w + size_t(i) * job.row_bytes + size_t(b) * unit_bytes;
                unpack_quants<T>(blk, g.q[i]);
                unpack_factors<T>(blk, u);
                if constexpr (U != 32) {
                    for (int ch = 0; ch < U / 32; ++ch) {
                        const __m128i lo = _mm_set1_epi16(u.sc[2 * ch]), hi = _mm_set1_epi16(u.sc[2 * ch + 1]);
                        _mm256_store_si256(reinterpret_cast<__m256i*>(g.scv[i][ch]), _mm256_set_m128i(hi, lo));
                    }
                    for (int k = 0; k < 16; ++k) g.c[i][k] = u.c[k];
                }
                g.d1[i] = u.d1;
                g.d2[i] = u.d2;
                if constexpr (U == 32) g.c[i][0] = u.c[0];
            }
            const __m256 d1 = _mm256_load_ps(g.d1);
            const __m256 d2 = _mm256_load_ps(g.d2);
            for (int t = 0; t < nt; ++t) {
                const auto* a = reinterpret_cast<const ActBlock<U>*>(static_cast<const std::byte*>(job.act) +
                                                                     size_t(t0 + t) * job.act_bytes) + b;
                __m256i v[kRowsPerGroup];
                __m256i msum;
                if constexpr (U == 32) {
                    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a->qs));
#pragma GCC unroll 8
                    for (int i = 0; i < kRowsPerGroup; ++i)
                        v[i] = D::dot32(_mm256_load_si256(reinterpret_cast<const __m256i*>(g.q[i])), x);
                    // The offset factor is the same for every row of a 32-block format.
                    msum = _mm256_set1_epi32(int32_t(g.c[0][0]) * (int32_t(a->bsums[0]) + int32_t(a->bsums[1])));
                } else {
                    __m256i m[kRowsPerGroup];
                    const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a->bsums));
#pragma GCC unroll 8
                    for (int i = 0; i < kRowsPerGroup; ++i) {
                        v[i] = D::template dot256<U>(g.q[i], &g.scv[i][0][0], a->qs);
                        m[i] = _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(g.c[i])), bs);
                    }
                    msum = reduce8(m);
                }
                const __m256i isum = reduce8(v);
                const __m256 dx = _mm256_set1_ps(a->d);
                if constexpr (has_min(T)) {
                    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d1, dx), acc[t]);
                    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), msum)),
                                             _mm256_mul_ps(d2, dx), acc[t]);
                } else {
                    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum, msum)), _mm256_mul_ps(d1, dx),
                                             acc[t]);
                }
            }
        }
        for (int t = 0; t < nt; ++t) _mm256_storeu_ps(job.y + (t0 + t) * job.rows + r, acc[t]);
    }
}

template <class D, DType T, int U>
void rows_simd(const QuantJob& job, int64_t r0, int64_t r1) {
    GroupUnit<U> g; // a few KiB on the stack, reused by every group
    int64_t r = r0;
    for (; r + kRowsPerGroup <= r1; r += kRowsPerGroup) rows_group<D, T, U>(job, r, g);
    if (r < r1) quant_rows_scalar(job, r, r1);
}

template <class D>
void quant_rows(const QuantJob& job, int64_t r0, int64_t r1) {
    switch (job.type) {
    case DType::Q4_0: rows_simd<D, DType::Q4_0, 32>(job, r0, r1); break;
    case DType::Q4_1: rows_simd<D, DType::Q4_1, 32>(job, r0, r1); break;
    case DType::Q5_0: rows_simd<D, DType::Q5_0, 32>(job, r0, r1); break;
    case DType::Q5_1: rows_simd<D, DType::Q5_1, 32>(job, r0, r1); break;
    case DType::Q4_K: rows_simd<D, DType::Q4_K, 256>(job, r0, r1); break;
    case DType::Q5_K: rows_simd<D, DType::Q5_K, 256>(job, r0, r1); break;
    case DType::Q6_K: rows_simd<D, DType::Q6_K, 256>(job, r0, r1); break;
    default: break;
    }
}

} // namespace
} // namespace rwd::detail
