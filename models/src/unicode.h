// Private Unicode helpers for the tokenizers: lenient UTF-8 <-> code points, the character classes
// the pre-tokenizers need (via ICU), and GPT-2's byte <-> printable-code-point mapping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rwd::unicode {

inline constexpr uint32_t kReplacement = 0xFFFD;

// Length of the UTF-8 sequence a byte starts, judged from its high bits only (continuation and
// invalid bytes count as 1). This is how SentencePiece-style tokenizers cut text into symbols.
inline size_t utf8_seq_len(unsigned char lead) {
    static constexpr unsigned char kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return kLen[lead >> 4];
}

// Decodes UTF-8 the way llama.cpp does: structurally malformed bytes become U+FFFD one byte at a
// time (so tokenizing never fails on bad input); overlong forms and surrogates are accepted.
std::vector<uint32_t> to_code_points(std::string_view utf8);
// One code point of to_code_points: the one starting at `pos`, which moves past it (pos < size).
uint32_t next_code_point(std::string_view utf8, size_t& pos);

// Appends the UTF-8 encoding of `cp` (values above U+10FFFF are written as U+FFFD).
void append_utf8(std::string& out, uint32_t cp);

// The classes the GPT-2 family of split patterns uses.
struct CharClass {
    bool letter = false;      // \p{L}
    bool number = false;      // \p{N}
    bool punctuation = false; // \p{P}
    bool whitespace = false;  // \s: the Unicode White_Space property
};
CharClass classify(uint32_t cp);

// GPT-2's byte-level alphabet: every byte is shown as one printable code point.
const std::string& byte_to_symbol(uint8_t byte); // UTF-8 of the code point standing for `byte`
int symbol_to_byte(uint32_t cp);                 // the byte, or -1 if `cp` stands for none

// Length of the longest prefix of `bytes` that can be emitted as valid UTF-8 now, and the text to
// emit for it (invalid sequences replaced by U+FFFD). An incomplete but so-far-valid sequence at
// the end is left out, for the caller to hold back until more bytes arrive.
size_t take_valid_utf8(std::string_view bytes, std::string& out);

} // namespace rwd::unicode
