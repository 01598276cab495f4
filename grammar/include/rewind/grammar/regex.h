// Regular expressions (the ECMAScript subset JSON Schema's `pattern` uses) to GBNF grammars in
// llama.cpp's syntax, for `--regex` and for the JSON Schema front end.
#pragma once
#include <string>
#include <string_view>

namespace rwd::grammar {

// GBNF (root rule `root`) whose language is the texts the pattern matches as a whole: the pattern
// is read as if it were ^(?:pattern)$ (`^` and `$` at its ends are accepted and change nothing).
// Supported: literals (UTF-8), escapes (\t \n \v \f \r \0 \xHH \uHHHH \u{H..} \cX and escaped
// syntax characters), `.` (anything but \n \r U+2028 U+2029), classes [...] and [^...] with ranges
// and \d \D \w \W \s \S, groups (...) (?:...) (?<name>...), alternation, * + ? {m} {m,} {m,n} and
// their lazy forms. Refused with rwd::Error (argument) saying what and at which byte offset:
// lookahead and lookbehind, backreferences, \b \B, anchors anywhere but the ends, syntax errors.
std::string regex_to_gbnf(std::string_view pattern);

// The same language as rules inside a larger grammar: appends to `gbnf` a rule named `rule_name`
// (and helper rules whose names start with `rule_name` and '-'), in llama.cpp's syntax.
// `search`: JSON Schema's semantics, where an unanchored pattern may match anywhere in the text
// (a pattern without a leading `^` may be preceded, without a trailing `$` followed, by any text).
void append_regex_rules(std::string_view pattern, const std::string& rule_name, bool search, std::string& gbnf);

} // namespace rwd::grammar
