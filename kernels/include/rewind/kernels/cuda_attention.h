// Causal grouped-query attention of a few new tokens over a long device KV cache (flash-decoding:
// the visible positions are cut into splits of kCudaAttentionSplit positions at FIXED absolute
// boundaries, each split reduced by one thread block, then the splits merged in increasing order).
// A token's result depends only on its position, the cache and its query, never on how many
// tokens share the call. Same shapes and semantics as kernels/attention.h (the CPU reference):
// window, scale, GQA. Body: kernels/cuda/attention.cu.
#pragma once
#include <cstdint>

#include "rewind/kernels/attention.h"
#include "rewind/kernels/cuda_device.h"
#include "rewind/kernels/dtype.h"

namespace rwd::cuda {

inline constexpr int64_t kCudaAttentionSplit = 256; // positions per split
inline constexpr int64_t kCudaAttentionMaxHeadDim = 256;

// Scratch floats `attention` needs for shape s (the partial results of every split).
int64_t attention_scratch_floats(const AttentionShape& s);

// q:   [n_tokens, n_head, head_dim] float (device)
// k,v: [>= pos0 + n_tokens, n_head_kv, head_dim] of kv_type (F32 or F16, device)
// out: [n_tokens, n_head, head_dim] float (device); scratch: attention_scratch_floats(s) floats.
// Throws rwd::Error on bad shapes (head_dim above kCudaAttentionMaxHeadDim, n_head not a multiple
// of n_head_kv, ...), an unsupported kv_type, a null pointer or a too small scratch.
void attention(const AttentionShape& s, const float* q, const void* k, const void* v, DType kv_type, float* out,
               float* scratch, int64_t scratch_floats, StreamHandle stream);

} // namespace rwd::cuda
