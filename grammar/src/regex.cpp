// Regex to GBNF (see rewind/grammar/regex.h): the parsed pattern printed as one expression, with
// counted repetitions kept as GBNF counts.
#include "rewind/grammar/regex.h"

#include "gbnf_writer.h"
#include "rewind/grammar/utf8.h"
#include "regex_ast.h"
#include "string_automaton.h"

namespace rwd::grammar {

namespace {

// A character in plain text: a literal for one code point, else a class.
std::string plain_char(const detail::CharSet& s) {
    if (s.ranges.size() == 1 && s.ranges[0].first == s.ranges[0].second) {
        std::string utf8;
        if (append_utf8(s.ranges[0].first, utf8)) return detail::gbnf_literal(utf8);
    }
    return detail::gbnf_class(s);
}

} // namespace

std::string regex_to_gbnf(std::string_view pattern) {
    std::string out;
    append_regex_rules(pattern, "root", false, out);
    return out;
}

void append_regex_rules(std::string_view pattern, const std::string& rule_name, bool search, std::string& gbnf) {
    const auto branches = detail::parse_regex(pattern);
    detail::GbnfWriter w;
    const std::string name = w.reserve(rule_name);
    w.define(name, detail::regex_expr(branches, search, plain_char));
    gbnf += w.text();
}

} // namespace rwd::grammar
