// The speculative decoder: guess, verify every guess in one multi-token forward pass of the
// target, keep the longest prefix the target agrees with plus the target's own next token, and
// roll the KV cache back to it. Judges, stops and counts through DecodeState, the core plain
// and batched decoding share, so it stops exactly where plain decoding stops.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "rewind/context.h"
#include "rewind/decode_state.h"
#include "rewind/generate.h"
#include "rewind/kv_cache.h"
#include "rewind/sampler.h"
#include "rewind/speculate/guess_source.h"

namespace rwd::speculate {

using rwd::KPolicy;
using rwd::k_policy_name;

// What the decoder reports after each pass (tests check the cache against a replay).
struct PassReport {
    const KvCache& cache;                // holds tokens[0, tokens.size() - 1)
    std::span<const TokenId> tokens;     // prompt + everything emitted so far
    int proposed = 0;
    int accepted = 0;
    int k = 0;                           // the k asked of the source this pass
};
using PassObserver = std::function<void(const PassReport&)>;

struct SpeculativeOptions {
    GenerateOptions generate;                // max tokens, sampler, stop strings: as plain decoding
    int k = 8;                               // guesses per pass (the ceiling when not Fixed)
    KPolicy k_policy = KPolicy::Fixed;
    VerifyMode verify = VerifyMode::Exact;
    PassObserver on_pass{};                  // optional: called after each pass (tests, tracing)
    // KPolicy::Cost: seconds of a pass over 1, 2, ... rows on this machine (`rewind bench
    // --cost-curve`); empty: learned from this generation's own passes.
    std::vector<double> pass_seconds{};
    static constexpr int kMaxK = DecodeState::kMaxK; // k is also clamped to the context's max_batch - 1
};

// A multi-line human-readable summary (what `rewind generate --spec` prints to stderr).
std::string format_stats(const DecodeStats& s);

// tokens, stop and timings as from generate_plain, plus the speculation statistics.
struct SpeculativeResult : GenerateResult {
    DecodeStats stats;
};


// Speculative generation on a context and cache: guess, verify every guess in one pass, keep the
// longest agreed prefix plus the target's own token, roll the cache back. Same contract as
// generate_plain: the cache holds exactly prompt[0, cache.size()) with cache.size() <
// prompt.size(); afterwards it holds the prompt and every emitted token but the last. Exact
// mode: the tokens equal generate_plain's with opts.generate. `source` is reset to the prompt.
// Throws rwd::Error before anything runs as generate_plain does, and if k is outside [1, kMaxK]
// or the sampler options are invalid (argument), the cache belongs to another model or the
// target does not use Numerics::Exact (state); while running (shape) if the source returns
// probabilities that do not match its guesses. (The session form is in speculative_session.h.)
// `constraint` (null: none; not owned) restricts the output as generate_plain's does; guesses it
// forbids are cut before the pass, so in exact mode the tokens equal constrained generate_plain's.
SpeculativeResult generate_speculative(Context& target, KvCache& cache, const std::vector<TokenId>& prompt,
                                       GuessSource& source, const SpeculativeOptions& opts,
                                       const TokenCallback& on_token = {}, TokenConstraint* constraint = nullptr);

} // namespace rwd::speculate
