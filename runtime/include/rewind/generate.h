// Plain (non-speculative) generation and the stop rules every decoder shares: max tokens,
// end-of-generation tokens, stop strings, and a full context.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rewind/constraint.h"
#include "rewind/context.h"
#include "rewind/kv_cache.h"
#include "rewind/logprobs.h"
#include "rewind/sampler.h"

namespace rwd {

// Why a generation ended. Cancelled: the caller ended it (a TokenCallback returned false, or a
// batch request was cancelled): the one representation of a cancel, in C++ as in C.
enum class StopReason { MaxTokens, EndOfGeneration, StopString, ContextFull, Cancelled };
const char* stop_reason_name(StopReason r);

struct GenerateOptions {
    int64_t max_tokens = 128;              // >= 0; 0 generates nothing
    SamplerOptions sampler;
    std::vector<std::string> stop_strings; // generation ends after the token that completes one
    bool stop_at_eog = true;               // end on EOS/EOT (the token is kept in the output)
    LogprobOptions logprobs;               // per-token log-probabilities (off by default)
};

// Called with each token as it is decided; return false to stop (StopReason::Cancelled).
using TokenCallback = std::function<bool(TokenId)>;

struct GenerateResult {
    std::vector<TokenId> tokens; // generated ids (prompt excluded)
    StopReason stop = StopReason::MaxTokens;
    double prompt_seconds = 0, generate_seconds = 0;
    int64_t prompt_tokens = 0;   // tokens run for the prompt (excludes a reused prefix)
    std::vector<TokenLogprob> logprobs; // [tokens.size()] when opts.logprobs.enabled, else empty
};

// Tracks the stop rules as tokens arrive; shared by plain and speculative decoding so they stop
// at exactly the same token. After each token, in this order of precedence:
//   EndOfGeneration  the token is EOS/EOT and stop_at_eog;
//   StopString       the generated text (token pieces, the prompt excluded) now contains a stop
//                    string that ends inside this token's piece;
//   MaxTokens        max_tokens tokens have been generated;
//   ContextFull      the sequence now fills the cache (pos + 1 >= capacity): the token just
//                    decided occupies the last position, so no further token can be run.
// Keeps its own copy of the options it needs.
class StopChecker {
public:
    StopChecker(const GenerateOptions& opts, const Tokenizer& tok, int64_t capacity);
    // Feed the next generated token at absolute position `pos`; returns true if generation
    // must end after this token, with the reason in reason().
    bool push(TokenId id, int64_t pos);
    // Forgets the tokens pushed so far (a new generation with the same rules).
    void reset();
    StopReason reason() const { return reason_; }
    int64_t count() const { return count_; } // tokens pushed so far

private:
    int64_t max_tokens_;
    std::vector<std::string> stop_strings_;
    bool stop_at_eog_;
    const Tokenizer& tok_;
    int64_t capacity_;
    size_t max_stop_len_ = 0;
    int64_t count_ = 0;
    std::string tail_; // recent text, long enough to hold the longest stop string
    StopReason reason_ = StopReason::MaxTokens;
};

// Runs the prompt tokens that the cache does not hold yet, then decodes one token per pass.
// The cache must hold exactly prompt[0..cache.size()) (the caller's responsibility) with
// cache.size() < prompt.size(): at least the last prompt token is run here, since its logits
// give the first generated token. On return the cache holds the whole sequence (prompt, then
// tokens) except its last token, which is held back: its logits are where a later call would
// start (Session relies on this). When nothing can be generated (max_tokens == 0, or a prompt
// that fills the cache: StopReason::ContextFull) the prompt but its last token is run, without
// logits. Throws rwd::Error, the cache unchanged, on an empty prompt, an id outside the
// vocabulary, bad sampler options, negative max_tokens or an empty stop string (argument),
// cache.size() >= prompt.size() or a cache of another model (state), or a prompt that does not
// fit in the cache (capacity).
// `constraint` (null: none; not owned) restricts every generated token to those it allows, from
// its present state, and is advanced past each one (DecodeState::start): an end-of-generation
// token only where its text is complete, and it then ends the generation even with stop_at_eog
// off, so a generation that ends with StopReason::EndOfGeneration holds a complete sentence,
// and one cut by max_tokens, a stop string or a full context may not.
GenerateResult generate_plain(Context& ctx, KvCache& cache, const std::vector<TokenId>& prompt,
                              const GenerateOptions& opts, const TokenCallback& on_token = {},
                              TokenConstraint* constraint = nullptr);

} // namespace rwd
