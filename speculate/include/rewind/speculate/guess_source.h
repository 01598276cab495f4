// The one interface every guesser implements: given the tokens so far, propose the next few.
// The decoder verifies guesses against the target, so a source can be wrong but never unsafe.
// Threads: a guess source keeps state between calls and belongs to
// one thread at a time; sources of different threads may share one (immutable) Model.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "rewind/constraint.h"
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
    // The generation's constraint, or null. Read only inside propose() (forced text); a source
    // must not advance it (the verification core does).
    TokenConstraint* constraint = nullptr;
};

// Guesses for the tokens after a context: a chain (parents empty: guess i follows guess i - 1,
// guess 0 the context) or a tree (parents[i] in [-1, i): the guess that guess i follows, -1 for
// the context itself; siblings hold different tokens). Guesses come in the source's order of
// preference, every parent before its children, so a decoder that verifies fewer keeps a prefix,
// which is still a tree. A chain is the tree whose parents are -1, 0, 1, ...
struct Proposal {
    std::vector<TokenId> tokens;
    std::vector<int32_t> parents; // empty (a chain) or [tokens.size()]
    // Empty, or [tokens.size()]: the source's estimate, in [0, 1], that guess i stands once its
    // parent has (e.g. how often that continuation followed the match). Decoders size trees
    // from it; it never changes a token.
    std::vector<float> weights;
    // Empty when the guesses are plain tokens (a point mass for rejection sampling). Otherwise
    // the distribution each guess was drawn from, [tokens.size(), n_vocab] row-major.
    std::vector<float> probs;
    // The first `forced` guesses (a chain from the context) are text the constraint forces
    // (ForcedSource): counted apart in DecodeStats.
    int32_t forced = 0;
    void clear() {
        tokens.clear();
        parents.clear();
        weights.clear();
        probs.clear();
        forced = 0;
    }
    bool is_chain() const { return parents.empty(); }
    // Guess i's parent (-1: the context), for chains and trees alike.
    int32_t parent(size_t i) const { return parents.empty() ? static_cast<int32_t>(i) - 1 : parents[i]; }
};

// Scratch of order_best_first, reused from call to call (nothing allocated once warm).
struct BestFirstScratch {
    std::vector<int32_t> order, where;
    std::vector<double> chance;
    Proposal tmp;
};
// Reorders p's guesses by `chance` (one per guess, a child never above its parent), highest first,
// ties in their present order, so every parent stays before its children: parents are remapped,
// weights and probs follow their guesses, and `chance` is reordered alike. Keeping a prefix of
// the result keeps the most likely guesses, still a tree.
void order_best_first(Proposal& p, std::vector<double>& chance, BestFirstScratch& scratch);

// Throws rwd::Error (shape) naming `source` unless `p` is well formed: parents empty or one per
// guess with parents[i] in [-1, i), no two siblings with the same token, weights empty or one per
// guess in [0, 1].
void check_proposal(std::string_view source, const Proposal& p);

class GuessSource {
public:
    virtual ~GuessSource() = default;
    virtual std::string_view name() const = 0;

    // A new generation from `start.prompt`; forgets anything learned from a previous one
    // (reference documents stay).
    virtual void reset(const GenerationStart& start) = 0;

    // Puts into `out` (which arrives empty) up to k guesses, possibly none, for the tokens that
    // follow `context` (the prompt and every token generated so far): a chain, or a tree when
    // the source is configured to branch (its options' `branches`). Throws rwd::Error
    // (argument) if k < 1.
    virtual void propose(std::span<const TokenId> context, int k, Proposal& out) = 0;

    // The context now is `context` (what it was at the last proposal plus the accepted guesses
    // and the target's token), after every pass, the generation's last included. A source whose
    // state ran ahead (a draft model's cache) rolls back.
    virtual void accept(std::span<const TokenId> context) = 0;
};

// Throws rwd::Error (argument) naming the source unless k >= 1.
void check_k(std::string_view source, int k);

} // namespace rwd::speculate
