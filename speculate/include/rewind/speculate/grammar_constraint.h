// A GBNF grammar as the runtime's TokenConstraint: the grammar library's exact token masks and
// O(1) undo over a model's tokenizer, and the grammar's forced text tokenized as free guesses.
#pragma once
#include <memory>
#include <string_view>

#include "rewind/constraint.h"
#include "rewind/grammar/token_mask.h"
#include "rewind/tokenizer.h"

namespace rwd {

// Builds a constraint from GBNF text (llama.cpp's syntax; start rule `root`) for `tok`'s
// vocabulary. The compiled grammar, the vocabulary index and the local masks come from `cache`
// when given (built once per grammar text and vocabulary, shared by every sequence: keep one
// GrammarCache per model), else are built for this one.
// `tok` must outlive the constraint. Throws rwd::Error (argument) for a grammar that does not
// parse (line and column in the message) or names a token the vocabulary lacks.
std::unique_ptr<TokenConstraint> make_grammar_constraint(std::string_view gbnf, const Tokenizer& tok,
                                                         grammar::GrammarCache* cache = nullptr);

// The same over an already compiled grammar and vocabulary index (from a GrammarCache), with
// local masks shared with other sequences (GrammarCache::local_masks) or, null, its own.
std::unique_ptr<TokenConstraint> make_grammar_constraint(std::shared_ptr<const grammar::CompiledGrammar> g,
                                                         std::shared_ptr<const grammar::VocabIndex> vocab,
                                                         const Tokenizer& tok,
                                                         std::shared_ptr<grammar::LocalMaskCache> masks = nullptr);

} // namespace rwd
