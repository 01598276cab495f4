// The packed Q4_K/Q5_K/Q6_K engine for bodies whose registers hold a whole tile (kq_packed_avx512vnni.cpp),
// written over a traits type V: V::kLanes rows per vector (8 or 16), so a group of 16 rows is
// kVec = 16 / kLanes vectors. (The ymm bodies, AVX2 and AVX-VNNI, with 16 registers, have their
// own tile shape in kq_packed_ymm.h; the arithmetic stated here is the contract for all.) Per
// super-block and sub-block, the group's quants are unpacked once (into registers for a pass of up
// to kSub tokens; into an L1 array per span for wider ones, read by every sub-tile) and applied to
// every token of the tile: exact int32 sums per (token, row) --
// isum = sum_j sc_j * dot_j, msum = sum_k c_k * bsum_k -- then the float steps of matmul_quant.h,
// super-blocks ascending. Layouts: kq_packed_impl.h. Included only by ISA-specific files; an
// anonymous namespace keeps code built with one ISA's flags from being merged into another's.
#pragma once
#include <immintrin.h>

#include <cstring>
#include <utility>

#include "kq_packed_impl.h"
#include "matmul_quant.h"

namespace rwd::detail {
namespace {

inline int32_t load_i32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Software prefetch two super-blocks ahead, spread over the eight steps j of this one: step j
// asks for its eighth of the lines. Asking for all of a super-block's 37-53 lines at its start
// filled the core's miss queue in one burst, then left memory idle during the compute, so
// compute and memory time added up instead of overlapping. Into L2 (T1), not L1: a prefetch into
// L1 holds one of the core's few L1 miss buffers until its line arrives from memory, which capped
// a 1-token pass's stream well below the core's read bandwidth; the L2 has more requests in
// flight, and the demand loads then take the lines from L2. Past a group's end this is the next
// group (this thread's next work, or harmless); a prefetch never faults.
inline void prefetch_eighth(const uint8_t* sb, size_t sb_bytes, int j) {
    const uint8_t* p = sb + 2 * sb_bytes;
    const size_t lines = sb_bytes / 64, l0 = size_t(j) * lines / 8, l1 = size_t(j + 1) * lines / 8;
    for (size_t l = l0; l < l1; ++l) _mm_prefetch(reinterpret_cast<const char*>(p + 64 * l), _MM_HINT_T1);
}

// Q4_K and Q5_K: sub-block scales and mins, the same layout and float steps (Q5_K adds a bit plane).
template <DType T>
inline constexpr bool kq_min = T == DType::Q4_K || T == DType::Q5_K;

// Bit 4 of the Q5_K quants of column group i (0..3), in place: lo = the quants in the nibble
// vector's low nibbles (bit i of the high-bits byte), else its high nibbles (bit 4 + i).
template <class V>
inline typename V::I hi1(typename V::I h, int i, bool lo, typename V::I m10) {
    switch (i) {
    case 0: return V::and_(lo ? V::template slli16<4>(h) : h, m10);
    case 1: return V::and_(lo ? V::template slli16<3>(h) : V::template srli16<1>(h), m10);
    case 2: return V::and_(lo ? V::template slli16<2>(h) : V::template srli16<2>(h), m10);
    default: return V::and_(lo ? V::template slli16<1>(h) : V::template srli16<3>(h), m10);
    }
}

// Bits 4..5 of the quants of column group i (0..3) from a high-bits vector, in place.
template <class V>
inline typename V::I hi2(typename V::I h, int i, typename V::I m30) {
    switch (i) {
    case 0: return V::and_(V::template slli16<4>(h), m30);
    case 1: return V::and_(V::template slli16<2>(h), m30);
    case 2: return V::and_(h, m30);
    default: return V::and_(V::template srli16<2>(h), m30);
    }
}

// Step j (a sub-block of 32 columns; Q6_K: a chunk of 32) of super-block sb, rows v * kLanes..:
// the eight vectors of quants w[c] (column group c, bytes), and the scales isum applies to the
// dots, widened to int32 (Q4_K/Q5_K: s0 for all 32 columns; Q6_K: s0, s1 for each 16).
template <class V, DType T>
inline void kq_unpack_step(const uint8_t* sb, int j, int v, typename V::I w[8], typename V::I& s0, typename V::I& s1) {
    using I = typename V::I;
    constexpr int kL4 = V::kLanes * 4; // bytes of one half of a 64-byte column-group vector
    const I m4 = V::set1_8(0x0f), m30 = V::set1_8(0x30);
    [[maybe_unused]] const I m10 = V::set1_8(0x10);
    if constexpr (kq_min<T>) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const I raw = V::load(sb + (j * 4 + k) * 64 + v * kL4);
            w[k] = V::and_(raw, m4);
            w[k + 4] = V::and_(V::template srli16<4>(raw), m4);
        }
        if constexpr (T == DType::Q5_K) {
            const I h = V::load(sb + 2368 + j * 64 + v * kL4);
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) {
                w[k] = V::or_(w[k], hi1<V>(h, k, true, m10));
                w[k + 4] = V::or_(w[k + 4], hi1<V>(h, k, false, m10));
            }
        }
        s0 = s1 = V::widen_u8(sb + 2048 + 16 * j + v * V::kLanes);
    } else {
        const I h0 = V::load(sb + 2048 + (2 * j) * 64 + v * kL4);
        const I h1 = V::load(sb + 2048 + (2 * j + 1) * 64 + v * kL4);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const I raw = V::load(sb + (j * 4 + k) * 64 + v * kL4);
            w[k] = V::or_(V::and_(raw, m4), hi2<V>(h0, k, m30));
            w[k + 4] = V::or_(V::and_(V::template srli16<4>(raw), m4), hi2<V>(h1, k, m30));
        }
        s0 = V::widen_i8(sb + 3072 + 16 * (2 * j) + v * V::kLanes);
        s1 = V::widen_i8(sb + 3072 + 16 * (2 * j + 1) + v * V::kLanes);
    }
}

