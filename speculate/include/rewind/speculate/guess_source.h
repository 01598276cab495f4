// The one interface every guesser implements: given the tokens so far, propose the next few.
// The decoder verifies guesses against the target, so a source can be wrong but never unsafe.
// Threads: a guess source keeps state between calls and belongs to
// one thread at a time; sources of different threads may share one (immutable) Model.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "rewind/decode_state.h"
#include "rewind/sampler.h"
#include "rewind/tokenizer.h"

namespace rwd::speculate {

// How the decoder judges guesses (rewind/decode_state.h).
using rwd::VerifyMode;
using rwd::verify_mode_name;

// What a generation starts from, told to the source before its first proposal.
struct GenerationStart {
    std::span<const TokenId> prompt;
    VerifyMode verify = VerifyMode::Exact;
    SamplerOptions sampler; // the target's sampling settings (a draft model mimics them)
};

// Guesses for the tokens after a context.
struct Proposal {
    std::vector<TokenId> tokens;
    // Empty when the guesses are plain tokens (a point mass for rejection sampling). Otherwise
    // the distribution each guess was drawn from, [tokens.size(), n_vocab] row-major.
    std::vector<float> probs;
    void clear() {
        tokens.clear();
        probs.clear();
    }
};

class GuessSource {
public:
    virtual ~GuessSource() = default;
    virtual std::string_view name() const = 0;

    // A new generation from `start.prompt`; forgets anything learned from a previous one
    // (reference documents stay).
    virtual void reset(const GenerationStart& start) = 0;

    // Puts into `out` (which arrives empty) up to k guesses, possibly none, for the tokens that
    // follow `context` (the prompt and every token generated so far). Throws rwd::Error
    // (argument) if k < 1.
    virtual void propose(std::span<const TokenId> context, int k, Proposal& out) = 0;

    // The context now is `context` (what it was at the last proposal plus the accepted guesses
    // and the target's token). A source whose state ran ahead (a draft model's cache) rolls back.
    virtual void accept(std::span<const TokenId> context) = 0;
};

// Throws rwd::Error (argument) naming the source unless k >= 1.
void check_k(std::string_view source, int k);

} // namespace rwd::speculate
