// The register-tiled matmul engine shared by the AVX2 and AVX-512 bodies, written once over a
// vector-traits type V so both levels have the same structure. Included only by *_avx2.cpp and
// *_avx512.cpp; everything is in an anonymous namespace so code built with one ISA's flags is never
// merged by the linker into another (which could run AVX-512 code on an AVX2-only CPU).
//
// Order for one (token t, row r), float weights: one V-wide accumulator, k ascending in steps of
// V::kLanes (lane j gets k = j mod kLanes), the lane sum of V::reduce4, then the cols % kLanes
// tail in scalar order. Q8_0: one accumulator, steps of V::kQ8Blocks blocks,
// acc = fma(d_w*d_x, block_dot, acc), then V::reduce4's lane sum. Tiles only decide which (t, r)
// pairs share a pass over the weights, never this order: reduce4 sums each of its four inputs
// in the same fixed pattern, whatever the other three are.
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "matmul_impl.h"

namespace rwd::detail {
namespace {

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// Scalar weight access for the column tail.
inline float weight_at(DType type, const std::byte* row, int64_t k) {
    if (type == DType::F32) {
        float f;
        std::memcpy(&f, row + 4 * k, 4);
        return f;
    }
    uint16_t h;
    std::memcpy(&h, row + 2 * k, 2);
    return type == DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

// Writes the lane sums of one token's NR accumulators to y[0..NR), four at a time (one reduce4
// and one store), each plus tail(r) -- the scalar column tail, or nothing.
template <class V, int NR, bool kTail, class Tail>
inline void store_sums(const typename V::F* acc, float* y, Tail&& tail) {
    const typename V::F z = V::zero();
#pragma GCC unroll 4
    for (int r0 = 0; r0 < NR; r0 += 4) {
        const __m128 s = V::reduce4(acc[r0], r0 + 1 < NR ? acc[r0 + 1] : z, r0 + 2 < NR ? acc[r0 + 2] : z,
                                    r0 + 3 < NR ? acc[r0 + 3] : z);
        if (!kTail && r0 + 4 <= NR) {
            _mm_storeu_ps(y + r0, s);
        } else {
            alignas(16) float v[4];
            _mm_store_ps(v, s);
            for (int j = 0; j < 4 && r0 + j < NR; ++j) y[r0 + j] = kTail ? tail(r0 + j, v[j]) : v[j];
        }
    }
}

// Keeps a loaded vector in a register: without it the compiler may fold the load into every FMA
// that uses the vector (one load per FMA instead of one per k step), which starves the FMA units
// of load slots in the wide tiles. Changes no value.
template <class F>
inline void pin(F& v) {
#ifndef REWIND_EMULATED_SIMD
    asm("" : "+v"(v));
#else
    (void)v; // tests/emulated: SIMDe's vectors are structs in memory, not registers
#endif
}

// Accumulators I0..I0+3 (those below N) of a float tile, (t, r) row-major: one reduce4, each
// lane sum stored to y[t * y_stride + r].
template <class V, int NR, int N, int I0>
inline void reduce_group(const typename V::F* acc, float* y, int64_t y_stride) {
    const typename V::F z = V::zero();
    const __m128 s = V::reduce4(acc[I0], I0 + 1 < N ? acc[I0 + 1] : z, I0 + 2 < N ? acc[I0 + 2] : z,
                                I0 + 3 < N ? acc[I0 + 3] : z);
    alignas(16) float v[4];
    _mm_store_ps(v, s);
    [&]<int... J>(std::integer_sequence<int, J...>) {
        auto one = [&](auto j) {
            constexpr int i = I0 + decltype(j)::value;
            if constexpr (i < N) y[(i / NR) * y_stride + i % NR] = v[decltype(j)::value];
        };
        (one(std::integral_constant<int, J>{}), ...);
    }(std::make_integer_sequence<int, 4>{});
}

// NT tokens x NR rows of float-type weights (F32/F16/BF16 via V::load<type>).
// w: first of NR rows, row_bytes apart; x: [NT, cols]; y: y[t * y_stride + r].
// The NT * NR accumulators are reduced four at a time in row-major (t, r) order, whatever (t, r)
// pairs share a reduce4: it sums each input on its own, so the grouping changes no bit.
template <class V, DType T, int NT, int NR>
inline void tile_float(const std::byte* w, size_t row_bytes, const float* x, int64_t cols, float* y, int64_t y_stride) {
    using F = typename V::F;
    constexpr int N = NT * NR;
    F acc[N];
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) acc[i] = V::zero();
    const int64_t kv = cols - cols % V::kLanes;
    // Prefetch the tile after next (its NR rows are contiguous) at the pace this tile reads its
    // own rows, so weights streaming from DRAM or L3 arrive in time even when few rows are in
    // flight. Prefetches never fault, so running past the matrix end is harmless (the address
    // is formed as an integer, never as a pointer past the buffer).
    constexpr size_t kPfStep = size_t(NR) * V::kLanes * (T == DType::F32 ? 4 : 2);
    uintptr_t pf = reinterpret_cast<uintptr_t>(w) + 2 * size_t(NR) * row_bytes;
    for (int64_t k = 0; k < kv; k += V::kLanes, pf += kPfStep) {
        for (size_t o = 0; o < kPfStep; o += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + o), _MM_HINT_T0);
        // Keep the smaller side in registers and stream the other, so accumulators + operands
        // fit the register file (the FMAs per (t, r) are the same either way).
        if constexpr (NT < NR) {
            F xv[NT];
#pragma GCC unroll 32
            for (int t = 0; t < NT; ++t) {
                xv[t] = V::load_x(x + t * cols + k);
                pin(xv[t]);
            }
#pragma GCC unroll 32
            for (int r = 0; r < NR; ++r) {
                F wv = V::template load<T>(w + size_t(r) * row_bytes, k);
                if constexpr (NT > 1) pin(wv);
#pragma GCC unroll 32
                for (int t = 0; t < NT; ++t) acc[t * NR + r] = V::fma(wv, xv[t], acc[t * NR + r]);
            }
        } else {
            F wv[NR];
#pragma GCC unroll 32
            for (int r = 0; r < NR; ++r) {
                wv[r] = V::template load<T>(w + size_t(r) * row_bytes, k);
                pin(wv[r]);
            }
#pragma GCC unroll 32
            for (int t = 0; t < NT; ++t) {
                F xv = V::load_x(x + t * cols + k);
                if constexpr (NR > 1) pin(xv);
#pragma GCC unroll 32
                for (int r = 0; r < NR; ++r) acc[t * NR + r] = V::fma(wv[r], xv, acc[t * NR + r]);
            }
        }
    }
    // Reduced with compile-time indices only: a runtime index into acc would move the
    // accumulators to the stack.
    [&]<int... G>(std::integer_sequence<int, G...>) {
        (reduce_group<V, NR, N, 4 * G>(acc, y, y_stride), ...);
    }(std::make_integer_sequence<int, (N + 3) / 4>{});
    // The column tail, k ascending, onto the stored lane sums (a float stored and reloaded is
    // exact, so this is the order lane sum + w*x, + w*x, ...).
    if (kv < cols) {
        for (int t = 0; t < NT; ++t) {
            const float* xt = x + t * cols;
            for (int r = 0; r < NR; ++r) {
                float sum = y[t * y_stride + r];
                for (int64_t k = kv; k < cols; ++k) sum += weight_at(T, w + size_t(r) * row_bytes, k) * xt[k];
                y[t * y_stride + r] = sum;
            }
        }
    }
}

// NT tokens x NR rows of Q8_0 weights against Q8_0 activations xq: [NT, nb] blocks.
template <class V, int NT, int NR>
inline void tile_q8(const std::byte* w, size_t row_bytes, const BlockQ8_0* xq, int64_t nb, float* y, int64_t y_stride) {
    using F = typename V::F;
    using I = typename V::I;
    F acc[NT][NR];
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t)
#pragma GCC unroll 16
        for (int r = 0; r < NR; ++r) acc[t][r] = V::zero();
    const BlockQ8_0* wrow[NR];
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) wrow[r] = reinterpret_cast<const BlockQ8_0*>(w + size_t(r) * row_bytes);
    int64_t b = 0;
    for (; b + V::kQ8Blocks <= nb; b += V::kQ8Blocks) {
        F dw[NR];
        I aw[NR]; // |w| once per row and block, shared by the NT tokens
#pragma GCC unroll 16
        for (int r = 0; r < NR; ++r) {
            dw[r] = V::q8_scale(wrow[r] + b);
            aw[r] = V::q8_abs(V::q8_load(wrow[r] + b));
        }
#pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) {
            const BlockQ8_0* xb = xq + t * nb + b;
            const I xv = V::q8_load(xb);
            const F dx = V::q8_scale(xb);
#pragma GCC unroll 16
            for (int r = 0; r < NR; ++r)
                acc[t][r] = V::fma(V::mul(dw[r], dx), V::q8_dot(aw[r], V::q8_load(wrow[r] + b), xv), acc[t][r]);
        }
    }
    if constexpr (V::kQ8Blocks > 1) {
        // Fewer than kQ8Blocks blocks left (AVX-512: one): the same step on the low lanes only.
        if (b < nb) {
#pragma GCC unroll 16
            for (int t = 0; t < NT; ++t) {
                const BlockQ8_0* xb = xq + t * nb + b;
                const I xv = V::q8_load_one(xb);
                const F dx = V::q8_scale_one(xb);
#pragma GCC unroll 16
                for (int r = 0; r < NR; ++r) {
                    const I wv = V::q8_load_one(wrow[r] + b);
                    acc[t][r] = V::fma_low(V::mul(V::q8_scale_one(wrow[r] + b), dx), V::q8_dot(V::q8_abs(wv), wv, xv),
                                           acc[t][r]);
                }
            }
        }
    }
    auto no_tail = [](int, float s) { return s; };
    for (int t = 0; t < NT; ++t) store_sums<V, NR, false>(acc[t], y + t * y_stride, no_tail);
}