// msum's factors for step j, rows v * kLanes..: pairs of int16 against a token's two 16-sums
// (bsums 2j, 2j + 1): Q4_K/Q5_K (m_j, m_j); Q6_K (sc_2j, sc_2j+1), times 32 where applied.
template <class V, DType T>
inline typename V::I kq_min_pair(const uint8_t* sb, int j, int v) {
    if constexpr (kq_min<T>) {
        const typename V::I m = V::widen_u8(sb + 2176 + 16 * j + v * V::kLanes);
        return V::or_(m, V::template slli32<16>(m));
    } else {
        const typename V::I s0 = V::widen_i8(sb + 3072 + 16 * (2 * j) + v * V::kLanes);
        const typename V::I s1 = V::widen_i8(sb + 3072 + 16 * (2 * j + 1) + v * V::kLanes);
        return V::or_(V::and_(s0, V::set1_32(0xffff)), V::template slli32<16>(s1));
    }
}

// The super-block's fp16 factors as float, rows v * kLanes..: d (and dmin; Q6_K: d only).
template <class V, DType T>
inline void kq_factors(const uint8_t* sb, int v, typename V::F& d1, typename V::F& d2) {
    if constexpr (kq_min<T>) {
        d1 = V::scales(sb + 2304 + 2 * v * V::kLanes);
        d2 = V::scales(sb + 2336 + 2 * v * V::kLanes);
    } else {
        d1 = V::scales(sb + 3328 + 2 * v * V::kLanes);
        d2 = V::zero();
    }
}

// One super-block of a group unpacked for the wide tiles: what kq_unpack_step, kq_min_pair and
// kq_factors give, for every step and vector. Written once per span of a pass (of each chunk of up
// to kWidePassTokens of a longer input) and read, from L1, by each register sub-tile of tokens,
// instead of each sub-tile unpacking the nibbles, bit planes and scales again.
template <class V>
struct KqUnpacked {
    static constexpr int kVec = int(kKqPackRows) / V::kLanes;
    typename V::I w[8][kVec][8];                // [step j][vector v][column group c] quants
    typename V::I s0[8][kVec], s1[8][kVec];     // isum's scales, int32
    typename V::I pair[8][kVec];                // msum's factor pairs
    typename V::F d1[kVec], d2[kVec];           // the fp16 factors as float
};

template <class V, DType T>
inline void kq_unpack_sb(const uint8_t* sb, KqUnpacked<V>& u) {
    constexpr int kVec = KqUnpacked<V>::kVec;
#pragma GCC unroll 1
    for (int j = 0; j < 8; ++j)
#pragma GCC unroll 2
        for (int v = 0; v < kVec; ++v) {
            kq_unpack_step<V, T>(sb, j, v, u.w[j][v], u.s0[j][v], u.s1[j][v]);
            u.pair[j][v] = kq_min_pair<V, T>(sb, j, v);
        }
    for (int v = 0; v < kVec; ++v) kq_factors<V, T>(sb, v, u.d1[v], u.d2[v]);
}

