// A grammar triggered by a token or text, as the runtime's TokenConstraint: the text is free until
// the trigger appears, from there it follows the grammar until the grammar is finished, then it is
// free again (tool_choice "auto": a call is constrained from its opening tag on).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rewind/constraint.h"
#include "rewind/grammar/token_mask.h"
#include "rewind/tokenizer.h"

namespace rwd {

// A trigger text over one vocabulary: its matching automaton, the tokens whose bytes can complete
// an occurrence of it, and the control token that is the trigger as a whole (if any). Built once
// (a pass over the vocabulary) and shared by every sequence; immutable, any threads.
class GrammarTrigger {
public:
    // `text`: 1..256 bytes. A control token is the trigger when `tok` encodes `text`, special
    // tokens parsed, as that one token (a token matched by its bytes needs nothing special).
    // `vocab` must be `tok`'s. Throws rwd::Error (argument) otherwise.
    GrammarTrigger(std::string text, const Tokenizer& tok, std::shared_ptr<const grammar::VocabIndex> vocab);

    const std::string& text() const { return text_; }
    const grammar::VocabIndex& vocab() const { return *vocab_; }
    const std::shared_ptr<const grammar::VocabIndex>& vocab_ptr() const { return vocab_; }
    // The matching state after `byte` from state `k` (0 <= k < text().size()): the length of the
    // longest prefix of the trigger that the text so far ends with; text().size() = an occurrence.
    uint32_t step(uint32_t k, uint8_t byte) const { return delta_[size_t{k} * 256 + byte]; }
    // Tokens (byte-matched) that complete an occurrence from some matching state; ascending.
    const std::vector<TokenId>& completers() const { return completers_; }
    // The control token that is the trigger, or -1.
    TokenId token() const { return token_; }

private:
    std::string text_;
    std::shared_ptr<const grammar::VocabIndex> vocab_;
    std::vector<uint16_t> delta_; // [text.size()][256]
    std::vector<TokenId> completers_;
    TokenId token_ = -1;
};

// The constraint of free text in which every occurrence of the trigger opens a sentence of the
// grammar. The grammar's sentences start with the trigger's text (it reads the trigger too, so a
// grammar made for forced calls serves as it is). Its language, token by token:
// - Free: every token is allowed (end of generation and control tokens included), except one whose
//   bytes complete an occurrence of the trigger and go on with bytes the grammar refuses after it.
//   A token that completes the trigger (or is the trigger's control token) enters the grammar,
//   which reads the trigger and the token's bytes after it. A control token breaks a partial
//   trigger (it is not text).
// - Grammar: the grammar's own masks (GrammarConstraint's rule): a token must keep the text since
//   the trigger a prefix of a sentence, so no token runs on past the sentence's end; end of
//   generation only where the sentence is complete. Where the grammar is finished (nothing can
//   follow), the text is free again, or, after `max_matches` sentences (0: no bound), only end of
//   generation is allowed (is_finished()).
// Cost: free positions fill the mask with ones and clear a few bits (the refused tokens are found
// once per partial-trigger length); grammar positions cost what GrammarConstraint's do; snapshot
// and rollback are O(1). Deterministic, so exact under speculation.
// Throws rwd::Error (argument) on a null or mismatched vocabulary, or a grammar whose sentences
// cannot start with the trigger's text. `tok` must outlive the constraint.
std::unique_ptr<TokenConstraint> make_triggered_constraint(std::shared_ptr<const GrammarTrigger> trigger,
                                                           std::shared_ptr<const grammar::CompiledGrammar> g,
                                                           const Tokenizer& tok, size_t max_matches = 0,
                                                           std::shared_ptr<grammar::LocalMaskCache> masks = nullptr);

} // namespace rwd
