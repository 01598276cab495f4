// The TokenConstraint over a grammar: masks and accepts from grammar::TokenMatcher, snapshots are
// the matcher's, and forced tokens are the forced bytes as the tokenizer would encode them (or
// character by character), kept only as far as the grammar allows each one.
#include "rewind/speculate/grammar_constraint.h"

#include <algorithm>
#include <unordered_map>

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
    void forced_characters(size_t max_tokens, std::vector<TokenId>& out) override;

private:
    grammar::TokenMatcher tm_;
    const Tokenizer& tok_;
    // Each character's encoding alone, by its UTF-8 bytes packed in a word: asked of the
    // tokenizer once per character (forced_characters runs every pass). Bounded: cleared past 4096.
    std::unordered_map<uint32_t, std::vector<TokenId>> char_ids_;
    std::vector<TokenId> ids_; // forced_characters scratch

    const grammar::Matcher& matcher() const { return tm_.matcher(); }

    // The forced text (at most max_bytes), or "" when there is none a tokenizer could encode:
    // empty, or the rest of a character a token left unfinished.
    std::string forced_text(size_t max_bytes);
    // Appends ids to `out` while the grammar takes them (a token past the forced text's end may
    // not fit), at most max_tokens; the state is unchanged after.
    void take(const std::vector<TokenId>& ids, size_t max_tokens, std::vector<TokenId>& out);
};

std::string GrammarConstraint::forced_text(size_t max_bytes) {
    if (max_bytes == 0) return {};
    // Long forced runs are cut, the rest comes on a later call.
    std::string text = tm_.matcher().forced_bytes(std::min<size_t>(max_bytes, 1024));
    if (!text.empty() && (static_cast<unsigned char>(text[0]) & 0xC0) == 0x80) text.clear();
    return text;
}

void GrammarConstraint::take(const std::vector<TokenId>& ids, size_t max_tokens, std::vector<TokenId>& out) {
    grammar::Matcher& m = tm_.matcher();
    const auto start = m.snapshot();
    size_t taken = 0;
    for (TokenId t : ids) {
        if (taken == max_tokens || !tm_.accept(t)) break;
        out.push_back(t);
        ++taken;
    }
    m.rollback(start);
}

void GrammarConstraint::forced_tokens(size_t max_tokens, std::vector<TokenId>& out) {
    const std::string text = forced_text(max_tokens * 16); // bytes of a few tokens at most
    if (!text.empty()) take(tok_.encode(text, AddBos::No, SpecialTokens::AsText), max_tokens, out);
}

void GrammarConstraint::forced_characters(size_t max_tokens, std::vector<TokenId>& out) {
    const std::string text = forced_text(max_tokens * 4); // max_tokens characters at most
    ids_.clear();
    for (size_t i = 0; i < text.size() && ids_.size() < max_tokens;) {
        const auto lead = static_cast<unsigned char>(text[i]);
        const size_t len = lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; // one UTF-8 sequence
        const size_t n = std::min(len, text.size() - i);
        uint32_t key = 0;
        for (size_t b = 0; b < n; ++b) key = key << 8 | static_cast<unsigned char>(text[i + b]);
        auto it = char_ids_.find(key);
        if (it == char_ids_.end()) {
            if (char_ids_.size() >= 4096) char_ids_.clear();
            it = char_ids_.emplace(key, tok_.encode(std::string_view(text).substr(i, n), AddBos::No, SpecialTokens::AsText)).first;
        }
        ids_.insert(ids_.end(), it->second.begin(), it->second.end());
        i += n;
    }
    take(ids_, max_tokens, out);
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
