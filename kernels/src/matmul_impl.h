// Internal interface between the matmul front end (matmul.cpp) and its per-ISA bodies
// (matmul_scalar.cpp, matmul_avx2.cpp, matmul_avx512.cpp). Not installed.
#pragma once
#include <cstdint>

#include "rewind/kernels/dtype.h"
#include "rewind/kernels/matmul.h"

namespace rwd::detail {

// One matmul call, already validated. For Q8_0 weights `xq` holds the activations quantized per
// token ([n_tokens, cols/32] blocks) and `x` is unused by the bodies.
struct MatmulJob {
    DType type;
    const void* w;       // [rows, cols] of `type`
    int64_t cols;
    size_t row_bytes;    // bytes of one weight row
    const float* x;      // [n_tokens, cols]
    const BlockQ8_0* xq; // [n_tokens, cols/32] (Q8_0 only)
    int64_t n_tokens;
    float* y;            // [n_tokens, rows]
    int64_t rows;        // row stride of y
};

// Each body computes y[t, r] for every token t and r in [r0, r1). The order of the reduction
// for one (t, r) is fixed by the body alone: never by n_tokens, r0/r1 or the tile it lands in.
void matmul_rows_scalar(const MatmulJob& job, int64_t r0, int64_t r1);
void matmul_rows_avx2(const MatmulJob& job, int64_t r0, int64_t r1);
void matmul_rows_avx512(const MatmulJob& job, int64_t r0, int64_t r1);

// Q8_0 activation quantization, bit-identical to quantize_row_q8_0 (the scalar rule).
void quantize_row_q8_0_avx2(const float* x, int64_t cols, BlockQ8_0* out);

} // namespace rwd::detail
