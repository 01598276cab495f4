// Prompt lookup: guesses copied from earlier in the prompt and the text generated so far, where
// the current suffix occurred before. Indexed incrementally as tokens are accepted.
#pragma once
#include "rewind/speculate/guess_source.h"
#include "rewind/speculate/token_index.h"

namespace rwd::speculate {

struct NgramSourceOptions {
    // Measured on workloads/ (pycode-4m, edit and free): n_min 1 guesses too often and wastes
    // passes on wrong guesses; n_max beyond 8 finds no more matches.
    NgramRange range{2, 8};
};

class NgramSource final : public GuessSource {
public:
    explicit NgramSource(NgramSourceOptions opts = {});

    std::string_view name() const override { return "ngram"; }
    void reset(const GenerationStart& start) override;
    // The latest earlier occurrence of the longest matching suffix, and what followed it. A copy
    // that runs into the present continues periodically (a loop "a b c a b" guesses "c a b ...").
    void propose(std::span<const TokenId> context, int k, Proposal& out) override;
    void accept(std::span<const TokenId> context) override;

    const TokenIndex& index() const { return index_; }

private:
    // Brings the index up to `context`: appends the new tokens, or rebuilds if it diverged.
    void sync(std::span<const TokenId> context);

    TokenIndex index_;
};

} // namespace rwd::speculate
