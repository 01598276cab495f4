// The packed Q4_K/Q5_K/Q6_K engine of the 8-lane (ymm) bodies, kq_packed_avx2.cpp and _avxvnni.cpp,
// over a policy D that takes one token's dots for 8 rows x 32 columns (D::q4, q5, q6: exact int32,
// sub-block scales applied; D::scale: the form of the scales D wants). Arithmetic as
// kq_packed_body.h states. Why not that file's engine: with 16 ymm registers, a tile that keeps
// the int and float sums of several tokens x two halves plus eight weight vectors in registers
// spills most of them (the generated code stored and reloaded broadcasts and sums around every
// maddubs). Here one half's eight weight vectors stay in registers while every token of the pass
// (up to kTile) takes its dots against them; the per-token int32 and float sums live in small L1
// arrays, one load and store per (token, half, 32 columns) against eight multiply instructions.
// So one sweep of the weights serves the whole pass. Included only by ISA-specific files (the
// anonymous namespace keeps one ISA's code from being merged into another's).
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "kq_packed_body.h" // load_i32, prefetch_eighth, and the shared engine a body may still take for some shapes
#include "kq_packed_impl.h"
#include "matmul_quant.h"
#include "ymm_rows16.h"

namespace rwd::detail {

namespace {

// Tokens per sweep of the weights: a pass of up to 64 tokens reads them from memory once.
constexpr int kTile = int(kWidePassTokens);

// Traits of kq_packed_body.h's engine over 8 lanes: the loads and bit helpers (hi1, hi2) here, and
// that whole engine for a 1-token Q6_K product in the AVX2 body (with a single token the Q6_K
// unpack dominates, and its shape, both halves at once with one broadcast per column group,
// streams a matrix about 5-10 % faster than this file's).
struct Ymm8 : YmmFloat8 {
    using I = __m256i;
    static I load(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
    static I izero() { return _mm256_setzero_si256(); }
    static I set1_8(char c) { return _mm256_set1_epi8(c); }
    static I set1_32(int32_t c) { return _mm256_set1_epi32(c); }
    static I and_(I a, I b) { return _mm256_and_si256(a, b); }
    static I or_(I a, I b) { return _mm256_or_si256(a, b); }
    static I add(I a, I b) { return _mm256_add_epi32(a, b); }
    static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
    static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
    template <int N> static I slli16(I a) { return _mm256_slli_epi16(a, N); }
    template <int N> static I srli16(I a) { return _mm256_srli_epi16(a, N); }
    template <int N> static I slli32(I a) { return _mm256_slli_epi32(a, N); }
    static I widen_u8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
    static I widen_i8(const uint8_t* p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
    static I dot(I acc, I w, int32_t x4) {
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, _mm256_set1_epi32(x4)), _mm256_set1_epi16(1)));
    }
    static I dotw(I acc, I a, int32_t b2) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, _mm256_set1_epi32(b2))); }
    static F scales(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};

