// The triggered grammar: a KMP automaton watches the free text for the trigger; the grammar's
// TokenMatcher takes over from the trigger's first byte. One history entry per accepted token
// (mode, partial trigger, the matcher's snapshot), so snapshots are indexes into it.
#include "rewind/speculate/triggered_constraint.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "rewind/error.h"

namespace rwd {

namespace {
constexpr size_t kMaxTriggerBytes = 256;
} // namespace

GrammarTrigger::GrammarTrigger(std::string text, const Tokenizer& tok, std::shared_ptr<const grammar::VocabIndex> vocab)
    : text_(std::move(text)), vocab_(std::move(vocab)) {
    if (text_.empty() || text_.size() > kMaxTriggerBytes)
        throw Error(ErrorCode::argument,
                    "grammar trigger: the text must have 1 to 256 bytes, not " + std::to_string(text_.size()));
    if (!vocab_ || vocab_->n_vocab() != tok.n_vocab())
        throw Error(ErrorCode::argument, "grammar trigger: the vocabulary index is missing or not the tokenizer's");
    // The KMP automaton: delta_[k][b] = longest prefix of text_ that (text_[0, k) + b) ends with.
    const size_t n = text_.size();
    delta_.assign(n * 256, 0);
    uint32_t fallback = 0; // the state the text without its first byte reaches: where k's mismatches go
    for (size_t k = 0; k < n; ++k) {
        const auto row = delta_.begin() + static_cast<std::ptrdiff_t>(k * 256);
        if (k > 0) std::copy_n(delta_.begin() + static_cast<std::ptrdiff_t>(size_t{fallback} * 256), 256, row); // row 0: zeros
        delta_[k * 256 + static_cast<uint8_t>(text_[k])] = static_cast<uint16_t>(k + 1);
        if (k > 0) fallback = delta_[size_t{fallback} * 256 + static_cast<uint8_t>(text_[k])];
    }
    // A token completes an occurrence only through the trigger's last byte: test those from every state.
    const char last = text_.back();
    for (TokenId t = 0; t < vocab_->n_vocab(); ++t) {
        const std::string_view b = vocab_->bytes(t);
        if (b.empty() || std::memchr(b.data(), last, b.size()) == nullptr) continue;
        bool completes = false;
        for (uint32_t k0 = 0; k0 < n && !completes; ++k0) {
            uint32_t k = k0;
            for (char c : b)
                if ((k = step(k, static_cast<uint8_t>(c))) == n) break;
            completes = k == n;
        }
        if (completes) completers_.push_back(t);
    }
    const std::vector<TokenId> ids = tok.encode(text_, AddBos::No, SpecialTokens::Parse);
    if (ids.size() == 1 && vocab_->bytes(ids[0]).empty() && !vocab_->is_eog(ids[0])) token_ = ids[0];
}

namespace {

class TriggeredConstraint final : public TokenConstraint {
public:
    TriggeredConstraint(std::shared_ptr<const GrammarTrigger> trigger, std::shared_ptr<const grammar::CompiledGrammar> g,
                        std::shared_ptr<grammar::LocalMaskCache> masks, const Tokenizer& tok, size_t max_matches);

    void reset() override;
    void fill_mask(std::span<uint32_t> mask) override;
    bool allows(TokenId t) override;
    bool accept(TokenId t) override;
    bool is_complete() const override { return top().mode != Mode::Grammar || tm_.matcher().is_complete(); }
    bool is_finished() const override { return top().mode == Mode::Done; }
    Snapshot snapshot() const override { return (uint64_t{history_.back().serial} << 32) | (history_.size() - 1); }
    void rollback(Snapshot s) override;
    void forced_tokens(size_t max_tokens, std::vector<TokenId>& out) override;

private:
    enum class Mode : uint8_t { Free, Grammar, Done };
    struct Entry {
        uint64_t matcher; // the matcher's snapshot
        uint32_t serial;
        Mode mode;
        uint32_t partial; // Free: the trigger's matching state
        size_t matches;   // sentences finished
    };

    std::shared_ptr<const GrammarTrigger> trig_;
    grammar::TokenMatcher tm_;
    const Tokenizer& tok_;
    size_t max_matches_;
    grammar::Matcher::StateId after_trigger_ = grammar::Matcher::kDead; // the grammar once it has read the trigger
    std::vector<Entry> history_;
    uint32_t serial_ = 0;
    std::vector<std::optional<std::vector<TokenId>>> refused_; // per partial state: free tokens refused

