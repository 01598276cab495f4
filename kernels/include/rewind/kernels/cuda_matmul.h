// Matrix products y = x · Wᵀ on a CUDA device for weights stored as F32, F16, BF16 or Q8_0 (the
// file's block layout), for decode (1 token) and verification / prompt passes (n tokens).
// Query-count invariant: the result for (token t, output r) is bit-identical whatever the number
// of tokens in the call, because every (t, r) dot product is reduced by one warp in one fixed
// order (each lane's strided partial sum, then a fixed butterfly), and tokens are only grouped
// so that a weight row is read once for up to kCudaMatmulTile of them. CPU reference:
// kernels/matmul.h (agrees within rounding, not bit for bit). Body: kernels/cuda/matmul.cu.
#pragma once
#include <cstdint>

#include "rewind/kernels/cuda_device.h"
#include "rewind/kernels/dtype.h"

namespace rwd::cuda {

inline constexpr int kCudaMatmulTile = 8; // tokens that share one read of a weight row

// A weight matrix in device memory: `rows` outputs, each a row of `cols` inputs of `type`.
struct DeviceMatrix {
    DType type = DType::F32;
    const void* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
};

// Whether matmul handles weights of this type (F32, F16, BF16, Q8_0).
bool matmul_supports(DType type);

// y[t*rows + r] = sum_k W[r,k] * x[t*cols + k] for t < n_tokens. x: [n_tokens, cols] float,
// y: [n_tokens, rows] float, both device pointers, not overlapping W. Throws rwd::Error
// (unsupported) for another type, (argument / shape) for null pointers, non-positive sizes or
// cols not a whole number of Q8_0 blocks.
void matmul(const DeviceMatrix& w, const float* x, int64_t n_tokens, float* y, StreamHandle stream);

} // namespace rwd::cuda
