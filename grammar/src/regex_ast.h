// The parsed form of an ECMAScript-subset regular expression (JSON Schema's `pattern`): sets of
// code points, sequences, alternatives and counted repetition; anchors only at the ends.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "gbnf_writer.h"

namespace rwd::grammar::detail {

constexpr int64_t kUnbounded = -1;

struct RegexNode {
    enum class Kind { set, seq, alt, repeat } kind = Kind::seq;
    CharSet set;                                  // set
    std::vector<std::unique_ptr<RegexNode>> kids; // seq, alt; repeat: one
    int64_t min = 0, max = 0;                     // repeat: max kUnbounded for no limit
};

// One top-level alternative and whether it is anchored at its start (^) and end ($).
struct RegexBranch {
    std::unique_ptr<RegexNode> body;
    bool anchored_start = false, anchored_end = false;
};

// Parses `pattern` (UTF-8). Throws rwd::Error (argument) naming the byte offset for syntax errors
// and for what is refused: lookaround, backreferences, word boundaries, anchors inside the pattern.
std::vector<RegexBranch> parse_regex(std::string_view pattern);

// Shortest and longest match in code points (longest kUnbounded when unlimited).
int64_t regex_min_length(const RegexNode& n);
int64_t regex_max_length(const RegexNode& n);

// The characters `.` matches (all but line terminators) and the class escapes.
CharSet regex_dot();

} // namespace rwd::grammar::detail