    const Entry& top() const { return history_.back(); }
    const grammar::VocabIndex& vocab() const { return trig_->vocab(); }
    void push(Mode mode, uint32_t partial, size_t matches) {
        history_.push_back({tm_.matcher().snapshot(), serial_++, mode, partial, matches});
    }
    // Where `bytes` (read in free state `partial`) complete the trigger: the index after it, or npos.
    size_t completion(uint32_t partial, std::string_view bytes) const;
    // Whether the grammar, having read the trigger, takes `rest` (and is not past its end).
    bool grammar_takes(std::string_view rest);
    bool free_allows(uint32_t partial, TokenId t);
    bool accept_free(TokenId t);
    // After the grammar read a token: free again (or done) where it is finished.
    void push_grammar_state(size_t matches);
    const std::vector<TokenId>& refused(uint32_t partial);
};

TriggeredConstraint::TriggeredConstraint(std::shared_ptr<const GrammarTrigger> trigger,
                                         std::shared_ptr<const grammar::CompiledGrammar> g,
                                         std::shared_ptr<grammar::LocalMaskCache> masks, const Tokenizer& tok,
                                         size_t max_matches)
    : trig_(std::move(trigger)), tm_(std::move(g), trig_->vocab_ptr(), {}, std::move(masks)), tok_(tok),
      max_matches_(max_matches), refused_(trig_->text().size()) {
    grammar::Matcher& m = tm_.matcher();
    grammar::Matcher::StateId s = m.state();
    for (char c : trig_->text()) s = m.step(s, static_cast<uint8_t>(c));
    if (s == grammar::Matcher::kDead)
        throw Error(ErrorCode::argument, "triggered grammar: no sentence of the grammar starts with the trigger '" +
                                             trig_->text() + "'");
    after_trigger_ = s;
    reset();
}

void TriggeredConstraint::reset() {
    tm_.matcher().reset();
    history_.clear();
    push(Mode::Free, 0, 0);
}

size_t TriggeredConstraint::completion(uint32_t partial, std::string_view bytes) const {
    const size_t n = trig_->text().size();
    for (size_t i = 0; i < bytes.size(); ++i)
        if ((partial = trig_->step(partial, static_cast<uint8_t>(bytes[i]))) == n) return i + 1;
    return std::string_view::npos;
}

bool TriggeredConstraint::grammar_takes(std::string_view rest) {
    grammar::Matcher& m = tm_.matcher();
    grammar::Matcher::StateId s = after_trigger_;
    for (char c : rest)
        if ((s = m.step(s, static_cast<uint8_t>(c))) == grammar::Matcher::kDead) return false;
    return true;
}

bool TriggeredConstraint::free_allows(uint32_t partial, TokenId t) {
    if (t < 0 || t >= vocab().n_vocab()) return false;
    const std::string_view b = vocab().bytes(t);
    const size_t end = completion(partial, b);
    return end == std::string_view::npos || grammar_takes(b.substr(end));
}

const std::vector<TokenId>& TriggeredConstraint::refused(uint32_t partial) {
    auto& slot = refused_[partial];
    if (!slot) {
        slot.emplace();
        for (TokenId t : trig_->completers())
            if (!free_allows(partial, t)) slot->push_back(t);
    }
    return *slot;
}

void TriggeredConstraint::fill_mask(std::span<uint32_t> mask) {
    const int64_t n_vocab = vocab().n_vocab();
    const auto words = static_cast<size_t>((n_vocab + 31) / 32);
    if (mask.size() != words)
        throw Error(ErrorCode::shape, "token mask of " + std::to_string(mask.size()) + " words; the vocabulary of " +
                                          std::to_string(n_vocab) + " tokens needs " + std::to_string(words));
    const Entry& e = top();
    if (e.mode == Mode::Grammar) return tm_.fill_mask(mask);
    if (e.mode == Mode::Done) {
        std::fill(mask.begin(), mask.end(), 0u);
        for (TokenId t : vocab().eog_ids()) mask[static_cast<size_t>(t) / 32] |= 1u << (t % 32);
        return;
    }
    std::fill(mask.begin(), mask.end(), ~0u);
    if (n_vocab % 32 != 0) mask[words - 1] = (1u << (n_vocab % 32)) - 1; // no bits past the vocabulary
    for (TokenId t : refused(e.partial)) mask[static_cast<size_t>(t) / 32] &= ~(1u << (t % 32));
}

bool TriggeredConstraint::allows(TokenId t) {
    const Entry& e = top();
    if (e.mode == Mode::Grammar) return tm_.allows(t);
    if (e.mode == Mode::Done) return t >= 0 && t < vocab().n_vocab() && vocab().is_eog(t);
    return free_allows(e.partial, t);
}

void TriggeredConstraint::push_grammar_state(size_t matches) {
    if (!tm_.matcher().is_finished()) return push(Mode::Grammar, 0, matches);
    ++matches;
    push(max_matches_ != 0 && matches >= max_matches_ ? Mode::Done : Mode::Free, 0, matches);
}

bool TriggeredConstraint::accept_free(TokenId t) {
    const Entry e = top();
    if (!free_allows(e.partial, t)) return false;
    const std::string_view b = vocab().bytes(t);
    const size_t end = t == trig_->token() ? 0 : completion(e.partial, b);
    if (t != trig_->token() && end == std::string_view::npos) {
        // Free text; a token without bytes (control, end of generation) breaks a partial trigger.
        uint32_t partial = 0;
        if (!b.empty()) {
            partial = e.partial;
            for (char c : b) partial = trig_->step(partial, static_cast<uint8_t>(c));
        }
        push(Mode::Free, partial, e.matches);
        return true;
    }
    grammar::Matcher& m = tm_.matcher();
    // The grammar starts over (a pushed state: earlier snapshots stay valid along this path).
    m.push_state(after_trigger_);
    if (!m.accept_bytes(b.substr(end))) { // cannot happen: free_allows checked the same steps
        m.rollback(e.matcher);
        return false;
    }
    push_grammar_state(e.matches);
    return true;
}

bool TriggeredConstraint::accept(TokenId t) {
    const Entry e = top();
    switch (e.mode) {
    case Mode::Free:
        return accept_free(t);
    case Mode::Grammar:
        if (!tm_.accept(t)) return false;
        push_grammar_state(e.matches);
        return true;
    case Mode::Done:
        if (!allows(t)) return false;
        push(Mode::Done, 0, e.matches);
        return true;
    }
    return false;
}

void TriggeredConstraint::rollback(Snapshot s) {
    const size_t index = static_cast<uint32_t>(s);
    if (index >= history_.size() || history_[index].serial != static_cast<uint32_t>(s >> 32))
        throw Error(ErrorCode::state, "triggered grammar: rollback to a snapshot not on the present path "
                                      "(taken before a reset, or on a path already undone)");
    history_.resize(index + 1);
    tm_.matcher().rollback(history_.back().matcher);
}

void TriggeredConstraint::forced_tokens(size_t max_tokens, std::vector<TokenId>& out) {
    // Free text forces nothing; in the grammar, its forced bytes as the tokenizer encodes them.
    if (max_tokens == 0 || top().mode != Mode::Grammar) return;
    const std::string text = tm_.matcher().forced_bytes(std::min<size_t>(max_tokens * 16, 1024));
    // Empty, or the rest of a character a token left unfinished: nothing a tokenizer encodes as such.
    if (text.empty() || (static_cast<unsigned char>(text[0]) & 0xC0) == 0x80) return;
    const std::vector<TokenId> ids = tok_.encode(text, AddBos::No, SpecialTokens::AsText);
    const Snapshot start = snapshot();
    size_t taken = 0;
    for (TokenId t : ids) {
        if (taken == max_tokens || !accept(t)) break; // a token past the forced text's end may not fit
        out.push_back(t);
        ++taken;
    }
    rollback(start);
}

} // namespace

std::unique_ptr<TokenConstraint> make_triggered_constraint(std::shared_ptr<const GrammarTrigger> trigger,
                                                           std::shared_ptr<const grammar::CompiledGrammar> g,
                                                           const Tokenizer& tok, size_t max_matches,
                                                           std::shared_ptr<grammar::LocalMaskCache> masks) {
    if (!trigger || !g) throw Error(ErrorCode::argument, "make_triggered_constraint: null trigger or grammar");
    if (trigger->vocab().n_vocab() != tok.n_vocab())
        throw Error(ErrorCode::argument, "make_triggered_constraint: the trigger's vocabulary is not the tokenizer's");
    return std::make_unique<TriggeredConstraint>(std::move(trigger), std::move(g), std::move(masks), tok, max_matches);
}

} // namespace rwd
