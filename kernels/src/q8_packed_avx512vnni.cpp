// AVX-512 VNNI body of the packed Q8_0 product: 16 rows per zmm, vpdpbusd on weights offset by
// 128 (unsigned) against the signed activations, the offset's 128 x sum(x) taken off up front.
// Up to 9 tokens keep their float accumulators in registers, beside the 8 weight vectors of the
// current block, so per token and block the work is 8 vpdpbusd, one add, one convert, one
// multiply and one fma (with offsets, M: Q4_1 / Q5_1, a second multiply and fma). A pass of 10 to
// 64 tokens takes a group's blocks a short span at a time and applies each span to all its
// tokens, 9 at a time, before the next: the weights stream from memory once, spread evenly over
// the compute (sweeping the whole group per 9 tokens read memory during the first sweep only).
// Arithmetic as q8_packed.h states.
#include <immintrin.h>

#include <cstring>

#include "q8_packed_impl.h"

namespace rwd::detail {
namespace {

typedef int32_t i32u __attribute__((may_alias, aligned(1)));

constexpr int64_t kPrefetchBlocks = 16; // 8 KiB ahead

constexpr int kSub = 9;              // tokens whose sums fit in registers
constexpr int64_t kSpan = 4;         // blocks (2 KiB of weights) applied to every token in turn

// Blocks [b0, b1) of group g for tokens t0 .. t0 + NT - 1. The float sums start at zero when
// b0 == 0, else from part ([NT][16], the caller's L1 array); they go to y when b1 == nb, else
// back to part. Blocks ascending either way: the same steps in the same order.
template <int NT, bool M>
inline void tile(const Q8PackedJob& job, int64_t g, int64_t t0, int64_t b0, int64_t b1, float* part) {
    const int64_t nb = job.nb;
    const int64_t n = job.x.n_tokens;
    const std::byte* grp = job.w + size_t(g) * job.group_bytes;
    const auto* qs = reinterpret_cast<const int8_t*>(grp);
    const uint16_t* sc = q8p_scales(job, grp);
    const uint16_t* mn = q8p_mins(job, grp);
    // Block b's tokens t0.. sit side by side: one pointer each, fixed offsets per token.
    const int8_t* xq = job.x.qs + t0 * 32;
    const float* xd = job.x.d + t0;
    const int32_t* xs = job.x.sum + t0;
    const __m512i off = _mm512_set1_epi8(char(0x80));
    const std::byte* next = grp + job.group_bytes;

    __m512 acc[NT];
#pragma GCC unroll 9
    for (int t = 0; t < NT; ++t) acc[t] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(part + 16 * t);

    for (int64_t b = b0; b < b1; ++b) {
        const int8_t* wb = qs + b * kQ8PackBlockBytes;
        const int8_t* xbb = xq + b * n * 32;
        const float* xdb = xd + b * n;
        const int32_t* xsb = xs + b * n;
        // Software prefetch far ahead (the weights stream from DRAM; compute for many tokens
        // must not leave the memory queue idle), in the order this thread reads: block b + 16 of
        // this group or, past its last block, of the next group (this thread's next work, or
        // harmless), and that block's scale line. A group's scales sit after its blocks but are
        // read from its first block on: without their own prefetch every group starts with a
        // demand miss on them. A prefetch never faults.
        const int64_t pb = b + kPrefetchBlocks;
        const std::byte* pw = pb < nb ? grp + pb * kQ8PackBlockBytes : next + (pb - nb) * kQ8PackBlockBytes;
#pragma GCC unroll 8
        for (int l = 0; l < 8; ++l) _mm_prefetch(reinterpret_cast<const char*>(pw + 64 * l), _MM_HINT_T1);
        if ((pb & 1) == 0) { // one 64-byte line holds the scales (and one the mins) of two blocks
            const std::byte* ps = pb < nb ? grp + nb * kQ8PackBlockBytes + pb * 32 : next + nb * kQ8PackBlockBytes + (pb - nb) * 32;
            _mm_prefetch(reinterpret_cast<const char*>(ps), _MM_HINT_T1);
            if constexpr (M) _mm_prefetch(reinterpret_cast<const char*>(ps + q8_packed_scale_bytes(nb)), _MM_HINT_T1);
        }
        __m512i w[8];
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) w[q] = _mm512_xor_si512(_mm512_load_si512(wb + q * 64), off); // w + 128
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc + b * kQ8PackRows)));
        __m512 mw = _mm512_setzero_ps();
        if constexpr (M) mw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(mn + b * kQ8PackRows)));
        // Tokens two at a time, each token's 8 vpdpbusd in two chains of 4 (exact int sums, so
        // the split changes nothing): four independent chains hide vpdpbusd's latency.
