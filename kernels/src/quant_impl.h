// Internal helpers for the ggml block formats beyond Q8_0 (quant_formats.cpp) and their matmul
// (matmul_quant*.cpp): element access, and the activation blocks the quantized products use.
// Not installed.
#pragma once
#include <cstdint>

#include "rewind/kernels/dtype.h"

namespace rwd::detail {

// dtype.cpp hands the new formats here once it has checked pointers and sizes.
void dequantize_row_new(DType t, const void* row, int64_t cols, float* out);
void quantize_row_new(DType t, const float* x, int64_t cols, void* out);
// Q4_K/Q5_K: the 8 six-bit sub-block scales and mins from their 12 packed bytes.
void unpack_q4k_scales(const uint8_t* packed, uint8_t* sc, uint8_t* m);

// Quant e (0..255, in 0..63) of a Q6_K super-block.
inline int q6k_value(const BlockQ6_K& b, int e) {
    const int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    const uint8_t ql = b.ql[64 * h + (quarter & 1) * 32 + l];
    const int lo = quarter < 2 ? ql & 15 : ql >> 4;
    const int hi = (b.qh[32 * h + l] >> (2 * quarter)) & 3;
    return lo | hi << 4;
}

// Activations of one token for the K-quant products: per 256 values an F32 scale, int8 quants
// (|q| <= 127) and the sums of each 16 quants (as ggml's Q8_K).
struct BlockQ8K {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
};
// Activations for Q4_1/Q5_1: Q8_0 quants plus the exact int sum of the block's 32 quants (the
// offset term needs it).
struct BlockQ8S {
    float d; // the Q8_0 scale, already widened from fp16
    int32_t sum;
    int8_t qs[32];
};

} // namespace rwd::detail
