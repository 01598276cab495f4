// JSON-string spellings of a set of characters (see json_chars.h).
#include "json_chars.h"

#include <vector>

#include "number_grammar.h"
#include "rewind/error.h"

namespace rwd::grammar::detail {
namespace {

// \u escapes of the code points lo..hi above U+FFFF: a high and a low surrogate each.
void pair_alts(uint32_t lo, uint32_t hi, std::vector<std::string>& alts) {
    const auto high = [](uint32_t cp) { return 0xD800 + ((cp - 0x10000) >> 10); };
    const auto low = [](uint32_t cp) { return 0xDC00 + ((cp - 0x10000) & 0x3FF); };
    const auto part = [&](uint32_t h0, uint32_t h1, uint32_t l0, uint32_t l1) {
        alts.push_back("\"\\\\u\" " + hex_range_expr(h0, h1, 4) + " \"\\\\u\" " + hex_range_expr(l0, l1, 4));
    };
    const uint32_t ha = high(lo), hb = high(hi);
    if (ha == hb) { part(ha, ha, low(lo), low(hi)); return; }
    uint32_t from = ha, to = hb;
    if (low(lo) != 0xDC00) { part(ha, ha, low(lo), 0xDFFF); ++from; }
    if (low(hi) != 0xDFFF) --to;
    if (from <= to) part(from, to, 0xDC00, 0xDFFF);
    if (low(hi) != 0xDFFF) part(hb, hb, 0xDC00, low(hi));
}

} // namespace

std::string json_char_rule(const CharSet& set, GbnfWriter& w) {
    const CharSet s = set.minus(CharSet::of(0xD800, 0xDFFF));
    CharSet forbidden_raw = CharSet::of(0, 0x1F);
    forbidden_raw.add('"', '"');
    forbidden_raw.add('\\', '\\');
    std::vector<std::string> alts;
    const CharSet raw = s.minus(forbidden_raw);
    if (!raw.empty()) alts.push_back(gbnf_class(raw));
    CharSet short_letters;
    static constexpr std::pair<uint32_t, char> kShort[] = {{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {8, 'b'},
                                                            {12, 'f'}, {10, 'n'}, {13, 'r'}, {9, 't'}};
    for (const auto& [cp, letter] : kShort)
        if (s.contains(cp)) short_letters.add(static_cast<unsigned char>(letter), static_cast<unsigned char>(letter));
    if (!short_letters.empty()) alts.push_back("\"\\\\\" " + gbnf_class(short_letters));
    for (const auto& [lo, hi] : s.ranges) {
        if (lo <= 0xFFFF) alts.push_back("\"\\\\u\" " + hex_range_expr(lo, std::min<uint32_t>(hi, 0xFFFF), 4));
        if (hi >= 0x10000) pair_alts(std::max<uint32_t>(lo, 0x10000), hi, alts);
    }
    if (alts.empty()) throw Error(ErrorCode::argument, "a character class that matches no Unicode character");
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    return w.add("char", body);
}

} // namespace rwd::grammar::detail
