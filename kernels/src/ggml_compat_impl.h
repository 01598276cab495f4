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

// llamafile's tinyBLAS order for F32 on AVX-512 (what ggml-cpu uses for matmuls over 2 or more
// rows): one 16-lane accumulator, w*x fused in column order 16 at a time, then the lanes reduced
// as _mm512_reduce_add_ps does: upper 8 + lower 8, upper 4 + lower 4, (0+2) + (1+3). cols % 16 == 0.
float tinyblas_dot_scalar(const float* x, const float* w, int64_t cols);
float tinyblas_dot_avx2(const float* x, const float* w, int64_t cols);

} // namespace rwd::detail
