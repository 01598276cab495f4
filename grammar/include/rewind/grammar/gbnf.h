// GBNF grammars (llama.cpp's syntax): the parsed form every front end produces (GBNF text, and the
// JSON Schema and regex translators through their GBNF text) and the matcher compiles.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rwd::grammar {

// A set of code points. `ranges` are inclusive, sorted, disjoint and not adjacent: the positive
// set the matcher tests. `written`/`negated` keep the class as the grammar wrote it (for printing).
struct CharClass {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    std::vector<std::pair<uint32_t, uint32_t>> written;
    bool negated = false;
    bool any = false; // written as `.`

    bool contains(uint32_t cp) const;
    // Whether some code point in [lo, hi] is in the set.
    bool intersects(uint32_t lo, uint32_t hi) const;
    // Whether every code point in [lo, hi] is in the set.
    bool covers(uint32_t lo, uint32_t hi) const;
};

// A token named by id (`<[128009]>`) or by its text (`<|im_end|>`: resolved against a vocabulary
// when the grammar is bound to one; `id` stays -1 until then).
struct TokenRef {
    int32_t id = -1;
    std::string text; // with its angle brackets ("<|im_end|>"); empty when named by id
};

struct Element {
    enum class Kind : uint8_t {
        Chars,    // one code point of classes[index]
        Rule,     // rules[index]
        Token,    // the token tokens[index]
        NotToken, // any one token but tokens[index] (`!<...>`)
    };
    Kind kind = Kind::Chars;
    uint32_t index = 0;
};

using Sequence = std::vector<Element>;

struct Rule {
    std::string name;      // unique; generated rules (groups, repetitions) get `parent-N` names
    bool generated = false;
    std::vector<Sequence> alternatives; // at least one; an empty sequence matches ""
};

// A parsed grammar: every referenced rule defined, no left recursion.
struct Grammar {
    std::vector<Rule> rules;
    std::vector<CharClass> classes;
    std::vector<TokenRef> tokens;
    uint32_t root = 0;

    // The grammar as GBNF text that parse_gbnf reads back to the same language (groups and
    // repetitions appear as the generated rules they were expanded to).
    std::string to_gbnf() const;
};

// Bounds that keep hostile input to bounded time and memory; past one, parsing is refused.
struct GbnfLimits {
    size_t max_text_bytes = size_t{1} << 20; // grammar text
    size_t max_nesting = 100;                // depth of nested parentheses
    uint32_t max_repeat = 10000;             // m and n of {m,n}
    size_t max_elements = size_t{1} << 20;   // elements after expanding repetitions
    size_t max_rules = size_t{1} << 18;      // rules, generated ones included
};

// Parses GBNF text: rules `name ::= ...` (names of letters, digits, '-' and '_'), `#` comments,
// string literals and character classes with escapes \n \r \t \\ \" \[ \] \- \xHH \uHHHH
// \UHHHHHHHH, negated classes `[^...]`, `.` (any code point), groups, alternation, `* + ?`,
// `{m}` `{m,}` `{m,n}` `{,n}`, tokens `<[id]>` / `<text>` and their negation `!<...>`.
// Newlines end a rule except after `::=`, after `|` and inside parentheses. `root_rule` names
// the start rule. Alternatives that can never finish (a rule with no finite expansion, an empty
// class) are dropped, so every prefix the grammar admits can complete. Throws rwd::Error
// (argument) saying what and at which line:column: a syntax error, an undefined or missing rule,
// a rule defined twice, left recursion (with the cycle's rule names), a start rule with no finite
// sentence, or a limit passed.
Grammar parse_gbnf(std::string_view text, std::string_view root_rule = "root", const GbnfLimits& limits = {});

} // namespace rwd::grammar
