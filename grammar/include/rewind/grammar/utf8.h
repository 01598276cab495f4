// UTF-8 decoding for the grammar front ends and the matcher: character classes, regexes and
// token bytes are matched code point by code point, and a token may end inside a character.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rwd::grammar {

// One step of decoding: the code point and the bytes it took. `length` 0 means the bytes at hand
// are a valid but incomplete start of a character (more bytes may complete it); `valid` false
// means they can never be UTF-8 (a stray continuation byte, an overlong form, a surrogate, a
// value past U+10FFFF).
struct Utf8Step {
    uint32_t code_point = 0;
    size_t length = 0;
    bool valid = true;
};

// Decodes the character at the start of `s` (non-empty). Strict RFC 3629: overlong forms,
// surrogates (U+D800..U+DFFF) and values above U+10FFFF are invalid.
Utf8Step decode_utf8(std::string_view s);

// Appends the UTF-8 encoding of `cp` (<= U+10FFFF, not a surrogate) to `out`; returns false and
// appends nothing otherwise.
bool append_utf8(uint32_t cp, std::string& out);

// Lengths in bytes of a character from its first byte: 1..4, or 0 for a byte that cannot start one.
constexpr size_t utf8_length_of(unsigned char lead) {
    return lead < 0x80 ? 1 : lead < 0xC2 ? 0 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : lead < 0xF5 ? 4 : 0;
}

} // namespace rwd::grammar
