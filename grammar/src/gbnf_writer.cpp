// GBNF text output: escaping of literals and classes, and the rule table (see gbnf_writer.h).
#include "gbnf_writer.h"

#include <algorithm>
#include <cstdio>

#include "rewind/error.h"
#include "rewind/grammar/utf8.h"

namespace rwd::grammar::detail {

bool CharSet::contains(uint32_t cp) const {
    for (const auto& [lo, hi] : ranges)
        if (cp >= lo && cp <= hi) return true;
    return false;
}

void CharSet::add(uint32_t lo, uint32_t hi) {
    ranges.emplace_back(lo, hi);
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto& r : ranges) {
        if (!merged.empty() && r.first <= merged.back().second + 1)
            merged.back().second = std::max(merged.back().second, r.second);
        else
            merged.push_back(r);
    }
    ranges = std::move(merged);
}

void CharSet::add(const CharSet& other) {
    for (const auto& [lo, hi] : other.ranges) add(lo, hi);
}

CharSet CharSet::complement() const {
    CharSet out;
    uint32_t next = 0;
    for (const auto& [lo, hi] : ranges) {
        if (lo > next) out.ranges.emplace_back(next, lo - 1);
        next = hi + 1;
    }
    if (next <= 0x10FFFF) out.ranges.emplace_back(next, 0x10FFFF);
    return out;
}

CharSet CharSet::intersect(const CharSet& other) const {
    CharSet out;
    size_t i = 0, j = 0;
    while (i < ranges.size() && j < other.ranges.size()) {
        const uint32_t lo = std::max(ranges[i].first, other.ranges[j].first);
        const uint32_t hi = std::min(ranges[i].second, other.ranges[j].second);
        if (lo <= hi) out.ranges.emplace_back(lo, hi);
        if (ranges[i].second < other.ranges[j].second) ++i; else ++j;
    }
    return out;
}

namespace {

// One code point inside a literal or class: printable ASCII as itself (`special` ones escaped),
// everything else as \uHHHH or \UHHHHHHHH, so the text stays ASCII and unambiguous.
std::string escape_cp(uint32_t cp, std::string_view special) {
    char buf[16];
    const bool is_special = cp < 0x80 && special.find(static_cast<char>(cp)) != std::string_view::npos;
    // llama.cpp's parser knows the backslash escapes of \ " [ ] only: other specials as \u.
    const bool backslash = is_special && std::string_view("\\\"[]").find(static_cast<char>(cp)) != std::string_view::npos;
    if (cp >= 0x20 && cp < 0x7F && (!is_special || backslash)) {
        std::string s;
        if (backslash) s.push_back('\\');
        s.push_back(static_cast<char>(cp));
        return s;
    }
    // \uHHHH even below 0x80: XGrammar reads \x greedily (\x2D0 is U+02D0), llama.cpp reads
    // exactly two digits; both read \u with four.
    if (cp <= 0xFFFF) std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(cp));
    else std::snprintf(buf, sizeof buf, "\\U%08X", static_cast<unsigned>(cp));
    return buf;
}

} // namespace

std::string gbnf_literal(std::string_view utf8) {
    std::string out = "\"";
    for (size_t i = 0; i < utf8.size();) {
        const Utf8Step st = decode_utf8(utf8.substr(i));
        if (!st.valid || st.length == 0) throw Error(ErrorCode::argument, "grammar literal: invalid UTF-8");
        out += escape_cp(st.code_point, "\"\\");
        i += st.length;
    }
    return out + "\"";
}

std::string gbnf_class(const CharSet& set) {
    if (set.empty()) return "[^\\u0000-\\U0010FFFF]"; // matches nothing (e.g. the regex [])
    // A set that runs to U+10FFFF ("anything but ...") is printed negated: shorter, and the form
    // XGrammar's web build reads correctly (its positive classes mix up multi-byte ranges).
    CharSet with_surrogates = set;
    with_surrogates.add(0xD800, 0xDFFF);
    const bool negate = set.ranges.back().second == 0x10FFFF && !with_surrogates.complement().empty();
    const CharSet& shown = negate ? with_surrogates.complement() : set;
    std::string out = negate ? "[^" : "[";
    for (const auto& [lo, hi] : shown.ranges) {
        out += escape_cp(lo, "\\]-^[");
        if (hi > lo) {
            if (hi > lo + 1) out += "-";
            out += escape_cp(hi, "\\]-^[");
        }
    }
    return out + "]";
}

std::string GbnfWriter::reserve(std::string_view hint) {
    std::string base;
    for (char c : hint) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
        base.push_back(ok ? c : (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : '-');
    }
    if (base.empty()) base.push_back('r');
    const int n = used_[base]++;
    std::string name = n == 0 ? base : base + "-" + std::to_string(n);
    // A suffixed name may itself be another hint's base: take the next free one.
    while (bodies_.count(name) || (n > 0 && used_.count(name))) name = base + "-" + std::to_string(used_[base]++);
    bodies_[name] = "";
    order_.push_back(name);
    return name;
}

void GbnfWriter::define(const std::string& name, std::string body) {
    by_body_.emplace(body, name);
    bodies_[name] = std::move(body);
}

std::string GbnfWriter::add(std::string_view hint, std::string body) {
    if (bodies_.count(body)) return body; // already a rule's name: no alias rule
    const auto it = by_body_.find(body);
    if (it != by_body_.end()) return it->second;
    std::string name = reserve(hint);
    define(name, std::move(body));
    return name;
}

std::string GbnfWriter::text() const {
    std::string out;
    const auto line = [&](const std::string& name) { out += name + " ::= " + bodies_.at(name) + "\n"; };
    if (bodies_.count("root")) line("root");
    for (const auto& name : order_)
        if (name != "root") line(name);
    return out;
}

} // namespace rwd::grammar::detail
