// Element-wise and per-token kernels of the transformer block: RMSNorm, rotary embedding (ggml's
// "norm" rope on adjacent pairs and "neox" rope on the two halves of a head, with frequency
// factors and linear scaling), SwiGLU, GELU-gated FFN, bias add, scale, residual add. Each
// token's result depends on that token alone, so batching never changes a value.
#pragma once
#include <cstdint>

#include "rewind/kernels/simd.h"

namespace rwd {

// out[t,:] = x[t,:] / sqrt(mean(x[t,:]^2) + eps) * weight[:]   x, out: [n_tokens, dim]
void rms_norm(const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps, float* out);

// Rotates pairs (x[2i], x[2i+1]) for i < n_rot/2 of each head by angle pos * base^(-2i/n_rot).
// x: [n_tokens, n_heads, head_dim], positions: [n_tokens]. Requires n_rot even, n_rot <= head_dim.
// The plain form of rope() below (which the forward pass calls), kept as its reference.
void rope_norm(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, float freq_base);

// Which elements a rotary embedding pairs up: (2i, 2i+1) ("norm", llama) or (i, i + n_rot/2)
// ("neox": qwen2, qwen3, phi3, gemma3).
enum class RopeMode { Norm, Neox };

struct RopeParams {
    RopeMode mode = RopeMode::Norm;
    int64_t n_rot = 0;                   // rotated dimensions of each head: even, <= head_dim
    float freq_base = 10000.0f;          // > 0
    float freq_scale = 1.0f;             // linear rope scaling: every angle times this (1/factor), > 0
    const float* freq_factors = nullptr; // [n_rot/2] or null: pair i's angle divided by factor i
                                         // (Llama 3.1's rope_freqs), each > 0
    // Rotate as ggml-cpu's compiled code does (GCC contracts x0*c - x1*s into fma(x0, c, -(x1*s))
    // and x0*s + x1*c into fma(x0, s, x1*c)), for Numerics::LlamaCpp; false: plain products.
    bool fused = false;
};

// Rotates each head's pairs by angle freq_scale * pos * base^(-2i/n_rot) / freq_factors[i], with
// ggml's float recipe (theta stepped by repeated multiplication, as rope_norm). With mode Norm,
// freq_scale 1 and no factors the result is rope_norm's, bit for bit. x: [n_tokens, n_heads,
// head_dim]; dimensions >= n_rot pass through. Throws rwd::Error on bad sizes or parameters.
void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          const RopeParams& p);

// out[i] = silu(gate[i]) * up[i]   (n elements; out may alias gate or up)
void swiglu(const float* gate, const float* up, int64_t n, float* out);
// The same at a forced SIMD level (the overload above uses detect_simd()). Every level computes
// the same bits: the AVX2 body's vector exp (a Cephes-style polynomial, about 1-2 ulp from expf),
// which the scalar body reproduces exactly. Throws rwd::Error on null pointers (argument), a
// negative n (shape) or a level this CPU lacks (unsupported).
void swiglu(const float* gate, const float* up, int64_t n, float* out, SimdLevel level);

// out[i] = gelu(gate[i]) * up[i] with GELU's tanh form, 0.5x(1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))),
// in float in that fixed order (scalar; out may alias gate or up). llama.cpp's CPU version, which
// looks GELU up in an F16 table, is geglu_ggml (ggml_compat.h).
void geglu(const float* gate, const float* up, int64_t n, float* out);

// x[t, i] += bias[i]    x: [n_tokens, dim]
void add_bias(float* x, const float* bias, int64_t n_tokens, int64_t dim);

// x[i] *= s   (ggml_scale)
void scale_inplace(float* x, int64_t n, float s);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

} // namespace rwd
