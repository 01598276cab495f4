// The tests' reference matrix product: dequantize, then Eigen's float product. Agrees with the
// kernels within rounding, not bit for bit; the library itself never uses Eigen.
#pragma once
#include <cstdint>

#include "rewind/kernels/matmul.h"

namespace rwd {

// y[n_tokens, w.rows] = x[n_tokens, w.cols] · wᵀ. Throws rwd::Error on null pointers (argument) or
// non-positive sizes (shape).
void matmul_reference(const MatrixView& w, const float* x, int64_t n_tokens, float* y);

} // namespace rwd
