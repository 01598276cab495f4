// Per-token kernels of the transformer block on a CUDA device: RMSNorm, rope (both styles, with
// frequency factors), SwiGLU, GELU(tanh)-gated FFN, bias / scale / residual add, logit softcap,
// embedding row lookup, K/V stores and argmax. Free functions over device pointers plus sizes and
// a stream; each checks its shape preconditions on the host (rwd::Error, nothing launched) and
// reports a launch failure as rwd::Error. The stream's device must be current.
// Every token's result depends on that token alone (one thread block per row, fixed reduction
// trees), so the number of tokens in a call never changes a value. CPU references: kernels/ops.h.
// Bodies in kernels/cuda/ops.cu; only builds with REWIND_HAVE_CUDA link them.
#pragma once
#include <cstdint>

#include "rewind/kernels/cuda_device.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/ops.h"

namespace rwd::cuda {

// out[t,:] = x[t,:] / sqrt(mean(x[t,:]^2) + eps) * weight[:]    x, out: [rows, dim] (may alias)
void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out,
              StreamHandle stream);
// rwd::rope on the device: x [n_tokens, n_heads, head_dim], positions [n_tokens] (device),
// p.freq_factors a DEVICE pointer [n_rot/2] or null. p.fused must be false (Numerics::Exact only).
// Same recipe as the CPU (theta stepped by repeated multiplication), so within rounding of it.
void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          const RopeParams& p, StreamHandle stream);
// out[i] = silu(gate[i]) * up[i], out[i] = gelu_tanh(gate[i]) * up[i]   (out may alias gate or up).
// Rows of `n` elements with row strides (elements) so a fused [gate; up] layout needs no copy:
// element i of row t is gate[t*gate_stride + i], up[t*up_stride + i], out[t*out_stride + i].
void swiglu(const float* gate, const float* up, int64_t rows, int64_t n, int64_t gate_stride, int64_t up_stride,
            float* out, int64_t out_stride, StreamHandle stream);
void geglu(const float* gate, const float* up, int64_t rows, int64_t n, int64_t gate_stride, int64_t up_stride,
           float* out, int64_t out_stride, StreamHandle stream);
// x[t, i] += bias[i]    x: [rows, dim]
void add_bias(float* x, const float* bias, int64_t rows, int64_t dim, StreamHandle stream);
// x[i] *= s
void scale_inplace(float* x, int64_t n, float s, StreamHandle stream);
// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n, StreamHandle stream);
// x[i] = c * tanh(x[i] / c)   (final logit soft-capping), c > 0
void softcap(float* x, int64_t n, float c, StreamHandle stream);
// out[t, :] = row ids[t] of `table` ([n_rows, cols] of `type`: F32, F16, BF16 or Q8_0) as floats.
// ids: [n] device ints; an id outside [0, n_rows) gives a row of NaN (callers validate ids on the
// host first; the device never reads out of bounds).
void get_rows(DType type, const void* table, int64_t n_rows, int64_t cols, const int32_t* ids, int64_t n, float* out,
              StreamHandle stream);
// dst[i] = src[i] stored as kv_type (F32: copy; F16: round to nearest even, as fp32_to_fp16).
void store_kv(const float* src, int64_t n, DType kv_type, void* dst, StreamHandle stream);
// out[r] = the index of the largest x[r, :] (the lowest such index on ties; NaN never wins unless
// the whole row is NaN, then 0). x: [rows, n], out: [rows] device ints.
void argmax(const float* x, int64_t rows, int64_t n, int32_t* out, StreamHandle stream);

} // namespace rwd::cuda
