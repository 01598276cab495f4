// JSON Schema to GBNF (llama.cpp's syntax, root rule `root`): the language of a schema is its
// instances, with object properties in the order the schema declares them. docs/structured-output.md
// lists the keywords, the regex subset, the spellings accepted and the whitespace modes.
#pragma once
#include <string>
#include <string_view>

namespace rwd::grammar {

// Compact: no whitespace at all. Free: any JSON whitespace (space, tab, LF, CR) between tokens and
// around the document, in runs of at most kMaxJsonWhitespace characters.
enum class JsonWhitespace { Compact, Free };
constexpr int kMaxJsonWhitespace = 32;

struct JsonGrammarOptions {
    JsonWhitespace whitespace = JsonWhitespace::Compact;
};

// GBNF whose language is exactly the schema's instances (properties in declared order). Throws
// rwd::Error: format (not JSON), argument (an unsupported keyword, named with its JSON pointer;
// an invalid schema; a schema no value satisfies), capacity (a pattern with length bounds whose
// automaton passes kMaxAutomatonStates, nesting deeper than 512 schema or 2048 JSON levels).
// Never ignores a keyword.
std::string json_schema_to_gbnf(std::string_view schema_json, const JsonGrammarOptions& opts = {});

// The "any JSON value" grammar (OpenAI's json_object response format): every JSON text, in any
// spelling JSON allows (escapes, exponents), nesting unbounded.
std::string any_json_gbnf(const JsonGrammarOptions& opts = {});

} // namespace rwd::grammar