#pragma GCC unroll 9
        for (int t = 0; t < NT; t += 2) {
            constexpr int kPair = 2;
            const int nt = t + 1 < NT ? kPair : 1;
            __m512i is[kPair][2];
#pragma GCC unroll 2
            for (int j = 0; j < nt; ++j) {
                is[j][0] = _mm512_set1_epi32(-128 * xsb[t + j]);
                is[j][1] = _mm512_setzero_si512();
            }
#pragma GCC unroll 8
            for (int q = 0; q < 8; ++q)
#pragma GCC unroll 2
                for (int j = 0; j < nt; ++j)
                    is[j][q & 1] = _mm512_dpbusd_epi32(
                        is[j][q & 1], w[q], _mm512_set1_epi32(*reinterpret_cast<const i32u*>(xbb + (t + j) * 32 + 4 * q)));
#pragma GCC unroll 2
            for (int j = 0; j < nt; ++j) {
                const __m512 dx = _mm512_set1_ps(xdb[t + j]);
                acc[t + j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(is[j][0], is[j][1])), _mm512_mul_ps(dw, dx), acc[t + j]);
                if constexpr (M) acc[t + j] = _mm512_fmadd_ps(_mm512_set1_ps(float(xsb[t + j])), _mm512_mul_ps(mw, dx), acc[t + j]);
            }
        }
    }

    if (b1 < nb) {
#pragma GCC unroll 9
        for (int t = 0; t < NT; ++t) _mm512_store_ps(part + 16 * t, acc[t]);
        return;
    }
    const int64_t r0 = g * kQ8PackRows;
    const int64_t nr = job.rows - r0 < kQ8PackRows ? job.rows - r0 : kQ8PackRows;
    const __mmask16 m = nr == kQ8PackRows ? __mmask16(0xffff) : __mmask16((1u << nr) - 1);
#pragma GCC unroll 9
    for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(job.y + (t0 + t) * job.rows + r0, m, acc[t]);
}

using TileFn = void (*)(const Q8PackedJob&, int64_t, int64_t, int64_t, int64_t, float*);
template <int... N>
constexpr TileFn table_entry(int n, bool mins, std::integer_sequence<int, N...>) {
    constexpr TileFn plain[] = {tile<N + 1, false>...};
    constexpr TileFn offset[] = {tile<N + 1, true>...};
    return mins ? offset[n - 1] : plain[n - 1];
}

} // namespace

void q8p_groups_avx512vnni(const Q8PackedJob& job, int64_t g0, int64_t g1) {
    const int64_t n = job.x.n_tokens, nb = job.nb;
    // Up to kSub tokens (decode, short chains) keep their sums in registers for a whole group;
    // so do the register sub-tiles of a prefill (more than kWidePassTokens), where compute
    // outweighs memory several times over and each sub-tile sweeps the whole group from L1/L2.
    // In between, spans of kSpan blocks, the sums parked in part between them.
    const bool whole = n <= kSub || n > kWidePassTokens;
    alignas(64) float part[kWidePassTokens * kQ8PackRows]; // [n tokens][16 rows] float sums
    for (int64_t g = g0; g < g1; ++g)
        span_sweep(0, n, nb, kSub, whole ? nb : kSpan, [&](int64_t s0, int64_t ns, int64_t b0, int64_t b1) {
            table_entry(int(ns), job.mins, std::make_integer_sequence<int, kSub>{})(job, g, s0, b0, b1,
                                                                                    whole ? nullptr : part + s0 * kQ8PackRows);
        });
}

} // namespace rwd::detail
