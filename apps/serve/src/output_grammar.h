// The grammars of constrained answers (response_format, grammar, json_schema, tool calls): each
// request's format turned into GBNF and compiled once per server, so a repeated schema costs a
// lookup; a grammar may be triggered (tool_choice auto: from a call's opening tag on).
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "rewind/constraint.h"
#include "rewind/grammar/token_mask.h"
#include "rewind/speculate/triggered_constraint.h"
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

    // The maker of a constraint that leaves the text free until it shows `trigger`, then holds it
    // to `f`'s grammar (whose sentences start with `trigger`) until that is finished, then frees
    // it again; after `max_matches` sentences (0: no bound) only the end may follow. `f` is not
    // Text. Throws as compile(). The trigger's scan of the vocabulary is done once per server.
    ConstraintMaker compile_triggered(const OutputFormat& f, const std::string& trigger, size_t max_matches);

    // The GBNF of `f` (cached by the schema's text). Throws as compile().
    std::string gbnf_of(const OutputFormat& f);

private:
    grammar::GrammarCache::Compiled compiled_of(const OutputFormat& f);
    std::shared_ptr<const GrammarTrigger> trigger_of(const std::string& text,
                                                     const std::shared_ptr<const grammar::VocabIndex>& vocab);

    const Tokenizer& tok_;
    grammar::GrammarCache cache_;
    std::mutex m_; // guards schemas_, compiled_ and triggers_
    std::unordered_map<std::string, std::string> schemas_; // schema text -> GBNF
    // GBNF -> what cache_ compiled of it: the server has one vocabulary, so a repeated grammar
    // skips GrammarCache::get's hash of the vocabulary (about a millisecond for 128k tokens).
    std::unordered_map<std::string, grammar::GrammarCache::Compiled> compiled_;
    std::unordered_map<std::string, std::shared_ptr<const GrammarTrigger>> triggers_; // by text (a few)
};

} // namespace rwd::serve