template <class V, DType T, int NT, int NR>
void rows_float(const MatmulJob& job, const float* x, float* y, int64_t r0, int64_t r1) {
    const auto* w = static_cast<const std::byte*>(job.w);
    int64_t r = r0;
    for (; r + NR <= r1; r += NR)
        tile_float<V, T, NT, NR>(w + size_t(r) * job.row_bytes, job.row_bytes, x, job.cols, y + r, job.rows);
    for (; r < r1; ++r) tile_float<V, T, NT, 1>(w + size_t(r) * job.row_bytes, job.row_bytes, x, job.cols, y + r, job.rows);
}

template <class V, int NT, int NR>
void rows_q8(const MatmulJob& job, const BlockQ8_0* xq, float* y, int64_t r0, int64_t r1) {
    const auto* w = static_cast<const std::byte*>(job.w);
    const int64_t nb = job.cols / kQ8Block;
    int64_t r = r0;
    for (; r + NR <= r1; r += NR) tile_q8<V, NT, NR>(w + size_t(r) * job.row_bytes, job.row_bytes, xq, nb, y + r, job.rows);
    for (; r < r1; ++r) tile_q8<V, NT, 1>(w + size_t(r) * job.row_bytes, job.row_bytes, xq, nb, y + r, job.rows);
}

