// Internal interface of the ggml-compatible kernels (ggml_compat.h): the dot product bodies.
#pragma once
#include <cstdint>

namespace rwd::detail {

// ggml_vec_dot_f32's order on AVX-512 (see matmul_ggml): x and w are [cols] floats.
// Lane l of accumulator a (a < 4, l < 16) takes the columns k < np = cols & ~63 with
// (k / 16) % 4 == a and k % 16 == l.
constexpr int64_t kGgmlDotStep = 64;
float ggml_dot_scalar(const float* x, const float* w, int64_t cols);
// The same bits with 8-lane AVX2 FMAs (two ymm registers per 16-lane accumulator).
float ggml_dot_avx2(const float* x, const float* w, int64_t cols);

} // namespace rwd::detail
