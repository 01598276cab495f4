// Writing GBNF text (llama.cpp's syntax) from the JSON Schema and regex front ends: fresh rule
// names, bodies shared when equal, literals and character classes escaped one way.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rwd::grammar::detail {

// Concatenation by appends (g++ 12 warns, wrongly, on `"literal" + std::string&&`).
template <class... T>
std::string cat(const T&... parts) {
    std::string s;
    (s.append(parts), ...);
    return s;
}

// A set of Unicode code points as sorted, disjoint, non-adjacent inclusive ranges.
struct CharSet {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;

    static CharSet of(uint32_t lo, uint32_t hi) { return CharSet{{{lo, hi}}}; }
    static CharSet all() { return of(0, 0x10FFFF); }
    bool empty() const { return ranges.empty(); }
    bool contains(uint32_t cp) const;
    void add(uint32_t lo, uint32_t hi); // keeps the ranges sorted and merged
    void add(const CharSet& other);
    CharSet complement() const;         // within U+0000..U+10FFFF
    CharSet intersect(const CharSet& other) const;
    CharSet minus(const CharSet& other) const { return intersect(other.complement()); }
    bool operator==(const CharSet&) const = default;
    bool operator<(const CharSet& o) const { return ranges < o.ranges; }
};

// `"..."`: the GBNF literal for UTF-8 text (quotes, backslashes and controls escaped).
std::string gbnf_literal(std::string_view utf8);
// `[...]`: the GBNF class of a set (of an empty set, a class no character matches).
std::string gbnf_class(const CharSet& set);

// The rules of one grammar. Rule names are [a-z0-9-] (llama.cpp's rule-name alphabet).
class GbnfWriter {
public:
    // A name not yet used, from `hint` (sanitized); the rule is defined later with define().
    std::string reserve(std::string_view hint);
    void define(const std::string& name, std::string body);
    // A rule with this body: the existing one when a rule has the same body, else a new one.
    std::string add(std::string_view hint, std::string body);
    // All rules, `root` (which must be defined) first.
    std::string text() const;
    size_t size() const { return order_.size(); }

private:
    std::vector<std::string> order_;
    std::map<std::string, std::string> bodies_;
    std::map<std::string, std::string> by_body_;
    std::map<std::string, int> used_;
};

} // namespace rwd::grammar::detail
