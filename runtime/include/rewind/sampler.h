// Token sampling: constraint masks, penalties (repetition, frequency, presence), logit bias,
// greedy, temperature, top-k, top-p, min-p. Randomness comes
// from a counter-based generator keyed by (seed, absolute position), so a position samples the
// same token however the forward passes were batched; speculative decoding relies on it.
// Threads: a Sampler keeps scratch buffers and belongs to one thread at a time.
//
// The filters always run in this fixed order (llama.cpp's common order):
//   0. constraint mask (optional, a TokenConstraint's bits): a token outside it gets logit -inf,
//      so every later step sees only the allowed tokens;
//   1. penalties over the last repeat_last_n history tokens (all of them when -1; the history is
//      every token before the position: prompt, earlier output, accepted guesses), each distinct
//      id once with c its count in that window: the repetition penalty first (llama.cpp's rule:
//      a positive logit is divided by it, a negative one multiplied), then
//      logit -= c * frequency_penalty + (c > 0 ? presence_penalty : 0) (OpenAI's definitions,
//      in llama.cpp's order and window);
//   1b. logit_bias: each (id, bias) adds bias to that id's logit, in order (a repeated id adds up);
//   2. greedy stops here: argmax of the penalised logits, lowest id on ties;
//   3. top-k: keep the k largest logits (ties broken by lower id);
//   4. top-p: softmax of the kept logits at temperature 1, keep the smallest prefix (largest
//      first, ties by lower id) whose mass reaches top_p (always at least one token);
//   5. min-p: keep tokens whose probability is >= min_p times the largest (at temperature 1);
//   6. temperature: divide the kept logits by it, softmax (in double) -> distribution();
//   7. draw: u = counter_uniform(seed, pos, stream 0); the first id, in id order, at which the
//      cumulative probability exceeds u. So sample() == sample_from(distribution(), pos, 0).
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "rewind/tokenizer.h"

namespace rwd {

struct SamplerOptions {
    float temperature = 0.0f;    // <= 0: greedy (argmax, lowest id on ties)
    int32_t top_k = 0;           // 0: off
    float top_p = 1.0f;          // 1: off
    float min_p = 0.0f;          // 0: off
    float repeat_penalty = 1.0f; // > 0; 1: off (llama.cpp's rule: divide positive logits, multiply negative)
    int32_t repeat_last_n = 64;  // how many previous tokens the penalties look at (-1: all, 0: none)
    float frequency_penalty = 0.0f; // [-2, 2]; 0: off. Subtracted once per occurrence in the window
    float presence_penalty = 0.0f;  // [-2, 2]; 0: off. Subtracted once if the id occurs in the window
    std::vector<std::pair<TokenId, float>> logit_bias; // (id in the vocabulary, bias in [-100, 100])
    uint64_t seed = 0;
    bool greedy() const { return temperature <= 0.0f; }
};

// Counter-based randomness: a uniform double in [0, 1) that depends only on its arguments.
double counter_uniform(uint64_t seed, uint64_t position, uint64_t stream);

class Sampler {
public:
    // Throws rwd::Error (argument) on out-of-range options (negative top_k, top_p outside (0,1],
    // repeat_last_n < -1, a penalty or bias outside its range, a biased id outside the vocabulary).
    Sampler(SamplerOptions opts, int64_t n_vocab);

    const SamplerOptions& options() const { return opts_; }

    // Stream 0 is sample()'s; speculative decoding uses others for its accept/reject draws.
    static constexpr uint64_t kSampleStream = 0;

    // Words of a mask over the vocabulary: token t is bit (t % 32) of mask[t / 32].
    int64_t mask_words() const { return (n_vocab_ + 31) / 32; }

    // The token for absolute position `pos` (the position the token will occupy), given the
    // logits [n_vocab] computed there and the tokens before it (for the penalties), among the
    // tokens `mask` allows (empty: all; else mask_words() words, step 0 above). Deterministic in
    // (options, pos, logits, history, mask). Reuses internal buffers. Throws rwd::Error
    // (argument) on a history id outside the vocabulary, a NaN / +inf logit, or logits that
    // leave no candidate (every allowed token at -inf, or a mask allowing none); (shape) on a
    // mask of another size.
    TokenId sample(const float* logits, int64_t pos, std::span<const TokenId> history,
                   std::span<const uint32_t> mask = {});

