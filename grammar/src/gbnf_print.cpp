// Grammar back to GBNF text (`rewind grammar --print`), and the code point tests of a class.
#include <algorithm>

#include "rewind/grammar/gbnf.h"
#include "rewind/grammar/utf8.h"

namespace rwd::grammar {

bool CharClass::contains(uint32_t cp) const { return intersects(cp, cp); }

bool CharClass::intersects(uint32_t lo, uint32_t hi) const {
    // First range whose end is >= lo; it meets [lo, hi] iff it starts at or before hi.
    auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                               [](const std::pair<uint32_t, uint32_t>& r, uint32_t v) { return r.second < v; });
    return it != ranges.end() && it->first <= hi;
}

bool CharClass::covers(uint32_t lo, uint32_t hi) const {
    // Ranges are sorted but may touch without being merged: follow them while they leave no gap.
    auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                               [](const std::pair<uint32_t, uint32_t>& r, uint32_t v) { return r.second < v; });
    uint64_t next = lo; // the first code point not yet known to be in the set
    for (; it != ranges.end() && it->first <= next && next <= hi; ++it) next = std::max<uint64_t>(next, uint64_t{it->second} + 1);
    return next > hi;
}

namespace {

// One code point as GBNF writes it inside "..." (in_class false) or [...] (true).
void put_code_point(uint32_t cp, bool in_class, std::string& out) {
    static const char* hex = "0123456789ABCDEF";
    switch (cp) {
    case '\n': out += "\\n"; return;
    case '\r': out += "\\r"; return;
    case '\t': out += "\\t"; return;
    case '\\': out += "\\\\"; return;
    default: break;
    }
    if ((!in_class && cp == '"') || (in_class && (cp == ']' || cp == '[' || cp == '-' || cp == '^'))) {
        out += '\\';
        out += static_cast<char>(cp);
        return;
    }
    if (cp < 0x20 || cp == 0x7F || (cp >= 0xD800 && cp <= 0xDFFF)) {
        const int digits = cp < 0x100 ? 2 : 4;
        out += digits == 2 ? "\\x" : "\\u";
        for (int i = digits - 1; i >= 0; --i) out += hex[(cp >> (4 * i)) & 0xF];
        return;
    }
    append_utf8(cp, out);
}

bool is_single(const CharClass& c) {
    return !c.negated && !c.any && c.written.size() == 1 && c.written[0].first == c.written[0].second;
}

void put_class(const CharClass& c, std::string& out) {
    if (c.any) {
        out += '.';
        return;
    }
    out += c.negated ? "[^" : "[";
    for (const auto& [lo, hi] : c.written) {
        put_code_point(lo, true, out);
        if (hi != lo) {
            out += '-';
            put_code_point(hi, true, out);
        }
    }
    out += ']';
}

void put_sequence(const Grammar& g, const Sequence& seq, std::string& out) {
    if (seq.empty()) {
        out += "\"\"";
        return;
    }
    for (size_t i = 0; i < seq.size(); ++i) {
        const Element& e = seq[i];
        if (i > 0) out += ' ';
        if (e.kind == Element::Kind::Chars && is_single(g.classes[e.index])) {
            out += '"'; // a run of single code points prints as one literal
            for (; i < seq.size() && seq[i].kind == Element::Kind::Chars && is_single(g.classes[seq[i].index]); ++i)
                put_code_point(g.classes[seq[i].index].written[0].first, false, out);
            --i;
            out += '"';
        } else if (e.kind == Element::Kind::Chars) {
            put_class(g.classes[e.index], out);
        } else if (e.kind == Element::Kind::Rule) {
            out += g.rules[e.index].name;
        } else {
            const TokenRef& t = g.tokens[e.index];
            if (e.kind == Element::Kind::NotToken) out += '!';
            out += t.text.empty() ? "<[" + std::to_string(t.id) + "]>" : t.text;
        }
    }
}

} // namespace

std::string Grammar::to_gbnf() const {
    std::string out;
    for (const Rule& r : rules) {
        out += r.name + " ::= ";
        for (size_t a = 0; a < r.alternatives.size(); ++a) {
            if (a > 0) out += " | ";
            put_sequence(*this, r.alternatives[a], out);
        }
        out += '\n';
    }
    return out;
}

} // namespace rwd::grammar
