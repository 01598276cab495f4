// A regex, a JSON Schema or a GBNF grammar as a fresh TokenConstraint, compiled once: the GBNF a
// front end makes of a regex or schema and what the GrammarCache builds of it are kept, so a
// repeated constraint costs a lookup (guidance-style programs, the C API).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "rewind/constraint.h"
#include "rewind/grammar/json_schema.h"
#include "rewind/grammar/token_mask.h"
#include "rewind/tokenizer.h"

namespace rwd::speculate {

// What one generation is held to: at most one of the three texts non-empty (none: nothing).
struct ConstraintText {
    std::string_view regex{};     // the ECMAScript subset of grammar/regex.h, matched as a whole
    std::string_view json_schema{}; // JSON text of a schema (grammar/json_schema.h)
    ::rwd::grammar::JsonWhitespace json_whitespace = ::rwd::grammar::JsonWhitespace::Compact;
    std::string_view grammar{};   // GBNF text, start rule `root`
};

// Serves one vocabulary (`tok`, which must outlive it). Threads: one at a time (like a Session);
// the GrammarCache it shares may be used by others meanwhile.
class ConstraintCompiler {
public:
    // `cache` (null: a private one) compiles grammars for the vocabulary; keep one per model.
    explicit ConstraintCompiler(const Tokenizer& tok, grammar::GrammarCache* cache = nullptr);

    // A fresh constraint for `c` (null when it names nothing), standing at the start of its
    // language. Throws rwd::Error, nothing kept, its message naming the field ("regex: ...",
    // "json_schema: ...", "grammar: ..."): argument when two or more are named, a regex or GBNF
    // that does not parse, a schema keyword not implemented; format (a schema that is not JSON),
    // capacity (as json_schema_to_gbnf).
    std::unique_ptr<TokenConstraint> compile(const ConstraintText& c);

    // Front-end runs so far (regex or schema to GBNF) and grammars compiled for the vocabulary:
    // a constraint seen before adds to neither.
    int64_t conversions() const { return conversions_; }
    int64_t compilations() const { return compilations_; }

    // The GBNF `c` stands for ("" when it names nothing); throws as compile().
    std::string gbnf_of(const ConstraintText& c);

private:
    const Tokenizer& tok_;
    std::unique_ptr<grammar::GrammarCache> own_;
    grammar::GrammarCache* cache_;
    std::unordered_map<std::string, std::string> gbnf_;                      // kind + text -> GBNF
    std::unordered_map<std::string, grammar::GrammarCache::Compiled> built_; // GBNF -> compiled
    int64_t conversions_ = 0, compilations_ = 0;
};

} // namespace rwd::speculate
