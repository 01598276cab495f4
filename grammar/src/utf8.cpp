// Strict UTF-8 decoding and encoding (RFC 3629), with "incomplete" kept apart from "invalid" so
// that a token ending inside a character can still be judged by the bytes that follow.
#include "rewind/grammar/utf8.h"

namespace rwd::grammar {

Utf8Step decode_utf8(std::string_view s) {
    const auto b0 = static_cast<unsigned char>(s[0]);
    const size_t n = utf8_length_of(b0);
    if (n == 0) return {0, 0, false};
    if (n == 1) return {b0, 1, true};
    // The valid range of the second byte depends on the first (no overlongs, no surrogates,
    // nothing past U+10FFFF); later continuation bytes are 0x80..0xBF.
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 == 0xE0) lo = 0xA0;
    else if (b0 == 0xED) hi = 0x9F;
    else if (b0 == 0xF0) lo = 0x90;
    else if (b0 == 0xF4) hi = 0x8F;
    uint32_t cp = b0 & (0xFF >> (n + 1));
    for (size_t i = 1; i < n; ++i) {
        if (i >= s.size()) return {0, 0, true}; // a valid start, cut short
        const auto b = static_cast<unsigned char>(s[i]);
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return {0, 0, false};
        cp = (cp << 6) | (b & 0x3F);
    }
    return {cp, n, true};
}

bool append_utf8(uint32_t cp, std::string& out) {
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    return true;
}

} // namespace rwd::grammar