// Tokens per block for the `left` tokens still to do: 4s and 3s (equally efficient tiles), so a
// remainder of 1 or 2 tokens, whose tiles reuse each weight load less, only happens for n < 3 and
// n = 5. E.g. 9 = 3+3+3, 13 = 4+3+3+3, 17 = 4+4+3+3+3.
inline int64_t token_block(int64_t left) {
    if (left >= 4 && left != 5 && left != 6 && left != 9) return 4;
    if (left >= 3 && left != 4) return 3;
    return left;
}

// Tokens per float token block for the `left` tokens still to do: all of them up to
// V::kMaxTokensFloat, else the fewest blocks of near-equal size (17 = 9 + 8 on AVX-512), so each
// weight tile is loaded as few times as possible and every block keeps a wide tile.
template <class V>
inline int64_t float_token_block(int64_t left) {
    constexpr int64_t m = V::kMaxTokensFloat;
    if (left <= m) return left;
    const int64_t blocks = (left + m - 1) / m;
    return (left + blocks - 1) / blocks;
}

template <class V, DType T, int NT>
void rows_float_nt(const MatmulJob& job, const float* x, float* y, int64_t r0, int64_t r1) {
    if constexpr (NT <= V::kMaxTokensFloat) rows_float<V, T, NT, V::kRowsFloat[NT - 1]>(job, x, y, r0, r1);
}

