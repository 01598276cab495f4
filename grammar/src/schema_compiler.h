// The JSON Schema compiler's state (one per json_schema_to_gbnf call): the document, the rules
// written so far, the rules of $ref targets (so recursion closes) and the JSON building blocks.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gbnf_writer.h"
#include "rewind/grammar/json_schema.h"

namespace rwd::grammar::detail {

using Json = nlohmann::ordered_json; // keeps the declared order of properties

class SchemaCompiler {
public:
    SchemaCompiler(const Json& root, const JsonGrammarOptions& opts);

    // GBNF text with `root` the whole document (whitespace around it in Free mode).
    std::string document(const std::string& value_rule);
    // The rule for instances of `s` found at JSON pointer `ptr`. `s` must not be `false`.
    std::string value(const Json& s, const std::string& ptr, int depth = 0);
    // The "any JSON value" rule.
    std::string any_value();

private:
    std::string typed_value(const Json& s, const std::string& ptr, int depth);
    std::string ref_value(const Json& s, const std::string& ptr, int depth);
    std::string alternatives(const Json& s, const std::string& key, const std::string& ptr, int depth);
    std::optional<Json> branch_with(const Json& base, const Json& branch, const std::string& ptr,
                                    bool inline_refs = false);
    std::string all_of(const Json& s, const std::string& ptr, int depth);
    std::string enum_value(const Json& s, const std::string& ptr, const std::set<std::string>& types);
    std::string object_value(const Json& s, const std::string& ptr, int depth);
    std::string object_members(const Json& s, const std::string& ptr, int depth);
    std::string array_value(const Json& s, const std::string& ptr, int depth);
    std::string array_items(const Json& s, const std::string& ptr, int depth);
    std::string string_value(const Json& s, const std::string& ptr);
    std::string integer_value(const Json& s, const std::string& ptr);
    std::string number_value(const Json& s, const std::string& ptr);
    std::string additional_key(const std::vector<std::string>& declared, const std::string& ptr);

    // " ws" in Free mode, "" in Compact mode: appended after a token.
    std::string wsp() const { return ws_rule_.empty() ? "" : " " + ws_rule_; }
    std::string sep(const std::string& a, const std::string& b) const; // a, whitespace, b
    // open ws (item ws ("," ws item ws)*)? close
    std::string list_of(const std::string& open, const std::string& item, const std::string& close) const;
    std::string any_string();
    std::string canonical_char(const CharSet& set);

    const Json& root_;
    JsonGrammarOptions opts_;
    GbnfWriter w_;
    std::string ws_rule_;
    std::string any_value_rule_;
    std::map<std::string, std::string> refs_; // resolved pointer -> rule
    // References being compiled with no text consumed since they were entered: reaching one again
    // would make a left-recursive rule (a cycle through anyOf/$ref that never writes a character).
    std::set<std::string> unguarded_;
    // Schema text -> rule: equal subschemas share rules (references are document-wide, so a
    // schema's language does not depend on where it appears).
    std::map<std::string, std::string> memo_;
    // Character set -> rule of its JSON-string spellings (an automaton asks once per state).
    std::map<CharSet, std::string> json_chars_;
};

// Keyword checks shared by the compiler's parts.
[[noreturn]] void schema_error(const std::string& ptr, const std::string& what);
std::string pointer_join(const std::string& ptr, const std::string& key);
bool is_false_schema(const Json& s);
// The text of a JSON number: as written in the schema when it has more digits than a double
// keeps (such numbers are carried through parsing as marked strings), else as parsed.
std::optional<std::string> number_text(const Json& v);
// The regex of a supported `format` (matched whole), or nullopt.
std::optional<std::string> format_regex(const std::string& format);

} // namespace rwd::grammar::detail
