// Matrix products y = x · Wᵀ for the forward pass, with a fixed reduction order: the result for
// (token t, output r) is bit-identical whatever the number of tokens in the call and whatever
// the thread count. SIMD paths (AVX-512, AVX2) are picked at run time; a scalar path remains.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "rewind/kernels/dtype.h"
#include "rewind/kernels/simd.h"
#include "rewind/kernels/thread_pool.h"

namespace rwd {

// MatrixView (a weight matrix of a storage type) lives in dtype.h.

// SimdLevel, detect_simd() and simd_name() live in simd.h.

// Scratch bytes matmul needs for n_tokens activations of width cols (the quantized types quantize
// x into it; 0 for F32/F16/BF16). Throws rwd::Error (shape) for a negative count or a width that
// is not a whole number of the type's blocks; (unsupported) for an unknown type.
// For Q8_0 it is enough for a packed matrix too (q8_input_bytes); one in the file's layout needs
// only n_tokens Q8_0 rows.
size_t matmul_scratch_bytes(DType type, int64_t n_tokens, int64_t cols);

// y[t*rows + r] = sum_k W[r,k] * x[t*cols + k] for t < n_tokens, r < w.rows.
// x: [n_tokens, cols] float; y: [n_tokens, rows] float. For quantized weights x is first quantized
// per token into `scratch` (4-byte aligned), deterministically, as ggml does: Q8_0 blocks for Q8_0,
// Q4_0, Q5_0; the same plus block sums for Q4_1, Q5_1; Q8_K blocks of 256 for Q4_K, Q5_K, Q6_K.
// The 4/5/6-bit types give the same bits at every SIMD level (kernels/src/matmul_quant.h states
// the arithmetic). Throws rwd::Error on null pointers (argument); non-positive sizes, cols not a
// whole number of blocks, or scratch too small or misaligned (shape); a weight type without a
// kernel or a SIMD level this CPU lacks (unsupported).
void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y,
            std::span<std::byte> scratch, ThreadPool* pool, SimdLevel level = detect_simd());

} // namespace rwd
