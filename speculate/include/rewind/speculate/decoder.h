// The speculative decoder: guess, verify every guess in one multi-token forward pass of the
// target, keep the longest prefix the target agrees with plus the target's own next token, and
// roll the KV cache back to it. Stops exactly where plain decoding stops (shared StopChecker).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "rewind/context.h"
#include "rewind/generate.h"
#include "rewind/kv_cache.h"
#include "rewind/sampler.h"
#include "rewind/speculate/guess_source.h"

namespace rwd::speculate {

// How many guesses each pass asks for. Only the pass structure depends on it, never the output.
enum class KPolicy {
    Fixed,     // always k
    Adaptive,  // starts at 1; a pass that accepts all k_cur guesses grows k_cur by 1; a miss
               // after a accepted guesses sets k_cur to a + 1 (what would have sufficed);
               // always within [1, k]. Passes where the source ran out of guesses (fewer than
               // k_cur) leave k_cur alone: they say nothing about acceptance. Deterministic.
};
const char* k_policy_name(KPolicy p);

struct SpeculativeOptions {
    GenerateOptions generate;                // max tokens, sampler, stop strings: as plain decoding
    int k = 8;                               // guesses per pass (the ceiling when not Fixed)
    KPolicy k_policy = KPolicy::Fixed;
    VerifyMode verify = VerifyMode::Exact;
    static constexpr int kMaxK = 255;        // k is also clamped to the context's max_batch - 1
};

// Per-generation statistics. A "pass" is one target forward pass after the prompt.
struct SpecStats {
    int64_t passes = 0;
    int64_t proposed = 0;       // guesses verified
    int64_t accepted = 0;       // guesses the target agreed with
    int64_t emitted = 0;        // tokens output (accepted guesses + the target's own), after stops
    int64_t empty_passes = 0;   // passes with no guess (the source had none): plain decode steps
    std::vector<int64_t> proposed_at; // [i]: passes that verified a guess at index i (0 = first)
    std::vector<int64_t> accepted_at; // [i]: passes that accepted the guess at index i
    double prompt_seconds = 0;  // prompt prefill (all but the last prompt token)
    double propose_seconds = 0; // inside the guess source (propose + accept)
    double verify_seconds = 0;  // target forward passes and the accept/reject decisions
    double total_seconds = 0;   // the whole call, prompt included

    double acceptance_rate() const { return proposed ? static_cast<double>(accepted) / static_cast<double>(proposed) : 0.0; }
    double tokens_per_pass() const { return passes ? static_cast<double>(emitted) / static_cast<double>(passes) : 0.0; }
    double guesses_per_pass() const { return passes ? static_cast<double>(proposed) / static_cast<double>(passes) : 0.0; }
};

// A multi-line human-readable summary (what `rewind generate --spec` prints to stderr).
std::string format_stats(const SpecStats& s);

// tokens, stop and timings as from generate_plain, plus the speculation statistics.
struct SpeculativeResult : GenerateResult {
    SpecStats stats;
};

// What the decoder reports after each pass (tests check the cache against a replay).
struct PassReport {
    const KvCache& cache;                // holds tokens[0, tokens.size() - 1)
    std::span<const TokenId> tokens;     // prompt + everything emitted so far
    int proposed = 0;
    int accepted = 0;
    int k = 0;                           // the k asked of the source this pass
};
using PassObserver = std::function<void(const PassReport&)>;

class SpeculativeDecoder {
public:
    // Keeps references to target, cache and source; all must outlive the decoder. Throws
    // rwd::Error if k is outside [1, kMaxK] or the sampler options are invalid (argument), or
    // the cache belongs to another model or the target context does not use Numerics::Exact
    // (state). generate() throws as generate_plain does, and (shape) if the source returns
    // probabilities that do not match its guesses.
    SpeculativeDecoder(Context& target, KvCache& cache, GuessSource& source, SpeculativeOptions opts);

    // Same contract as generate_plain: the cache holds exactly prompt[0, cache.size()) with
    // cache.size() < prompt.size(); afterwards it holds the prompt and every emitted token but
    // the last. Exact mode: the tokens equal generate_plain's with opts.generate.
    SpeculativeResult generate(const std::vector<TokenId>& prompt, const TokenCallback& on_token = {});

    void set_pass_observer(PassObserver obs) { observer_ = std::move(obs); }
    const SpeculativeOptions& options() const { return opts_; }
    GuessSource& source() { return source_; }

    // Randomness streams of rejection mode, distinct from the sampler's and the draft's.
    static constexpr uint64_t kAcceptStream = 0x616363657074ull;   // "accept"
    static constexpr uint64_t kResidualStream = 0x7265736964ull;   // "resid"

private:
    // Decides the token at position `pos` from logits `row`, given guess index i of the pass
    // (i == n_guesses: no guess left). Returns true if the guess stands.
    bool judge(const float* row, int64_t pos, int i, TokenId& out);

    Context& ctx_;
    KvCache& cache_;
    GuessSource& source_;
    SpeculativeOptions opts_;
    Sampler sampler_;
    PassObserver observer_;
    // Reused across passes and generations: nothing is allocated per token once warm.
    std::vector<TokenId> tokens_;
    std::vector<TokenId> batch_;
    Proposal proposal_;
    std::vector<float> p_, residual_;
};

// One-shot form of SpeculativeDecoder::generate, shaped like generate_plain.
SpeculativeResult generate_speculative(Context& target, KvCache& cache, const std::vector<TokenId>& prompt,
                                       GuessSource& source, const SpeculativeOptions& opts,
                                       const TokenCallback& on_token = {});

} // namespace rwd::speculate
