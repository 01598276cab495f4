// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition penalty. Randomness comes
// from a counter-based generator keyed by (seed, absolute position), so a position samples the
// same token however the forward passes were batched; speculative decoding relies on it.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "rewind/tokenizer.h"

namespace rewind {

struct SamplerOptions {
    float temperature = 0.0f;    // <= 0: greedy (argmax, lowest id on ties)
    int32_t top_k = 0;           // 0: off
    float top_p = 1.0f;          // 1: off
    float min_p = 0.0f;          // 0: off
    float repeat_penalty = 1.0f; // 1: off (llama.cpp's rule: divide positive logits, multiply negative)
    int32_t repeat_last_n = 64;  // how many previous tokens the penalty looks at
    uint64_t seed = 0;
    bool greedy() const { return temperature <= 0.0f; }
};

// Counter-based randomness: a uniform double in [0, 1) that depends only on its arguments.
double counter_uniform(uint64_t seed, uint64_t position, uint64_t stream);

class Sampler {
public:
    // Throws rewind::Error on out-of-range options (negative top_k, top_p outside (0,1], ...).
    Sampler(SamplerOptions opts, int64_t n_vocab);

    const SamplerOptions& options() const { return opts_; }

    // The token for absolute position `pos` (the position the token will occupy), given the
    // logits computed there and the tokens before it (for the repetition penalty).
    // Deterministic in (options, pos, logits, history). Reuses internal buffers.
    TokenId sample(const float* logits, int64_t pos, std::span<const TokenId> history);

    // The distribution sample() draws from, over the whole vocabulary (zeros outside the
    // kept set). For greedy, one-hot on the argmax.
    void distribution(const float* logits, std::span<const TokenId> history, std::vector<float>& probs);

    // Draws from an explicit distribution with the randomness of (pos, stream).
    TokenId sample_from(std::span<const float> probs, int64_t pos, uint64_t stream) const;

private:
    SamplerOptions opts_;
    int64_t n_vocab_;
    std::vector<float> work_;
    std::vector<int32_t> idx_;
};

} // namespace rewind
