// Expert routing for mixture-of-experts layers: the router's F32 product in one fixed order on
// every machine, softmax, top-k and renormalisation, and the grouping of a pass's rows by expert.
#pragma once
#include <cstdint>

namespace rwd {

class ThreadPool;

// y[t*rows + r] = sum_k w[r*cols + k] * x[t*cols + k] for t < n_tokens, r < rows. Each sum is 16
// partial sums over k mod 16 (k ascending in each), then added pairwise; the code is compiled once
// for the baseline ISA and never dispatched, so every machine, SIMD level, thread count and pass
// size gives the same bits. For the router's small product (n_expert x n_embd), where one differing
// bit may choose another expert. `pool` (may be null) splits the outputs, never a sum. Throws
// rwd::Error (argument) on null pointers or non-positive sizes.
void matmul_f32_portable(const float* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens, float* y,
                         ThreadPool* pool = nullptr);

// The most experts route_top_k takes (llama.cpp's limit too).
inline constexpr int64_t kRouteMaxExperts = 512;

// For each token t < n_tokens: the softmax of logits[t*n_expert ..] (the maximum subtracted,
// exp by rewind's polynomial, the sum in double, each term times the float of 1/sum, as ggml's
// softmax); the k largest probabilities in descending order, ties to the lower expert index, into
// ids[t*k + j] and weights[t*k + j]; with renorm, those k weights divided by their sum (summed in
// double, clamped below at 6.103515625e-5 as llama.cpp does). A token's result depends on its own
// logits only. Throws rwd::Error (argument) on null pointers, n_expert outside 1..kRouteMaxExperts or k outside
// 1..n_expert.
void route_top_k(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renorm, int32_t* ids,
                 float* weights);

// Groups the (token, slot) pairs of ids [n_tokens, k] (each in 0..n_expert-1) by expert: the
// entries rows[offsets[e] .. offsets[e + 1]) are the pairs t*k + j routed to expert e, in
// ascending order. offsets: [n_expert + 1]; rows: [n_tokens * k]. Throws rwd::Error (argument) on
// an id out of range.
void group_by_expert(const int32_t* ids, int64_t n_tokens, int64_t k, int64_t n_expert, int32_t* offsets,
                     int32_t* rows);

} // namespace rwd