// Super-blocks [b0, b1) of group g for tokens t0 .. t0 + NT - 1. The float sums start at zero
// when b0 == 0, else from part ([NT][16], the caller's L1 array); they go to y when b1 == nb,
// else back to part. Super-blocks ascending either way: the same steps in the same order.
// Without un, each super-block is unpacked here (and two ahead prefetched); with un (U), from
// un[b - b0], written by kq_unpack_sb, and the tile instead prefetches pf_lines 64-byte lines
// from pf spread over its steps (the next span's weights, streaming in under this arithmetic).
template <class V, DType T, int NT, bool U>
inline void kq_tile_on(const KqPackedJob& job, int64_t g, int64_t t0, int64_t b0, int64_t b1, float* part,
                       const KqUnpacked<V>* un, const uint8_t* pf, size_t pf_lines) {
    using I = typename V::I;
    using F = typename V::F;
    constexpr int kVec = int(kKqPackRows) / V::kLanes;
    const auto* grp = reinterpret_cast<const uint8_t*>(job.w + size_t(g) * job.group_bytes);
    const Act256* a[NT];
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const Act256*>(job.act + size_t(t0 + t) * job.act_bytes);
    [[maybe_unused]] const size_t steps = size_t(b1 - b0) * 8;

    F acc[NT][kVec];
    for (int t = 0; t < NT; ++t)
        for (int v = 0; v < kVec; ++v) acc[t][v] = b0 == 0 ? V::zero() : V::loadf(part + 16 * t + v * V::kLanes);

    for (int64_t b = b0; b < b1; ++b) {
        const uint8_t* sb = grp + size_t(b) * job.sb_bytes;
        [[maybe_unused]] const KqUnpacked<V>* u = U ? un + (b - b0) : nullptr;
        I isum[NT][kVec], msum[NT][kVec];
        for (int t = 0; t < NT; ++t)
            for (int v = 0; v < kVec; ++v) isum[t][v] = msum[t][v] = V::izero();
        // isum: per sub-block (Q4_K) or chunk of 32 (Q6_K) j, the group's quants are unpacked into
        // eight vectors once and every token takes its dots against them. msum afterwards, in
        // its own loop, so isum, the quants and the dot chains stay in registers.
#pragma GCC unroll 1
        for (int j = 0; j < 8; ++j) {
            if constexpr (U) {
                const size_t step = size_t(b - b0) * 8 + size_t(j);
                for (size_t l = step * pf_lines / steps; l < (step + 1) * pf_lines / steps; ++l)
                    _mm_prefetch(reinterpret_cast<const char*>(pf + 64 * l), _MM_HINT_T0);
            } else {
                prefetch_eighth(sb, job.sb_bytes, j);
            }
#pragma GCC unroll 2
            for (int v = 0; v < kVec; ++v) {
                I w[8];
                I s0, s1;
                if constexpr (U) {
#pragma GCC unroll 8
                    for (int c = 0; c < 8; ++c) w[c] = u->w[j][v][c];
                    s0 = u->s0[j][v];
                    s1 = u->s1[j][v];
                } else {
                    kq_unpack_step<V, T>(sb, j, v, w, s0, s1);
                }
                if constexpr (kq_min<T> && NT >= 4) {
                    // The tokens' chains advanced in turn, column group by column group: NT
                    // independent vpdpbusd chains in flight at every step. (A token's whole chain
                    // before the next token's leans on an out-of-order window of several tokens'
                    // chains.) Q6_K keeps two chains per token: its second scale per sub-block
                    // would need NT more registers here.
                    I p[NT];
                    for (int t = 0; t < NT; ++t) p[t] = V::izero();
#pragma GCC unroll 8
                    for (int c = 0; c < 8; ++c)
#pragma GCC unroll 16
                        for (int t = 0; t < NT; ++t) p[t] = V::dot(p[t], w[c], load_i32(a[t][b].qs + 32 * j + 4 * c));
                    for (int t = 0; t < NT; ++t) isum[t][v] = V::add(isum[t][v], V::mullo(p[t], s0));
                } else {
                    // Two chains per token.
#pragma GCC unroll 16
                    for (int t = 0; t < NT; ++t) {
                        const int8_t* x = a[t][b].qs + 32 * j;
                        I p0 = V::izero(), p1 = V::izero();
#pragma GCC unroll 4
                        for (int c = 0; c < 4; ++c) {
                            p0 = V::dot(p0, w[c], load_i32(x + 4 * c));
                            p1 = V::dot(p1, w[c + 4], load_i32(x + 16 + 4 * c));
                        }
                        if constexpr (kq_min<T>) isum[t][v] = V::add(isum[t][v], V::mullo(V::add(p0, p1), s0));
                        else isum[t][v] = V::add(isum[t][v], V::add(V::mullo(p0, s0), V::mullo(p1, s1)));
                    }
                }
            }
        }
        // msum = sum_k c_k * bsum_k, pairs of 16-sums at a time: Q4_K (m_j, m_j) against sub-block
        // j's two sums; Q6_K (sc_2j, sc_2j+1), times 32 below.
#pragma GCC unroll 1
        for (int j = 0; j < 8; ++j) {
#pragma GCC unroll 2
            for (int v = 0; v < kVec; ++v) {
                I pair;
                if constexpr (U) pair = u->pair[j][v];
                else pair = kq_min_pair<V, T>(sb, j, v);
#pragma GCC unroll 16
                for (int t = 0; t < NT; ++t) msum[t][v] = V::dotw(msum[t][v], pair, load_i32(&a[t][b].bsums[2 * j]));
            }
        }
        F d1[kVec], d2[kVec];
        for (int v = 0; v < kVec; ++v) {
            if constexpr (U) {
                d1[v] = u->d1[v];
                d2[v] = u->d2[v];
            } else {
                kq_factors<V, T>(sb, v, d1[v], d2[v]);
            }
        }
#pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) {
            const F dx = V::set1(a[t][b].d);
#pragma GCC unroll 2
            for (int v = 0; v < kVec; ++v) {
                if constexpr (kq_min<T>) {
                    acc[t][v] = V::fma(V::cvt(isum[t][v]), V::mul(d1[v], dx), acc[t][v]);
                    acc[t][v] = V::fma(V::cvt(V::sub(V::izero(), msum[t][v])), V::mul(d2[v], dx), acc[t][v]);
                } else {
                    const I m = V::template slli32<5>(msum[t][v]); // c_k = 32 sc_k
                    acc[t][v] = V::fma(V::cvt(V::sub(isum[t][v], m)), V::mul(d1[v], dx), acc[t][v]);
                }
            }
        }
    }

    if (b1 < job.nb) {
        for (int t = 0; t < NT; ++t)
            for (int v = 0; v < kVec; ++v) V::store(part + 16 * t + v * V::kLanes, acc[t][v]);
        return;
    }
    const int64_t r0 = g * kKqPackRows;
    const int64_t nr = job.rows - r0 < kKqPackRows ? job.rows - r0 : kKqPackRows;
    for (int t = 0; t < NT; ++t) {
        float* y = job.y + (t0 + t) * job.rows + r0;
        if (nr == kKqPackRows) {
            for (int v = 0; v < kVec; ++v) V::store(y + v * V::kLanes, acc[t][v]);
        } else {
            alignas(64) float tmp[kKqPackRows];
            for (int v = 0; v < kVec; ++v) V::store(tmp + v * V::kLanes, acc[t][v]);
            std::memcpy(y, tmp, size_t(nr) * sizeof(float));
        }
    }
}

