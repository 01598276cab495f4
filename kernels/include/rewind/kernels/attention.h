// Causal grouped-query attention of n new tokens over a position-indexed KV cache that already
// holds them. Token t (absolute position p = pos0 + t) attends to cache positions 0 .. p, or with
// a sliding window w to the last w of them, max(0, p - w + 1) .. p (llama.cpp's standard SWA).
// A gather map lets positions live in other cache slots (one path of a token tree).
// The value for a token never depends on how many tokens share the call or on thread count.
#pragma once
#include <cstdint>

#include "rewind/kernels/dtype.h"
#include "rewind/kernels/simd.h"
#include "rewind/kernels/thread_pool.h"

namespace rwd {

struct AttentionShape {
    int64_t n_tokens = 0;   // new tokens in this call
    int64_t pos0 = 0;       // absolute position of the first new token
    int64_t n_head = 0;
    int64_t n_head_kv = 0;  // n_head % n_head_kv == 0
    int64_t head_dim = 0;
    int64_t window = 0;     // sliding window in positions (>= 1), or 0: the whole causal prefix
    float scale = 0.0f;     // score scale, or 0: 1/sqrt(head_dim) (1 when Q comes pre-scaled)
    // Optional (token trees): positions p >= gather_from are read from cache slot
    // gather[p - gather_from] instead of slot p; gather covers [gather_from, pos0 + n_tokens).
    // Every slot must lie inside k and v. A token then gets the bits it would get from a causal
    // call over a cache holding the gathered rows at those positions.
    const int32_t* gather = nullptr;
    int64_t gather_from = 0;
};

// Scratch floats needed: one slot per thread of the pool (pass pool->size(), or 1 without a
// pool); a slot holds score rows for the query heads of one KV head and a few accumulators.
int64_t attention_scratch_floats(const AttentionShape& s, int n_threads);
// Scratch floats enough for EVERY call of at most s.n_tokens tokens ending at or before position
// s.pos0 + s.n_tokens (any pos0, any window; s's heads and head_dim): what a caller sizes once for
// all passes of a cache of that capacity. The need of one shape is not monotone in its token count
// or its last position (the token tile shrinks as score rows grow), so no single shape is a bound.
int64_t attention_scratch_floats_upto(const AttentionShape& s, int n_threads);

// q:   [n_tokens, n_head, head_dim] float
// k,v: [>= pos0 + n_tokens (or every gathered slot + 1), n_head_kv, head_dim] of kv_type (F32 or F16)
// out: [n_tokens, n_head, head_dim] float
// softmax(q·kᵀ · scale) · v over the visible positions with a fixed order over them. Throws rwd::Error on
// bad shapes (shape; also n_head not a multiple of n_head_kv), a negative window, a bad scale or
// null pointers, a gather_from outside [0, pos0] or a negative gathered slot (argument), or an
// unsupported kv_type (unsupported).
void attention(const AttentionShape& s, const float* q, const void* k, const void* v, DType kv_type,
               float* out, float* scratch, ThreadPool* pool);
// The same at a forced SIMD level (the overload above uses detect_simd()). Every level computes
// the same bits (one fixed arithmetic order, see kernels/src/attention_impl.h). Throws rwd::Error
// (unsupported) for a level this CPU lacks.
void attention(const AttentionShape& s, const float* q, const void* k, const void* v, DType kv_type,
               float* out, float* scratch, ThreadPool* pool, SimdLevel level);

// Plain reference (double accumulation) for tests.
void attention_reference(const AttentionShape& s, const float* q, const void* k, const void* v,
                         DType kv_type, float* out);

} // namespace rwd
