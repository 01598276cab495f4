// Internal interface of the ggml-compatible kernels (ggml_compat.h): the dot product bodies.
#pragma once
#include <cstddef>
#include <cstdint>

#include "rewind/kernels/dtype.h"

namespace rwd::detail {

// ggml's F32/F16 dot product order on AVX-512 (see matmul_ggml): x is [cols] floats (already
// F16-rounded for F16 weights), w one weight row of `type` (F32 or F16).
// Lane l of accumulator a (a < 4, l < 16) takes the columns k < np = cols & ~63 with
// (k / 16) % 4 == a and k % 16 == l.
constexpr int64_t kGgmlDotStep = 64;
float ggml_dot_scalar(const float* x, const std::byte* w, DType type, int64_t cols);
// The same bits with 8-lane AVX2 FMAs (two ymm registers per 16-lane accumulator).
float ggml_dot_avx2(const float* x, const std::byte* w, DType type, int64_t cols);

} // namespace rwd::detail
