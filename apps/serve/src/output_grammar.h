// The grammars of constrained answers (response_format, grammar, json_schema): each request's
// format turned into GBNF and compiled once per server, so a repeated schema costs a lookup.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "rewind/constraint.h"
#include "rewind/grammar/token_mask.h"
#include "rewind/serve/api.h"
#include "rewind/tokenizer.h"

namespace rwd::serve {

// Makes one request's constraint, fresh; called on the scheduler thread at admission (it may
// be called again if the admission is retried). Cheap: the grammar is compiled already.
using ConstraintMaker = std::function<std::unique_ptr<TokenConstraint>()>;

// Thread-safe: compile() is called from any HTTP worker at once. `tok` must outlive this and the
// makers it returns.
class OutputGrammars {
public:
    explicit OutputGrammars(const Tokenizer& tok) : tok_(tok) {}

    // The maker of `f`'s constraint (empty for OutputKind::Text). Throws ApiError (400) naming
    // f.param: a schema keyword the engine does not implement (by its JSON pointer), an invalid
    // schema, a grammar that does not parse.
    ConstraintMaker compile(const OutputFormat& f);

    // The GBNF of `f` (cached by the schema's text). Throws as compile().
    std::string gbnf_of(const OutputFormat& f);

private:
    const Tokenizer& tok_;
    grammar::GrammarCache cache_;
    std::mutex m_; // guards schemas_ and compiled_
    std::unordered_map<std::string, std::string> schemas_; // schema text -> GBNF
    // GBNF -> what cache_ compiled of it: the server has one vocabulary, so a repeated grammar
    // skips GrammarCache::get's hash of the vocabulary (about a millisecond for 128k tokens).
    std::unordered_map<std::string, grammar::GrammarCache::Compiled> compiled_;
};

} // namespace rwd::serve
