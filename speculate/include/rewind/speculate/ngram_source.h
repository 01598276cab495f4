// Prompt lookup: guesses copied from earlier in the prompt and the text generated so far, where
// the current suffix occurred before. Indexed incrementally as tokens are accepted.
#pragma once
#include <memory>

#include "rewind/speculate/guess_source.h"
#include "rewind/speculate/token_index.h"

namespace rwd::speculate {

struct NgramSourceOptions {
    // Measured on workloads/ (pycode-4m, edit and free): n_min 1 guesses too often and wastes
    // passes on wrong guesses; n_max beyond 8 finds no more matches.
    NgramRange range{2, 8};
    // 1: a chain, the continuation of the latest occurrence (what prompt lookup always did).
    // More: a tree over the continuations of up to max_occurrences occurrences of the longest
    // match, at most `branches` children per node, ranked by how often each continuation
    // occurred, with weights (count / parent's count). >= 1.
    int branches = 1;
    int max_occurrences = 64; // occurrences of a match visited per proposal (>= 1): bounds the work
};

class ContinuationTree;

class NgramSource final : public GuessSource {
public:
    // Throws rwd::Error (argument) for an invalid range, branches < 1 or max_occurrences < 1.
    explicit NgramSource(NgramSourceOptions opts = {});
    ~NgramSource() override;
    NgramSource(NgramSource&&) noexcept;

    std::string_view name() const override { return "ngram"; }
    void reset(const GenerationStart& start) override;
    // The latest earlier occurrence of the longest matching suffix, and what followed it. A copy
    // that runs into the present continues periodically (a loop "a b c a b" guesses "c a b ...").
    // With branches > 1, the tree of what followed its occurrences (parents and weights set).
    void propose(std::span<const TokenId> context, int k, Proposal& out) override;
    void accept(std::span<const TokenId> context) override;

    const TokenIndex& index() const { return index_; }

private:
    // Brings the index up to `context`: appends the new tokens, or rebuilds if it diverged.
    void sync(std::span<const TokenId> context);

    NgramSourceOptions opts_;
    TokenIndex index_;
    Continuations found_;                  // reused per proposal
    std::unique_ptr<ContinuationTree> tree_; // null while branches == 1
};

} // namespace rwd::speculate
