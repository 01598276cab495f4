// Storage types the kernels compute with, and half/bfloat conversions. Q8_0 is ggml's block
// layout: 32 int8 values and one fp16 scale (34 bytes); rows must be multiples of 32.
#pragma once
#include <cstddef>
#include <cstdint>

namespace rwd {

enum class DType : uint32_t { F32, F16, BF16, Q8_0 };

constexpr int64_t kQ8Block = 32;
struct BlockQ8_0 {
    uint16_t d;     // fp16 scale
    int8_t qs[32];  // values = d * qs[i]
};
static_assert(sizeof(BlockQ8_0) == 34);

const char* dtype_name(DType t);
// Bytes of one row of `cols` elements; throws rwd::Error if cols is not a multiple of the
// block size.
size_t dtype_row_bytes(DType t, int64_t cols);

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f); // round to nearest even
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f); // round to nearest even; NaN stays NaN (quiet)

// out[0..cols) = the `row` of a row-major matrix of type `t` converted to float.
void dequantize_row(DType t, const void* row_data, int64_t cols, float* out);

// Quantizes x[0..cols) to cols/32 Q8_0 blocks the way ggml's reference does: per block
// amax = max|x|, d = amax/127, q = roundf(x * (1/d)) (half away from zero; 0 when amax is 0), the
// scale stored as fp16. Throws rwd::Error if cols is not a multiple of 32.
void quantize_row_q8_0(const float* x, int64_t cols, BlockQ8_0* out);

} // namespace rwd
