// Forced text as guesses: where a constraint admits only one continuation (a key, punctuation,
// the rest of an enum value), its tokenization is proposed and verified like any guess, so it
// costs one pass, not one pass per token, and the output cannot change.
#pragma once
#include <span>
#include <string_view>
#include <vector>

#include "rewind/constraint.h"
#include "rewind/speculate/guess_source.h"

namespace rwd::speculate {

// Proposes TokenConstraint::forced_tokens (the constraint GenerationStart::constraint names; none:
// no guesses) as a chain, marked in Proposal::forced. With an inner source (the decoders compose
// every source with one under a constraint), the inner source continues where the forced text
// ends: its guesses for the context followed by the forced tokens, k minus their number, hang
// under the last forced token; when nothing is forced, the inner source's own guesses are the
// proposal. Guesses the constraint forbids are cut by the verification core, never here.
// The forced text is split as the tokenizer would (TokenConstraint::forced_tokens) or character by
// character (forced_characters), whichever the model itself has written more of in this
// generation: after each pass, the tokens it emitted are compared with both splits of the text
// that was forced there (the tokenizer's wins ties, and so starts). Only the guesses change,
// never the output.
// Threads: as any guess source; the constraint is read (forced_tokens) only inside propose().
class ForcedSource final : public GuessSource {
public:
    // `inner` (null: forced text only) is not owned and must outlive this source.
    explicit ForcedSource(GuessSource* inner = nullptr);

    std::string_view name() const override { return name_; } // "forced", "forced+ngram"
    void reset(const GenerationStart& start) override;
    void propose(std::span<const TokenId> context, int k, Proposal& out) override;
    void accept(std::span<const TokenId> context) override;

    GuessSource* inner() const { return inner_; }

private:
    GuessSource* inner_;
    TokenConstraint* constraint_ = nullptr;
    std::string name_;
    std::vector<TokenId> forced_, context_; // propose() scratch, reused
    // Both splits of the last forced text, the context length they followed, and how many of
    // the model's tokens matched each split so far in this generation.
    std::vector<TokenId> split_tok_, split_chr_;
    size_t split_at_ = 0;
    int64_t matched_tok_ = 0, matched_chr_ = 0;
    Proposal trial_;                        // the inner source's proposal after the forced text
};

// The source a decoder runs under `constraint`: `source` itself when there is no constraint or
// it already is a ForcedSource, else `holder` (constructed here) wrapping it.
GuessSource& with_forced(GuessSource& source, const TokenConstraint* constraint, std::unique_ptr<ForcedSource>& holder);

} // namespace rwd::speculate
