// Internal helpers of the GBNF reader: error locations, class normalisation, names for generated
// rules, and the left-recursion check.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rewind/grammar/gbnf.h"

namespace rwd::grammar {

// "line L, column C" of byte offset `at` (1-based; columns count bytes).
std::string location(std::string_view text, size_t at);

// Sorted, merged ranges; the complement over U+0000..U+10FFFF when `negated`.
std::vector<std::pair<uint32_t, uint32_t>> normalize_ranges(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated);

// Gives each generated rule the name `parent-N`, N the smallest number not already a name.
void name_generated_rules(Grammar& g);

// Throws rwd::Error (argument) naming the rules of a cycle if a rule can reach itself without
// consuming input first.
void check_left_recursion(const Grammar& g);

// Removes every alternative that can never finish (it uses a rule with no finite expansion, such
// as `a ::= "x" a`, or an empty class), so that every prefix the matcher admits can complete.
// Throws rwd::Error (argument) when the start rule has no finite sentence at all.
void prune_unfinishable(Grammar& g);

// Which rules can match the empty string.
std::vector<bool> nullable_rules(const Grammar& g);

} // namespace rwd::grammar
