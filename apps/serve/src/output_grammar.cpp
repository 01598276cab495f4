// OutputGrammars: JSON Schema to GBNF through the grammar library (compact JSON, as OpenAI's
// structured outputs are), compiled grammars shared through one GrammarCache, triggers kept by text.
#include "output_grammar.h"

#include "rewind/error.h"
#include "rewind/grammar/json_schema.h"
#include "rewind/speculate/grammar_constraint.h"

namespace rwd::serve {

namespace {
// A bound on the schemas remembered; past it the map starts over (the GrammarCache keeps its own).
constexpr size_t kMaxSchemas = 256;
constexpr const char* kAnyObject = R"({"type":"object"})";
} // namespace

std::string OutputGrammars::gbnf_of(const OutputFormat& f) {
    if (f.kind == OutputKind::Grammar) return f.text;
    const std::string schema = f.kind == OutputKind::JsonObject ? std::string(kAnyObject) : f.text;
    {
        std::lock_guard lk(m_);
        if (auto it = schemas_.find(schema); it != schemas_.end()) return it->second;
    }
    std::string gbnf;
    try {
        gbnf = grammar::json_schema_to_gbnf(schema);
    } catch (const Error& e) {
        throw ApiError(400, "'" + f.param + "': " + e.what(), f.param);
    }
    std::lock_guard lk(m_);
    if (schemas_.size() >= kMaxSchemas) schemas_.clear();
    schemas_.emplace(schema, gbnf);
    return gbnf;
}

grammar::GrammarCache::Compiled OutputGrammars::compiled_of(const OutputFormat& f) {
    const std::string gbnf = gbnf_of(f);
    grammar::GrammarCache::Compiled c;
    {
        std::lock_guard lk(m_);
        if (auto it = compiled_.find(gbnf); it != compiled_.end()) return it->second;
    }
    try {
        c = cache_.get(gbnf, tok_);
    } catch (const Error& e) {
        throw ApiError(400, "'" + f.param + "': " + e.what(), f.param);
    }
    std::lock_guard lk(m_);
    if (compiled_.size() >= kMaxSchemas) compiled_.clear();
    compiled_.emplace(gbnf, c);
    return c;
}

ConstraintMaker OutputGrammars::compile(const OutputFormat& f) {
    if (f.kind == OutputKind::Text) return {};
    const grammar::GrammarCache::Compiled c = compiled_of(f);
    return [c, &tok = tok_] { return make_grammar_constraint(c.grammar, c.vocab, tok, c.local_masks); };
}

std::shared_ptr<const GrammarTrigger> OutputGrammars::trigger_of(const std::string& text,
                                                                 const std::shared_ptr<const grammar::VocabIndex>& vocab) {
    {
        std::lock_guard lk(m_);
        if (auto it = triggers_.find(text); it != triggers_.end()) return it->second;
    }
    auto t = std::make_shared<const GrammarTrigger>(text, tok_, vocab); // outside the lock: a vocabulary scan
    std::lock_guard lk(m_);
    return triggers_.emplace(text, std::move(t)).first->second;
}

ConstraintMaker OutputGrammars::compile_triggered(const OutputFormat& f, const std::string& trigger, size_t max_matches) {
    const grammar::GrammarCache::Compiled c = compiled_of(f);
    std::shared_ptr<const GrammarTrigger> t = trigger_of(trigger, c.vocab);
    return [c, t = std::move(t), max_matches, &tok = tok_] {
        return make_triggered_constraint(t, c.grammar, tok, max_matches, c.local_masks);
    };
}

} // namespace rwd::serve