template <class V, DType T, int NT>
void kq_tile(const KqPackedJob& job, int64_t g, int64_t t0, int64_t b0, int64_t b1, float* part) {
    kq_tile_on<V, T, NT, false>(job, g, t0, b0, b1, part, nullptr, nullptr, 0);
}

template <class V, DType T>
using KqTileFn = void (*)(const KqPackedJob&, int64_t, int64_t, int64_t, int64_t, float*);
template <class V, DType T>
using KqWideTileFn = void (*)(const KqPackedJob&, int64_t, int64_t, int64_t, int64_t, float*, const KqUnpacked<V>*,
                              const uint8_t*, size_t);

template <class V, DType T, int... N>
constexpr KqTileFn<V, T> kq_tile_entry(int n, std::integer_sequence<int, N...>) {
    constexpr KqTileFn<V, T> fns[] = {kq_tile<V, T, N + 1>...};
    return fns[n - 1];
}
template <class V, DType T, int... N>
constexpr KqWideTileFn<V, T> kq_wide_tile_entry(int n, std::integer_sequence<int, N...>) {
    constexpr KqWideTileFn<V, T> fns[] = {kq_tile_on<V, T, N + 1, true>...};
    return fns[n - 1];
}

// Super-blocks per span of a wide pass: unpacked, 4 of them take 22 KiB (AVX-512: 5.6 KiB each),
// which with the activations they meet stays in a 32-48 KiB L1.
inline constexpr int64_t kKqWideSpan = 4;

