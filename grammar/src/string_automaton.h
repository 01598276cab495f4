// Strings as automata, for what a grammar of the regex alone cannot say: a pattern together with
// a format and/or lengths. Patterns become NFAs over character sets; NFAs and a length counter
// are multiplied and written as right-linear rules, one per live state of the product.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gbnf_writer.h"
#include "regex_ast.h"

namespace rwd::grammar::detail {

// GBNF expression for one character of a set (a class in plain text, the JSON spellings inside
// a JSON string).
using CharEmitter = std::function<std::string(const CharSet&)>;

// An NFA without epsilon moves.
struct Nfa {
    struct Edge {
        CharSet set;
        int to = 0;
    };
    std::vector<std::vector<Edge>> edges;
    std::vector<bool> final;
    int start = 0;
};

// Most states an NFA or a product may have: beyond it rwd::Error (capacity) is thrown, so that
// hostile patterns (a{0,1000000} under a length bound) cost bounded time and memory.
constexpr size_t kMaxAutomatonStates = 50000;

// The NFA of a parsed pattern. `search`: unanchored ends match any text. `max_len` (kUnbounded
// for none): counted repetitions are cut to what a string of at most that many characters can
// use, which keeps the language of strings up to that length unchanged.
Nfa regex_nfa(const std::vector<RegexBranch>& branches, bool search, int64_t max_len);

// The strings every NFA accepts with min_len <= length <= max_len (kUnbounded: no maximum), as
// rules in `w`; returns the start rule's name, or nullopt when there is no such string.
std::optional<std::string> emit_intersection(const std::vector<Nfa>& nfas, int64_t min_len, int64_t max_len,
                                             const CharEmitter& emit, GbnfWriter& w, const std::string& prefix);

// A GBNF expression for the pattern's AST directly (no automaton: counted repetitions stay
// counts). `search` as above.
std::string regex_expr(const std::vector<RegexBranch>& branches, bool search, const CharEmitter& emit);

} // namespace rwd::grammar::detail
