// Private to kernels/cuda: element loads of the weight and cache types on the device.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

namespace rwd::cuda {

// ggml's Q8_0 block: an fp16 scale and 32 signed bytes (34 bytes, 2-byte aligned).
struct DevBlockQ8_0 {
    uint16_t d;
    int8_t qs[32];
};
static_assert(sizeof(DevBlockQ8_0) == 34, "Q8_0 block layout");

__device__ __forceinline__ float half_bits_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }
// bf16 is the top half of an f32: exact.
__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

} // namespace rwd::cuda