// Token blocks over rows [r0, r1). Tile heights come from V so the accumulators fit its registers.
template <class V, DType T>
void panel_float(const MatmulJob& job, int64_t r0, int64_t r1) {
    for (int64_t t0 = 0, nt = 0; t0 < job.n_tokens; t0 += nt) {
        nt = float_token_block<V>(job.n_tokens - t0);
        const float* x = job.x + t0 * job.cols;
        float* y = job.y + t0 * job.rows;
        switch (nt) {
        case 9: rows_float_nt<V, T, 9>(job, x, y, r0, r1); break;
        case 8: rows_float_nt<V, T, 8>(job, x, y, r0, r1); break;
        case 7: rows_float_nt<V, T, 7>(job, x, y, r0, r1); break;
        case 6: rows_float_nt<V, T, 6>(job, x, y, r0, r1); break;
        case 5: rows_float_nt<V, T, 5>(job, x, y, r0, r1); break;
        case 4: rows_float_nt<V, T, 4>(job, x, y, r0, r1); break;
        case 3: rows_float_nt<V, T, 3>(job, x, y, r0, r1); break;
        case 2: rows_float_nt<V, T, 2>(job, x, y, r0, r1); break;
        default: rows_float_nt<V, T, 1>(job, x, y, r0, r1); break;
        }
    }
}

template <class V>
void panel_q8(const MatmulJob& job, int64_t r0, int64_t r1) {
    const int64_t nb = job.cols / kQ8Block;
    for (int64_t t0 = 0, nt = 0; t0 < job.n_tokens; t0 += nt) {
        nt = token_block(job.n_tokens - t0);
        const BlockQ8_0* xq = job.xq + t0 * nb;
        float* y = job.y + t0 * job.rows;
        switch (nt) {
        case 4: rows_q8<V, 4, V::kRowsQ8[3]>(job, xq, y, r0, r1); break;
        case 3: rows_q8<V, 3, V::kRowsQ8[2]>(job, xq, y, r0, r1); break;
        case 2: rows_q8<V, 2, V::kRowsQ8[1]>(job, xq, y, r0, r1); break;
        default: rows_q8<V, 1, V::kRowsQ8[0]>(job, xq, y, r0, r1); break;
        }
    }
}

// Rows per panel: about 16 KiB of weights (at least 24 rows, so wide rows give panels larger than
// L1 that stay in L2) while every token block passes over it, so a multi-token call reads each
// weight from memory once.
inline int64_t panel_rows(size_t row_bytes) {
    const int64_t fit = int64_t(16 * 1024) / imax(int64_t(row_bytes), 1);
    return imax(24, (fit / 24) * 24);
}

template <class V>
void matmul_rows(const MatmulJob& job, int64_t r0, int64_t r1) {
    // With one token block there is nothing to reuse across panels: run the range in one go.
    const bool quant = job.type == DType::Q8_0;
    const bool one_block = quant ? job.n_tokens <= 4 : job.n_tokens <= V::kMaxTokensFloat;
    const int64_t step = one_block ? imax(r1 - r0, 1) : panel_rows(job.row_bytes);
    for (int64_t p = r0; p < r1; p += step) {
        const int64_t p1 = imin(r1, p + step);
        switch (job.type) {
        case DType::F32: panel_float<V, DType::F32>(job, p, p1); break;
        case DType::F16: panel_float<V, DType::F16>(job, p, p1); break;
        case DType::BF16: panel_float<V, DType::BF16>(job, p, p1); break;
        case DType::Q8_0: panel_q8<V>(job, p, p1); break;
        default: break; // the front end sends the other types to their own bodies
        }
    }
}

} // namespace
} // namespace rwd::detail