// A pass wider than V::kSub tokens, row group g, tokens [c0, c1) (at most kWidePassTokens): per
// span of kKqWideSpan super-blocks, the group's weights are unpacked once (kq_unpack_sb) and every
// register sub-tile of the chunk takes its dots against them, the sums parked in part between
// spans; while they do, the next span's bytes (the group's next span, else the next group's first:
// groups are contiguous) are prefetched, spread over the sub-tiles' steps, so memory streams under
// the arithmetic. Super-blocks ascend for every token: the same steps as one sweep of the group.
template <class V, DType T>
void kq_wide_chunk(const KqPackedJob& job, int64_t g, int64_t c0, int64_t c1, KqUnpacked<V>* un, float* part) {
    const auto* grp = reinterpret_cast<const uint8_t*>(job.w + size_t(g) * job.group_bytes);
    const int64_t nb = job.nb, sub = even_part(c1 - c0, V::kSub), tiles = (c1 - c0 + sub - 1) / sub;
    for (int64_t b0 = 0; b0 < nb; b0 += kKqWideSpan) {
        const int64_t b1 = b0 + kKqWideSpan < nb ? b0 + kKqWideSpan : nb;
        for (int64_t b = b0; b < b1; ++b) kq_unpack_sb<V, T>(grp + size_t(b) * job.sb_bytes, un[b - b0]);
        const uint8_t* next = grp + size_t(b1) * job.sb_bytes;
        const size_t lines = size_t(kKqWideSpan) * job.sb_bytes / 64;
        for (int64_t i = 0; i < tiles; ++i) {
            const int64_t s0 = c0 + i * sub, ns = s0 + sub < c1 ? sub : c1 - s0;
            const size_t l0 = size_t(i) * lines / size_t(tiles), l1 = size_t(i + 1) * lines / size_t(tiles);
            kq_wide_tile_entry<V, T>(int(ns), std::make_integer_sequence<int, V::kSub>{})(
                job, g, s0, b0, b1, part + (s0 - c0) * kKqPackRows, un, next + 64 * l0, l1 - l0);
        }
    }
}

template <class V, DType T>
void kq_groups_t(const KqPackedJob& job, int64_t g0, int64_t g1) {
    // Up to V::kSub tokens keep their sums in registers for a whole group, unpacking as they go.
    // A wider pass runs in chunks of at most kWidePassTokens, as even as possible, each chunk a
    // kq_wide_chunk per group. A group's super-blocks stay in L1/L2 between the chunks of a long
    // input.
    const int64_t n = job.n_tokens, nb = job.nb;
    if (n <= V::kSub) {
        for (int64_t g = g0; g < g1; ++g)
            kq_tile_entry<V, T>(int(n), std::make_integer_sequence<int, V::kSub>{})(job, g, 0, 0, nb, nullptr);
        return;
    }
    alignas(64) float part[kWidePassTokens * kKqPackRows]; // [chunk tokens][16 rows] float sums
    alignas(64) KqUnpacked<V> un[kKqWideSpan];
    const int64_t per = even_part(n, kWidePassTokens);
    for (int64_t g = g0; g < g1; ++g)
        for (int64_t c0 = 0; c0 < n; c0 += per) kq_wide_chunk<V, T>(job, g, c0, c0 + per < n ? c0 + per : n, un, part);
}

template <class V>
void kq_groups(const KqPackedJob& job, int64_t g0, int64_t g1) {
    if (job.type == DType::Q4_K) kq_groups_t<V, DType::Q4_K>(job, g0, g1);
    else if (job.type == DType::Q5_K) kq_groups_t<V, DType::Q5_K>(job, g0, g1);
    else kq_groups_t<V, DType::Q6_K>(job, g0, g1);
}

} // namespace
} // namespace rwd::detail
