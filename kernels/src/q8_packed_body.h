// The packed-Q8_0 engine shared by the SIMD bodies q8_packed_avxvnni.cpp and _avx512 (the AVX2
// body, with 16 ymm registers, has its own tile shape in q8_packed_avx2.cpp, and the AVX-512 VNNI
// body its own in q8_packed_avx512vnni.cpp; the arithmetic stated here is the contract for all),
// written once over a traits type V: V::kLanes rows per vector (8 or 16), so a group
// of 16 rows is kVec = 16 / kLanes vectors. For each block, the group's weights are loaded (and
// prepared: offset for vpdpbusd, or |w| for maddubs) once and applied to every token of the tile;
// per token and row: an exact int32 block dot, then s = fma(float(isum), d_w * d_x, s), blocks
// ascending, then for matrices with offsets (Q4_1 / Q5_1) s = fma(float(sum x), m_w * d_x, s) --
// the order q8_packed.h states, which the scalar body spells out.
// Included only by ISA-specific files; everything sits in an anonymous namespace so code built
// with one ISA's flags is never merged by the linker into another's.
#pragma once
#include <immintrin.h>

#include <cstring>

#include "q8_packed_impl.h"
#include "ymm_rows16.h"

namespace rwd::detail {
namespace {

#if defined(__AVX2__)
// The 8-lane (ymm) half of a traits type: loads, fp16 scales and the float arithmetic, the same in
// every body that keeps 8 rows per vector (AVX2, AVX-VNNI). Those bodies differ only in P, prep,
// init and dot: how a block's exact int32 dot is taken.
struct Ymm8 : YmmFloat8 {
    using I = __m256i;
    static I load(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
    static F scales(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};
#endif

template <class V, bool M>
inline void q8p_tile(const Q8PackedJob& job, int64_t g, int64_t t0, int64_t t1) {
    using F = typename V::F;
    using I = typename V::I;
    using P = typename V::P;
    constexpr int kVec = int(kQ8PackRows) / V::kLanes;
    const int64_t nb = job.nb;
    const std::byte* grp = job.w + size_t(g) * job.group_bytes;
    const auto* qs = reinterpret_cast<const int8_t*>(grp);
    const uint16_t* sc = q8p_scales(job, grp);
    const uint16_t* mn = q8p_mins(job, grp);
    const int64_t nt = t1 - t0;

    F acc[kWidePassTokens][kVec];
    for (int64_t t = 0; t < nt; ++t)
        for (int v = 0; v < kVec; ++v) acc[t][v] = V::zero();

    for (int64_t b = 0; b < nb; ++b) {
        const int8_t* wb = qs + b * kQ8PackBlockBytes;
        // Software prefetch 8 KiB ahead, every line: the weights stream from DRAM and compute for
        // many tokens must not leave the memory queue idle. Past a group's blocks this runs into
        // its scales and then the next group, which is what this thread reads next; never faults.
#pragma GCC unroll 8
        for (int l = 0; l < 8; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(wb + 16 * kQ8PackBlockBytes + 64 * l), _MM_HINT_T0);
        P w[8][kVec];
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q)
#pragma GCC unroll 2
            for (int v = 0; v < kVec; ++v) w[q][v] = V::prep(V::load(wb + q * 64 + v * V::kLanes * 4));
        F dw[kVec];
#pragma GCC unroll 2
        for (int v = 0; v < kVec; ++v) dw[v] = V::scales(sc + b * kQ8PackRows + v * V::kLanes);
        [[maybe_unused]] F mw[kVec];
        if constexpr (M)
#pragma GCC unroll 2
            for (int v = 0; v < kVec; ++v) mw[v] = V::scales(mn + b * kQ8PackRows + v * V::kLanes);
        for (int64_t t = 0; t < nt; ++t) {
            const int64_t tb = b * job.x.n_tokens + t0 + t;
            const int8_t* xb = job.x.qs + tb * 32;
            I is[kVec];
#pragma GCC unroll 2
            for (int v = 0; v < kVec; ++v) is[v] = V::init(job.x.sum[tb]);
#pragma GCC unroll 8
            for (int q = 0; q < 8; ++q) {
                int32_t x4;
                std::memcpy(&x4, xb + 4 * q, 4);
#pragma GCC unroll 2
                for (int v = 0; v < kVec; ++v) is[v] = V::dot(is[v], w[q][v], x4);
            }
            const F dx = V::set1(job.x.d[tb]);
#pragma GCC unroll 2
            for (int v = 0; v < kVec; ++v) acc[t][v] = V::fma(V::cvt(is[v]), V::mul(dw[v], dx), acc[t][v]);
            if constexpr (M) {
                const F xs = V::set1(float(job.x.sum[tb]));
#pragma GCC unroll 2
                for (int v = 0; v < kVec; ++v) acc[t][v] = V::fma(xs, V::mul(mw[v], dx), acc[t][v]);
            }
        }
    }

    const int64_t r0 = g * kQ8PackRows;
    const int64_t nr = job.rows - r0 < kQ8PackRows ? job.rows - r0 : kQ8PackRows;
    for (int64_t t = 0; t < nt; ++t) {
        float* y = job.y + (t0 + t) * job.rows + r0;
        if (nr == kQ8PackRows) {
            for (int v = 0; v < kVec; ++v) V::store(y + v * V::kLanes, acc[t][v]);
        } else {
            alignas(64) float tmp[kQ8PackRows];
            for (int v = 0; v < kVec; ++v) V::store(tmp + v * V::kLanes, acc[t][v]);
            std::memcpy(y, tmp, size_t(nr) * sizeof(float));
        }
    }
}

template <class V>
void q8p_groups(const Q8PackedJob& job, int64_t g0, int64_t g1) {
    const int64_t n = job.x.n_tokens;
    const int64_t per = even_part(n, kWidePassTokens);
    for (int64_t g = g0; g < g1; ++g)
        for (int64_t t0 = 0; t0 < n; t0 += per) {
            const int64_t t1 = t0 + per < n ? t0 + per : n;
            if (job.mins) q8p_tile<V, true>(job, g, t0, t1);
            else q8p_tile<V, false>(job, g, t0, t1);
        }
}

} // namespace
} // namespace rwd::detail