    // The distribution sample() draws from, over the whole vocabulary (zeros outside the
    // kept set). For greedy, one-hot on the argmax.
    void distribution(const float* logits, std::span<const TokenId> history, std::vector<float>& probs,
                      std::span<const uint32_t> mask = {});

    // Greedy only (options().greedy()): the token sample() picks without a mask, and `value`, its
    // logit after steps 1-1b (what the argmax compared). Under a mask that allows that token,
    // with `value` neither NaN nor -inf, it is also the token sample() picks with the mask: no
    // allowed token has a larger value, and an allowed lower id with an equal one would have won
    // here too. So a caller checks that one token against its constraint and builds the mask
    // only when it is refused. Throws as sample(); rwd::Error (state) when not greedy.
    TokenId greedy_unmasked(const float* logits, std::span<const TokenId> history, float& value);

    // Greedy only: the values greedy's argmax compares without a mask (steps 1-1b): `logits`
    // themselves when no penalty or bias applies, else a processed copy. Valid until the next
    // call. Throws as greedy_unmasked.
    std::span<const float> greedy_values(const float* logits, std::span<const TokenId> history);
    // greedy's pick among `values` (greedy_values'): the largest, the lowest id among equals.
    static TokenId greedy_argmax(std::span<const float> values);
    // The first top.size() (1-64) tokens of greedy's ranking of `values` (greedy_values'): the
    // larger value first, the lower id among equals, -inf left out, into `top` in that order;
    // returns how many (0 when a value is NaN: then only a mask decides). Under a constraint the
    // first of them it allows, every one before it being refused, is the token sample() picks
    // with the mask: no token outside the list ranks above it. So a refused argmax costs a few
    // checks rather than a whole mask. Throws rwd::Error (argument) on another count.
    static size_t greedy_ranking(std::span<const float> values, std::span<TokenId> top);

    // Steps 0-1 (the mask, the penalties) applied to `logits`: what greedy takes the argmax of and
    // the truncations start from. Valid until the next call. Throws as sample().
    std::span<const float> processed_logits(const float* logits, std::span<const TokenId> history,
                                            std::span<const uint32_t> mask = {});

    // Draws from an explicit distribution [n_vocab] (non-negative, any positive total: it is
    // normalised) with the randomness of (seed, pos, stream): the first id, in id order, at which
    // the cumulative mass exceeds u * total. Throws rwd::Error on a wrong size (shape), a
    // negative or non-finite entry, or a zero total (argument).
    TokenId sample_from(std::span<const float> probs, int64_t pos, uint64_t stream) const;

private:
    // Steps 0-6 above into probs_ (zeros outside the kept set).
    void compute(const float* logits, std::span<const TokenId> history, std::span<const uint32_t> mask);
    TokenId greedy_pick(const float* logits, std::span<const TokenId> history, std::span<const uint32_t> mask);
    void apply_mask(std::span<const uint32_t> mask); // step 0 on work_
    void penalise(std::span<const TokenId> history); // step 1 on work_

    SamplerOptions opts_;
    int64_t n_vocab_;
    std::vector<float> work_;   // [n_vocab] penalised logits
    std::vector<float> probs_;  // [n_vocab] final distribution
    std::vector<int32_t> idx_;  // [n_vocab] candidate ids
    std::vector<double> exps_;  // [n_vocab] exp((logit - max) / T) of the candidates, in idx_ order
    std::vector<int32_t> count_; // [n_vocab] penalty bookkeeping: occurrences in the window (0 between calls)
    bool penalised() const {
        return opts_.repeat_penalty != 1.0f || opts_.frequency_penalty != 0.0f || opts_.presence_penalty != 0.0f ||
               !opts_.logit_bias.empty();
    }
};

} // namespace rwd
