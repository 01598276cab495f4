// The TokenConstraint over a grammar: masks and accepts from grammar::TokenMatcher, snapshots are
// the matcher's, and forced tokens are the forced bytes as the tokenizer would encode them, kept
// only as far as the grammar allows each one.
#include "rewind/speculate/grammar_constraint.h"

#include <algorithm>

#include "rewind/error.h"

namespace rwd {

namespace {

class GrammarConstraint final : public TokenConstraint {
public:
    GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> g, std::shared_ptr<const grammar::VocabIndex> vocab,
                      std::shared_ptr<grammar::LocalMaskCache> masks, const Tokenizer& tok)
        : tm_(std::move(g), std::move(vocab), {}, std::move(masks)), tok_(tok) {}

    void reset() override { tm_.matcher().reset(); }
    void fill_mask(std::span<uint32_t> mask) override { tm_.fill_mask(mask); }
    bool allows(TokenId t) override { return tm_.allows(t); }
    bool accept(TokenId t) override { return tm_.accept(t); }
    bool is_complete() const override { return matcher().is_complete(); }
    bool is_finished() const override { return matcher().is_finished(); }
    Snapshot snapshot() const override { return matcher().snapshot(); }
    void rollback(Snapshot s) override { tm_.matcher().rollback(s); }
    void forced_tokens(size_t max_tokens, std::vector<TokenId>& out) override;

private:
    grammar::TokenMatcher tm_;
    const Tokenizer& tok_;

    const grammar::Matcher& matcher() const { return tm_.matcher(); }
};

void GrammarConstraint::forced_tokens(size_t max_tokens, std::vector<TokenId>& out) {
    if (max_tokens == 0) return;
    grammar::Matcher& m = tm_.matcher();
    // Bytes of a few tokens at most: long forced runs are cut, the rest comes on a later call.
    const std::string text = m.forced_bytes(std::min<size_t>(max_tokens * 16, 1024));
    // Empty, or the rest of a character a token left unfinished: nothing a tokenizer encodes as such.
    if (text.empty() || (static_cast<unsigned char>(text[0]) & 0xC0) == 0x80) return;
    const std::vector<TokenId> ids = tok_.encode(text, AddBos::No, SpecialTokens::AsText);
    const auto start = m.snapshot();
    size_t taken = 0;
    for (TokenId t : ids) {
        if (taken == max_tokens || !tm_.accept(t)) break; // a token past the forced text's end may not fit
        out.push_back(t);
        ++taken;
    }
    m.rollback(start);
}

} // namespace

std::unique_ptr<TokenConstraint> make_grammar_constraint(std::shared_ptr<const grammar::CompiledGrammar> g,
                                                         std::shared_ptr<const grammar::VocabIndex> vocab,
                                                         const Tokenizer& tok,
                                                         std::shared_ptr<grammar::LocalMaskCache> masks) {
    if (!g || !vocab) throw Error(ErrorCode::argument, "make_grammar_constraint: null grammar or vocabulary index");
    if (vocab->n_vocab() != tok.n_vocab())
        throw Error(ErrorCode::argument, "make_grammar_constraint: the vocabulary index is not the tokenizer's");
    return std::make_unique<GrammarConstraint>(std::move(g), std::move(vocab), std::move(masks), tok);
}

std::unique_ptr<TokenConstraint> make_grammar_constraint(std::string_view gbnf, const Tokenizer& tok, grammar::GrammarCache* cache) {
    grammar::GrammarCache local(1);
    const grammar::GrammarCache::Compiled c = (cache ? *cache : local).get(gbnf, tok);
    return make_grammar_constraint(c.grammar, c.vocab, tok, c.local_masks);
}

} // namespace rwd
