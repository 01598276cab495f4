// The one verification core: a sequence's decoding state (tokens, sampler, stop rules, guess
// budget, statistics) and its judge-then-commit step. Plain, speculative and batched decoding
// all decode through it, so they decide, stop and count exactly alike.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rewind/generate.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "rewind/sampler.h"

namespace rwd {

// How guesses are judged.
enum class VerifyMode {
    Exact,     // a guess stands iff it is the token the target's sampler picks there: output is
               // bit-identical to plain decoding
    Rejection, // speculative sampling (accept x with probability min(1, p(x)/q(x))): output has
               // the target's distribution, not plain decoding's exact tokens
};
const char* verify_mode_name(VerifyMode m);

// How many guesses each pass asks for. Only the pass structure depends on it, never the output.
enum class KPolicy {
    Fixed,     // always k
    Adaptive,  // starts at 1; a pass that accepts all k_cur guesses grows k_cur by 1; a miss
               // after a accepted guesses sets k_cur to a + 1 (what would have sufficed);
               // always within [1, k]. Passes where the source ran out of guesses (fewer than
               // k_cur) leave k_cur alone: they say nothing about acceptance. Deterministic.
};
const char* k_policy_name(KPolicy p);

// Per-generation statistics. A "pass" is one forward pass after the prompt that yields tokens.
struct DecodeStats {
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

// How a sequence speculates: at most k_max guesses a pass (0: plain decoding), how many of them
// each pass asks for, and how they are judged.
struct Speculation {
    int k_max = 0;
    KPolicy k_policy = KPolicy::Fixed;
    VerifyMode verify = VerifyMode::Exact;
};

// Throws rwd::Error, naming `who`, unless `prompt` can start a generation on a cache holding its
// first `cached` tokens with room for `capacity` positions: argument (empty, an id outside the
// vocabulary), state (cached >= prompt size: at least the last prompt token must be run),
// capacity (the prompt does not fit).
void check_prompt(const Model& model, std::span<const TokenId> prompt, int64_t cached, int64_t capacity,
                  const char* who);

// One sequence being decoded. A pass runs [pending token, guesses...] at positions pc, pc + 1, ...
// of the sequence's cache (the pending token is tokens().back(), the last token decided and not
// yet in the cache); judge() walks the rows in order, emitting the token decided at each
// position and stopping at the first guess that does not stand (or at a stop rule); commit()
// then rolls the cache back to the emitted prefix (all but the newest emitted token, which is
// the next pass's pending one). The first pass after a prompt may instead be the prompt's last
// row alone (Logits::Last): it is judged like a pass without guesses.
// Threads: belongs to one thread at a time. Allocates only while tokens() grows beyond what
// start() reserved.
class DecodeState {
public:
    // Throws rwd::Error (argument) on invalid sampler options, negative max_tokens, an empty stop
    // string, or spec.k_max outside [0, kMaxK].
    DecodeState(const Model& model, const GenerateOptions& opts, int64_t capacity, Speculation spec = {});

    static constexpr int kMaxK = 255;

    // A new generation from `prompt` (checked by the caller: check_prompt). Clears the stop
    // rules' progress and sizes the statistics; keeps the k controller's state only between the
    // passes of one generation.
    void start(std::span<const TokenId> prompt);

    // Nothing can be generated from the prompt (max_tokens 0, or a prompt filling the cache):
    // the stop reason then is final (MaxTokens or ContextFull) and done() is true.
    bool nothing_to_generate(int64_t prompt_size);

    // Guesses the next pass may verify when the pending token goes to position `pc`: the k
    // controller's choice, every guess landing inside the cache, and no more than the tokens
    // still allowed (a pass emits at most guesses + 1); also at most `limit`. 0 when done.
    int room(int64_t pc, int64_t limit) const;

    // The next pass: keeps the first guesses that are usable (at most `room` of them, up to the
    // first id outside the vocabulary) and returns the pass's rows [pending, kept guesses...];
    // `probs` ([guesses.size(), n_vocab], or empty for point masses) is what rejection mode
    // judges them by; it is read, not copied, so it must stay valid until judge() returns. `pc` is the cache position of the pending token. Throws rwd::Error (shape)
    // if probs has another size, naming `source`. The span stays valid until the next call.
    std::span<const TokenId> begin_pass(int64_t pc, std::span<const TokenId> guesses, std::span<const float> probs,
                                        int room, std::string_view source = "guess source");
    // Fewer guesses than begin_pass kept (a batch trims them): keeps the first `m`.
    void keep_guesses(size_t m);
    size_t guesses() const { return rows_.size() - 1; }
    std::span<const TokenId> rows() const { return rows_; }

    // Judges the pass's rows from their logits ([rows, n_vocab], row 0 the pending token's) in
    // order: pushes each decided token (through the stop rules and `on_token`, whose false ends
    // the generation with StopReason::Cancelled) until a guess does not stand or a stop hits.
    // Updates the statistics and the k controller. Returns the guesses accepted.
    int judge(std::span<const float> logits, const TokenCallback& on_token = {});
    // Rolls `cache` back to the emitted prefix of the last judged pass: keeps pc + emitted.
    void commit(KvCache& cache) const;
    // Tokens the last judged pass emitted.
    int64_t emitted_last() const { return emitted_; }

    // Ends the generation before its next pass (StopReason::Cancelled).
    void cancel();

    bool done() const { return done_; }
    StopReason stop() const { return stop_; }
    const std::vector<TokenId>& tokens() const { return tokens_; } // prompt + every emitted token
    std::span<const TokenId> generated() const {
        return std::span<const TokenId>(tokens_).subspan(prompt_size_);
    }
    DecodeStats& stats() { return stats_; }
    const DecodeStats& stats() const { return stats_; }

    // Randomness streams of rejection mode, distinct from the sampler's and a draft's.
    static constexpr uint64_t kAcceptStream = 0x616363657074ull; // "accept"
    static constexpr uint64_t kResidualStream = 0x7265736964ull; // "resid"

private:
    // The token decided at position `pos` from logits `row`, given guess index i of the pass
    // (i == guesses(): no guess left). Returns true if the guess stands.
    bool decide(const float* row, int64_t pos, size_t i, TokenId& out);
    bool push(TokenId t, int64_t pos, const TokenCallback& on_token);
    void observe_k(int proposed, int accepted);

    const Model& model_;
    int64_t max_tokens_;
    int64_t capacity_;
    Speculation spec_;
    Sampler sampler_;
    StopChecker checker_;
    std::vector<TokenId> tokens_;
    size_t prompt_size_ = 0;
    std::vector<TokenId> rows_;   // [1 + guesses] this pass
    std::span<const float> probs_; // [guesses, n_vocab] or empty: the caller's, valid through judge()
    int64_t pc_ = 0, emitted_ = 0;
    int k_cur_ = 0;
    bool done_ = false;
    StopReason stop_ = StopReason::MaxTokens;
    DecodeStats stats_;
    std::vector<float> p_, residual_; // rejection mode scratch [n_vocab]
};

} // namespace rwd
