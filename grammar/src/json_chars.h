// One character of a JSON string in every spelling JSON allows: itself where JSON lets it stand
// raw, a short escape (\" \\ \/ \b \f \n \r \t), or \uXXXX (surrogate pairs above U+FFFF).
#pragma once
#include <string>

#include "gbnf_writer.h"

namespace rwd::grammar::detail {

// The name of a rule matching exactly the JSON-string spellings of one code point of `set`
// (non-empty; surrogate code points in it are ignored: they are not Unicode scalars).
std::string json_char_rule(const CharSet& set, GbnfWriter& w);

} // namespace rwd::grammar::detail
