// ConstraintCompiler: the grammar library's front ends and GrammarCache behind one memo, bounded
// so that a long-lived program or C context cannot grow without limit.
#include "rewind/speculate/constraint_compiler.h"

#include "rewind/error.h"
#include "rewind/grammar/regex.h"
#include "rewind/speculate/grammar_constraint.h"

namespace rwd::speculate {
namespace {

// Past this many distinct constraints the memo starts over (the GrammarCache keeps its own bound).
constexpr size_t kMaxRemembered = 256;

template <class F>
auto naming(const char* who, F&& f) {
    try {
        return f();
    } catch (const Error& e) {
        throw Error(e.code(), std::string(who) + ": " + e.what());
    }
}

} // namespace

ConstraintCompiler::ConstraintCompiler(const Tokenizer& tok, grammar::GrammarCache* cache)
    : tok_(tok), own_(cache ? nullptr : std::make_unique<grammar::GrammarCache>()), cache_(cache ? cache : own_.get()) {}

std::string ConstraintCompiler::gbnf_of(const ConstraintText& c) {
    const int named = !c.regex.empty() + !c.json_schema.empty() + !c.grammar.empty();
    if (named > 1)
        throw Error(ErrorCode::argument, "name at most one of regex, json_schema and grammar (" +
                                             std::to_string(named) + " given)");
    if (!c.grammar.empty()) return std::string(c.grammar);
    if (named == 0) return {};
    const bool schema = !c.json_schema.empty();
    const bool free_ws = c.json_whitespace == grammar::JsonWhitespace::Free;
    std::string key = schema ? (free_ws ? "j+" : "j-") : "r:";
    key += schema ? c.json_schema : c.regex;
    if (auto it = gbnf_.find(key); it != gbnf_.end()) return it->second;
    std::string gbnf = schema ? naming("json_schema", [&] {
        return grammar::json_schema_to_gbnf(c.json_schema, grammar::JsonGrammarOptions{.whitespace = c.json_whitespace});
    })
                              : naming("regex", [&] { return grammar::regex_to_gbnf(c.regex); });
    ++conversions_;
    if (gbnf_.size() >= kMaxRemembered) gbnf_.clear();
    gbnf_.emplace(std::move(key), gbnf);
    return gbnf;
}

std::unique_ptr<TokenConstraint> ConstraintCompiler::compile(const ConstraintText& c) {
    const std::string gbnf = gbnf_of(c);
    if (gbnf.empty()) return nullptr;
    auto it = built_.find(gbnf);
    if (it == built_.end()) {
        grammar::GrammarCache::Compiled g = naming(c.grammar.empty() ? (c.regex.empty() ? "json_schema" : "regex") : "grammar",
                                                   [&] { return cache_->get(gbnf, tok_); });
        ++compilations_;
        if (built_.size() >= kMaxRemembered) built_.clear();
        it = built_.emplace(gbnf, std::move(g)).first;
    }
    const grammar::GrammarCache::Compiled& g = it->second;
    return make_grammar_constraint(g.grammar, g.vocab, tok_, g.local_masks);
}

} // namespace rwd::speculate
