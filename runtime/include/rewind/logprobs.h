// Log-probabilities of generated tokens and their top alternatives, computed from the logits row
// that decided each token: the same bits however the passes were batched, so speculative,
// batched and plain decoding report identical values.
#pragma once
#include <array>
#include <cstdint>
#include <span>

#include "rewind/tokenizer.h"

namespace rwd {

struct LogprobOptions {
    static constexpr int kMaxTop = 20;
    bool enabled = false;  // compute a TokenLogprob per generated token
    int top_n = 0;         // alternatives per token, [0, kMaxTop]
    // false: the model's own distribution, log-softmax of the raw logits. true: the distribution
    // after the sampler's mask, penalties, logit_bias and temperature (temperature <= 0 counts
    // as 1), before top-k / top-p / min-p: tokens the mask forbids have -inf.
    bool processed = false;
};

struct TopLogprob {
    TokenId token = 0;
    float logprob = 0;
};

// One generated token's log-probability and its top_n alternatives, most likely first (ties by
// lower id). Fixed size, so a generation stores them without allocating per token.
struct TokenLogprob {
    TokenId token = 0;
    float logprob = 0;
    int32_t n_top = 0;
    std::array<TopLogprob, LogprobOptions::kMaxTop> top{}; // [n_top] used, the rest zero
    std::span<const TopLogprob> alternatives() const { return std::span<const TopLogprob>(top).first(static_cast<size_t>(n_top)); }
};

// log-softmax(row * inv_temperature) at `token`, and the top_n largest entries, into `out`. The
// sum runs in double in id order, so the result depends only on the row's bits. -inf entries
// give -inf. Requires a row with at least one finite entry and top_n in [0, kMaxTop].
void compute_logprob(std::span<const float> row, double inv_temperature, TokenId token, int top_n, TokenLogprob& out);

} // namespace rwd