// NT > 0: a tile of exactly NT tokens (compile-time, for the 1-token decode pass); 0: nt tokens.
template <class D, DType T, int NT>
void kq_tile_ymm(const KqPackedJob& job, int64_t g, int64_t t0, int nt_) {
    const int nt = NT > 0 ? NT : nt_;
    const auto* grp = reinterpret_cast<const uint8_t*>(job.w + size_t(g) * job.group_bytes);
    const auto* act = reinterpret_cast<const uint8_t*>(job.act + size_t(t0) * job.act_bytes);
    const size_t ab = job.act_bytes;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    [[maybe_unused]] const __m256i m10 = _mm256_set1_epi8(0x10);

    alignas(32) __m256 acc[kTile][2];   // [token][half] float sums
    alignas(32) __m256i isum[kTile][2]; // [token][half] int32 sums of one super-block
    for (int t = 0; t < nt; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();

    for (int64_t b = 0; b < job.nb; ++b) {
        const uint8_t* sb = grp + size_t(b) * job.sb_bytes;
        const uint8_t* ab0 = act + size_t(b) * sizeof(Act256); // token 0's block b; token t at + t * ab
        for (int t = 0; t < nt; ++t) isum[t][0] = isum[t][1] = _mm256_setzero_si256();

        // isum: per sub-block (Q4_K) or chunk of 32 (Q6_K) j and half v, eight weight vectors
        // [8 rows][4 columns] unpacked once, then every token's dots against them.
#pragma GCC unroll 1
        for (int j = 0; j < 8; ++j) {
            prefetch_eighth(sb, job.sb_bytes, j); // two super-blocks ahead, spread (kq_packed_body.h)
#pragma GCC unroll 2
            for (int v = 0; v < 2; ++v) {
                __m256i w[8];
                __m256i s0, s1;
                if constexpr (kq_min<T>) {
                    for (int k = 0; k < 4; ++k) {
                        const __m256i raw = Ymm8::load(sb + (j * 4 + k) * 64 + v * 32);
                        w[k] = _mm256_and_si256(raw, m4);
                        w[k + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                    }
                    if constexpr (T == DType::Q5_K) {
                        const __m256i h = Ymm8::load(sb + 2368 + j * 64 + v * 32);
                        for (int k = 0; k < 4; ++k) {
                            w[k] = _mm256_or_si256(w[k], hi1<Ymm8>(h, k, true, m10));
                            w[k + 4] = _mm256_or_si256(w[k + 4], hi1<Ymm8>(h, k, false, m10));
                        }
                    }
                    s0 = s1 = D::scale(Ymm8::widen_u8(sb + 2048 + 16 * j + v * 8));
                } else {
                    const __m256i h0 = Ymm8::load(sb + 2048 + (2 * j) * 64 + v * 32);
                    const __m256i h1 = Ymm8::load(sb + 2048 + (2 * j + 1) * 64 + v * 32);
                    for (int k = 0; k < 4; ++k) {
                        const __m256i raw = Ymm8::load(sb + (j * 4 + k) * 64 + v * 32);
                        w[k] = _mm256_or_si256(_mm256_and_si256(raw, m4), hi2<Ymm8>(h0, k, m30));
                        w[k + 4] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), hi2<Ymm8>(h1, k, m30));
                    }
                    s0 = D::scale(Ymm8::widen_i8(sb + 3072 + 16 * (2 * j) + v * 8));
                    s1 = D::scale(Ymm8::widen_i8(sb + 3072 + 16 * (2 * j + 1) + v * 8));
                }
                const int8_t* x = reinterpret_cast<const int8_t*>(ab0 + offsetof(Act256, qs)) + 32 * j;
#pragma GCC unroll 1
                for (int t = 0; t < nt; ++t, x += ab) {
                    __m256i d;
                    if constexpr (T == DType::Q4_K) d = D::q4(w, x, s0);
                    else if constexpr (T == DType::Q5_K) d = D::q5(w, x, s0);
                    else d = D::q6(w, x, s0, s1);
                    isum[t][v] = _mm256_add_epi32(isum[t][v], d);
                }
            }
        }

        // msum = sum_k c_k * bsum_k by madd over pairs (Q4_K (m_2j, m_2j+1) against sub-blocks 2j and
        // 2j+1's sums; Q6_K (sc_2j, sc_2j+1) against two 16-sums, times 32 below), then the float
        // steps, per half and token.
#pragma GCC unroll 1
        for (int v = 0; v < 2; ++v) {
            __m256i pair[8];
            for (int j = 0; j < 8; ++j) {
                if constexpr (kq_min<T>) {
                    if (j < 4) // (m_2j, m_2j+1): against (bsum_4j + bsum_4j+1, bsum_4j+2 + bsum_4j+3)
                        pair[j] = _mm256_or_si256(Ymm8::widen_u8(sb + 2176 + 16 * (2 * j) + v * 8),
                                                  _mm256_slli_epi32(Ymm8::widen_u8(sb + 2176 + 16 * (2 * j + 1) + v * 8), 16));
                } else {
                    const __m256i a0 = Ymm8::widen_i8(sb + 3072 + 16 * (2 * j) + v * 8);
                    const __m256i a1 = Ymm8::widen_i8(sb + 3072 + 16 * (2 * j + 1) + v * 8);
                    pair[j] = _mm256_or_si256(_mm256_and_si256(a0, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(a1, 16));
                }
            }
            const __m256 d1 = Ymm8::scales(sb + (kq_min<T> ? 2304 : 3328) + 16 * v);
            const __m256 d2 = kq_min<T> ? Ymm8::scales(sb + 2336 + 16 * v) : _mm256_setzero_ps();
            const uint8_t* a = ab0;
#pragma GCC unroll 1
            for (int t = 0; t < nt; ++t, a += ab) {
                const auto* bs = reinterpret_cast<const int16_t*>(a + offsetof(Act256, bsums));
                __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
                if constexpr (kq_min<T>) {
                    // A sub-block's min applies to both its 16-sums: add those first (exact, at
                    // most 32 * 127 in magnitude), then one madd serves two sub-blocks.
                    const __m128i h = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bs)),
                                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(bs + 8)));
                    m0 = _mm256_add_epi32(_mm256_madd_epi16(pair[0], _mm256_broadcastd_epi32(h)),
                                          _mm256_madd_epi16(pair[1], _mm256_broadcastd_epi32(_mm_srli_si128(h, 4))));
                    m1 = _mm256_add_epi32(_mm256_madd_epi16(pair[2], _mm256_broadcastd_epi32(_mm_srli_si128(h, 8))),
                                          _mm256_madd_epi16(pair[3], _mm256_broadcastd_epi32(_mm_srli_si128(h, 12))));
                } else {
                    for (int j = 0; j < 8; j += 2) {
                        m0 = _mm256_add_epi32(m0, _mm256_madd_epi16(pair[j], _mm256_set1_epi32(load_i32(bs + 2 * j))));
                        m1 = _mm256_add_epi32(m1, _mm256_madd_epi16(pair[j + 1], _mm256_set1_epi32(load_i32(bs + 2 * j + 2))));
                    }
                }
                const __m256i msum = _mm256_add_epi32(m0, m1);
                float dxs;
                std::memcpy(&dxs, a + offsetof(Act256, d), 4);
                const __m256 dx = _mm256_set1_ps(dxs);
                if constexpr (kq_min<T>) {
                    __m256 s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][v]), _mm256_mul_ps(d1, dx), acc[t][v]);
                    acc[t][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), msum)),
                                                _mm256_mul_ps(d2, dx), s);
                } else {
                    const __m256i m = _mm256_slli_epi32(msum, 5); // c_k = 32 sc_k
                    acc[t][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum[t][v], m)), _mm256_mul_ps(d1, dx), acc[t][v]);
                }
            }
        }
    }

    const int64_t r0 = g * kKqPackRows;
    const int64_t nr = job.rows - r0 < kKqPackRows ? job.rows - r0 : kKqPackRows;
    static_assert(kKqPackRows == 16, "store_rows16 writes 16-row groups");
    for (int t = 0; t < nt; ++t) store_rows16(job.y + (t0 + t) * job.rows + r0, acc[t][0], acc[t][1], nr);
}

template <class D, DType T>
void kq_groups_ymm(const KqPackedJob& job, int64_t g0, int64_t g1) {
    // Tiles of at most kTile tokens, as even as possible; a group's super-blocks stay in L1/L2
    // between the tiles of a long input.
    const int64_t n = job.n_tokens;
    const int64_t per = even_part(n, kTile);
    for (int64_t g = g0; g < g1; ++g)
        for (int64_t t0 = 0; t0 < n; t0 += per) {
            const int nt = int(t0 + per < n ? per : n - t0);
            if (nt == 1) kq_tile_ymm<D, T, 1>(job, g, t0, 1);
            else kq_tile_ymm<D, T, 0>(job, g, t0, nt);
        }
}

} // namespace
} // namespace rwd::detail
