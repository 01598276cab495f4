// llama.cpp's CPU numerics (ggml-cpu, 2026, built for AVX-512), reproduced so rewind's logits can
// be compared with llama.cpp's golden outputs down to its F16 roundings: its flash attention and
// its F32 dot products. Not rewind's default: here a token's attention result depends on how
// many tokens share its pass (see GgmlFaPath), which speculative decoding cannot accept.
#pragma once
#include <cstdint>

#include "rewind/kernels/attention.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/matmul.h"
#include "rewind/kernels/thread_pool.h"

namespace rwd {

// ggml runs one of two flash-attention bodies per call, chosen by the query rows in the pass.
enum class GgmlFaPath {
    // Fewer than 64 rows (every decode step, short prompts). With an F16 cache Q is rounded to F16
    // for the K·Q dot, the softmax is online over positions, and the V accumulator is F16, rounded
    // after every position.
    OneChunk,
    // 64 rows or more, head_dim a multiple of 16. Q stays F32; keys go in tiles of 64 positions;
    // F32 accumulators rescaled once per tile.
    Tiled,
};

// The body ggml picks for a pass of pass_tokens query rows (as built for AVX-512, whose vectors
// hold 16 floats; ../shared/reference was produced on such a machine).
GgmlFaPath ggml_fa_path(int64_t pass_tokens, int64_t head_dim);

// Scratch floats attention_ggml needs with a pool of n_threads (one slot per thread).
int64_t attention_ggml_scratch_floats(const AttentionShape& s, int n_threads);

// Same layout and causal rule as attention() (q [n_tokens, n_head, head_dim], k/v
// [>= pos0 + n_tokens, n_head_kv, head_dim] of kv_type F32 or F16, out like q), computed with
// ggml's numerics for `path`. Each (token, head) is computed alone, so the result does not depend
// on the thread count, and for a fixed path not on n_tokens either. Throws rwd::Error on bad
// shapes (shape), a negative window, a bad scale, null pointers or an unknown path (argument), or an
// unsupported kv_type (unsupported).
void attention_ggml(const AttentionShape& s, GgmlFaPath path, const float* q, const void* k, const void* v,
                    DType kv_type, float* out, float* scratch, ThreadPool* pool);

// out[i] = gelu(gate[i]) * up[i] as ggml-cpu computes it for F32 (ggml_vec_geglu_f32 with
// GGML_GELU_FP16): gate <= -10 gives 0, gate >= 10 gives gate * up; otherwise gate is rounded to
// F16 and looked up in a table of GELU (tanh form, float) rounded to F16 -- about 1e-3 relative
// from geglu(). Computed per element, no table kept. out may alias gate or up.
void geglu_ggml(const float* gate, const float* up, int64_t n, float* out);

// out[i] = silu(gate[i]) * up[i] for one row of n elements as ggml-cpu computes it on AVX-512
// (ggml_vec_swiglu_f32): the first n & ~15 elements with its vector expf (ARM's optimized-routines
// polynomial, within ~1.5 ulp of expf) as x / (1 + exp(-x)), the rest with expf. Rows must be
// passed one at a time (where the 16-element blocks start matters). out may alias gate or up.
void swiglu_ggml(const float* gate, const float* up, int64_t n, float* out);
// ggml_v_expf's value for one float (exposed for tests).
float expf_ggml(float x);

// Weight types whose dot-product order matmul_ggml reproduces: F32 only. (ggml rounds activations
// to F16 for F16 weights, in an order not pinned down here; others keep rewind's matmul.)
bool matmul_ggml_supports(DType type);

// y[t*rows + r] = dot(W[r], x[t]) in ggml-cpu's order for that call: with n_tokens >= 2 and cols a
// multiple of 16, llamafile's tinyBLAS (one 16-lane accumulator of w*x fused over the columns, then
// reduced as _mm512_reduce_add_ps); otherwise ggml_vec_dot_f32's (4 accumulators of 16 lanes,
// fused multiply-adds over the first cols & ~63 columns, reduced as (0+2, 1+3), then 0+1, then
// the 16 lanes by halving; the remaining columns' products added in double). So a row's value
// depends on whether it ran alone, as in llama.cpp. x: [n_tokens, cols], y: [n_tokens, rows].
// Throws rwd::Error on null pointers (argument), non-positive sizes (shape) or
// !matmul_ggml_supports(w.type) (unsupported). Uses AVX2+FMA when present (the same bits as its
// scalar path).
void matmul_ggml(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool);
// The same on a forced path: SimdLevel::Scalar or any level with AVX2 (for tests).
void matmul_ggml(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool,
                 SimdLevel level);

} // namespace rwd
