// Element-wise and per-token kernels of the llama block: RMSNorm, rotary embedding on adjacent
// pairs (ggml's "norm" rope), SwiGLU, residual add. Each token's result depends on that token
// alone, so batching never changes a value.
#pragma once
#include <cstdint>

#include "rewind/kernels/simd.h"

namespace rwd {

// out[t,:] = x[t,:] / sqrt(mean(x[t,:]^2) + eps) * weight[:]   x, out: [n_tokens, dim]
void rms_norm(const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps, float* out);

// Rotates pairs (x[2i], x[2i+1]) for i < n_rot/2 of each head by angle pos * base^(-2i/n_rot).
// x: [n_tokens, n_heads, head_dim], positions: [n_tokens]. Requires n_rot even, n_rot <= head_dim.
void rope_norm(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, float freq_base);

// rope_norm in two steps, so a forward pass computes the angles once per pass and applies them
// to q and k of every layer. cos_sin: [n_tokens, n_rot] holding (cos, sin) for each rotated pair.
// rope_norm_apply after rope_norm_angles gives exactly rope_norm's result.
void rope_norm_angles(const int32_t* positions, int64_t n_tokens, int64_t n_rot, float freq_base, float* cos_sin);
void rope_norm_apply(float* x, const float* cos_sin, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                     int64_t n_rot);

// out[i] = silu(gate[i]) * up[i]   (n elements; out may alias gate or up)
void swiglu(const float* gate, const float* up, int64_t n, float* out);
// The same at a forced SIMD level (the overload above uses detect_simd()): Scalar uses expf, Avx2
// and Avx512 a vector exp. Values may differ slightly between levels, never with n. Throws
// rwd::Error for a level this CPU lacks.
void swiglu(const float* gate, const float* up, int64_t n, float* out, SimdLevel level);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

} // namespace rwd
