// Internal interface of the matmul for the 4/5/6-bit ggml formats (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K): the per-token activation blocks, the job, and one body per SIMD level. Not installed.
//
// The arithmetic, identical in every body (so the scalar body is the exact model of each SIMD one,
// and all levels give the same bits). A weight row is cut into units: 32-element blocks for
// Q4_0..Q5_1, 256-element super-blocks for the K-quants. Activations are quantized per token and
// unit: int8 quants x_i (|x_i| <= 127), a float scale dx and the int sums of each 16 quants. For
// each (token, row, unit) the body forms two exact int32 values from the unsigned weight quants q_i:
//   isum = sum_j sc_j * sum_{i in sub-block j} q_i * x_i     (sc = 1 for the 32-blocks)
//   msum = sum_k c_k * (sum of the 16 quants k)               (the offset/min term, per 16 values)
// and then, units in ascending order, one float s per (token, row) starting at 0:
//   no-min formats (Q4_0: c = 8, Q5_0: c = 16, Q6_K: c = 32 * sc):  s = fma(float(isum - msum), d * dx, s)
//   Q4_K/Q5_K (c = m_j):   s = fma(float(isum), d * dx, s); s = fma(float(-msum), dmin * dx, s)
//   Q4_1/Q5_1 (c = -1):    s = fma(float(isum), d * dx, s); s = fma(float(-msum), m * dx, s)
// where d, dmin, m are the unit's fp16 fields as float and `d * dx` is one float product. Ints are
// exact in any order, so a SIMD body may sum them however it likes; only this float sequence
// fixes the bits, and it does not depend on the number of tokens, the tile or the thread.
#pragma once
#include <cstddef>
#include <cstdint>

#include "rewind/kernels/dtype.h"
#include "rewind/kernels/matmul.h"

namespace rwd::detail {

// One unit of one token's activations.
template <int U>
struct ActBlock {
    float d;                // scale: x = d * qs[i]
    int16_t bsums[U / 16];  // sums of each 16 quants
    int8_t qs[U];
};
using Act32 = ActBlock<32>;
using Act256 = ActBlock<256>;

// True for the types this file pair computes (Q4_0 .. Q6_K).
bool is_quant_type(DType t);
// Elements per unit (32 or 256) and bytes of one token's activations for `cols` inputs.
int64_t quant_unit(DType t);
size_t quant_act_bytes(DType t, int64_t cols);
// Quantizes one token x[0..cols) into act (cols / unit blocks). 32-blocks follow ggml's Q8_0 rule
// (the scale rounded to fp16, as ggml's vec_dot sees it); 256-blocks ggml's Q8_K rule (the value
// of largest magnitude maps to -127, round half to even, scale 1/iscale as float).
void quantize_act(DType t, const float* x, int64_t cols, void* act);
// The same for the 256-blocks (cols a multiple of 256) with AVX2: the same bytes.
void quantize_act256_avx2(const float* x, int64_t cols, void* act);
// One token's activations for weight type t by the body `level` allows (AVX2 for the 256-blocks,
// else scalar): every product that quantizes for t calls this, so shared and unshared inputs hold
// the same bytes.
inline void quantize_act_at(DType t, const float* x, int64_t cols, void* act, SimdLevel level) {
    if (level != SimdLevel::Scalar && quant_unit(t) == 256) quantize_act256_avx2(x, cols, act);
    else quantize_act(t, x, cols, act);
}

struct QuantJob {
    DType type;
    const void* w;      // [rows, cols] of `type`
    int64_t cols;
    size_t row_bytes;
    const void* act;    // [n_tokens] x quant_act_bytes(type, cols)
    size_t act_bytes;   // bytes per token in `act`
    int64_t n_tokens;
    float* y;           // [n_tokens, rows]
    int64_t rows;       // row stride of y
};

// y[t, r] for every token t and r in [r0, r1).
void quant_rows_scalar(const QuantJob& job, int64_t r0, int64_t r1);
void quant_rows_avx2(const QuantJob& job, int64_t r0, int64_t r1);
// AVX-512 F/BW/VL + AVX512_VNNI (vpdpbusd, vpdpwssd). Only entered when both are present.
void quant_rows_avx512vnni(const QuantJob& job, int64_t r0, int64_t r1);

} // namespace rwd::detail
