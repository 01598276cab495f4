// Unicode helpers for the tokenizers: lenient UTF-8 decoding, ICU-backed character classes and
// GPT-2's byte-level alphabet.
#include "unicode.h"

#include <array>

#include <unicode/uchar.h>

namespace rwd::unicode {

namespace {

bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

// One code point starting at `pos`, or U+FFFD consuming a single byte when the lead byte or its
// continuation bytes are structurally wrong (llama.cpp's rule, so both split text identically).
uint32_t decode_one(std::string_view s, size_t& pos) {
    const auto b0 = static_cast<unsigned char>(s[pos]);
    size_t n = 0;
    uint32_t cp = 0;
    if (b0 < 0x80) {
        ++pos;
        return b0;
    } else if ((b0 & 0xE0) == 0xC0) {
        n = 2;
        cp = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
        n = 3;
        cp = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
        n = 4;
        cp = b0 & 0x07;
    } else {
        ++pos;
        return kReplacement;
    }
    if (pos + n > s.size()) {
        ++pos;
        return kReplacement;
    }
    for (size_t i = 1; i < n; ++i) {
        const auto c = static_cast<unsigned char>(s[pos + i]);
        if (!is_cont(c)) {
            ++pos;
            return kReplacement;
        }
        cp = (cp << 6) | (c & 0x3F);
    }
    if (cp > 0x10FFFF) { // four-byte forms can spell values past Unicode's end
        ++pos;
        return kReplacement;
    }
    pos += n;
    return cp;
}

struct ByteTables {
    std::array<std::string, 256> to_symbol;
    std::array<int, 324> from_symbol; // code points 0..323 cover the whole alphabet
};

// GPT-2 keeps the printable Latin-1 bytes as themselves and moves the other 68 (controls, space,
// DEL, NBSP, soft hyphen) to U+0100.. in byte order, so every byte has a visible stand-in.
ByteTables make_byte_tables() {
    ByteTables t;
    t.from_symbol.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
        append_utf8(t.to_symbol[static_cast<size_t>(b)], cp);
        t.from_symbol[cp] = b;
    }
    return t;
}

const ByteTables& byte_tables() {
    static const ByteTables tables = make_byte_tables();
    return tables;
}

} // namespace

std::vector<uint32_t> to_code_points(std::string_view utf8) {
    std::vector<uint32_t> out;
    out.reserve(utf8.size());
    size_t pos = 0;
    while (pos < utf8.size()) out.push_back(decode_one(utf8, pos));
    return out;
}

uint32_t next_code_point(std::string_view utf8, size_t& pos) { return decode_one(utf8, pos); }

void append_utf8(std::string& out, uint32_t cp) {
    if (cp > 0x10FFFF) cp = kReplacement;
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

CharClass classify(uint32_t cp) {
    CharClass c;
    if (cp > 0x10FFFF) return c;
    const auto ch = static_cast<UChar32>(cp);
    const uint32_t mask = U_GET_GC_MASK(ch);
    c.letter = (mask & U_GC_L_MASK) != 0;
    c.number = (mask & U_GC_N_MASK) != 0;
    c.punctuation = (mask & U_GC_P_MASK) != 0;
    c.whitespace = u_isUWhiteSpace(ch) != 0;
    return c;
}

const std::string& byte_to_symbol(uint8_t byte) { return byte_tables().to_symbol[byte]; }

int symbol_to_byte(uint32_t cp) {
    const auto& t = byte_tables().from_symbol;
    return cp < t.size() ? t[cp] : -1;
}

size_t take_valid_utf8(std::string_view bytes, std::string& out) {
    size_t pos = 0;
    while (pos < bytes.size()) {
        const auto b0 = static_cast<unsigned char>(bytes[pos]);
        if (b0 < 0x80) {
            out += static_cast<char>(b0);
            ++pos;
            continue;
        }
        // Well-formed sequences per the Unicode standard (table 3-7): the allowed range of the
        // second byte depends on the lead, which rules out overlongs, surrogates and > U+10FFFF.
        size_t n = 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b0 >= 0xC2 && b0 <= 0xDF) {
            n = 2;
        } else if (b0 >= 0xE0 && b0 <= 0xEF) {
            n = 3;
            if (b0 == 0xE0) lo = 0xA0;
            if (b0 == 0xED) hi = 0x9F;
        } else if (b0 >= 0xF0 && b0 <= 0xF4) {
            n = 4;
            if (b0 == 0xF0) lo = 0x90;
            if (b0 == 0xF4) hi = 0x8F;
        } else {
            append_utf8(out, kReplacement);
            ++pos;
            continue;
        }
        size_t i = 1;
        for (; i < n && pos + i < bytes.size(); ++i) {
            const auto c = static_cast<unsigned char>(bytes[pos + i]);
            const bool ok = i == 1 ? (c >= lo && c <= hi) : is_cont(c);
            if (!ok) break;
        }
        if (i == n) {
            out.append(bytes.substr(pos, n));
            pos += n;
        } else if (pos + i == bytes.size()) {
            return pos; // valid so far but incomplete: wait for more bytes
        } else {
            // The maximal valid prefix becomes one U+FFFD; the offending byte starts afresh.
            append_utf8(out, kReplacement);
            pos += i;
        }
    }
    return pos;
}

} // namespace rwd::unicode
