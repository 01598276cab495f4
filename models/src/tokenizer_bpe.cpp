// GPT-2 byte-level BPE ("gpt2" vocabularies): the pre-tokenizer splits text into words (a
// hand-written scanner per llama.cpp's patterns for tokenizer.ggml.pre), each word's bytes are
// spelled in GPT-2's printable alphabet, and adjacent symbols merge by tokenizer.ggml.merges rank.
#include <algorithm>
#include <cstdint>
#include <queue>
#include <string>
#include <utility>

#include "rewind/error.h"
#include "tokenizer_impl.h"
#include "unicode.h"

namespace rwd::detail {

namespace {

using unicode::CharClass;

// How tokenizer.ggml.pre splits text before BPE; each is a sequence of llama.cpp's regex passes,
// every pass splitting the pieces the previous one left (matches and the gaps between them).
enum class PreSplit {
    Gpt2,          // the GPT-2 pattern alone
    DigitsGpt2,    // every \p{N} alone, then GPT-2 (starcoder, refact, smollm)
    Default,       // [\p{P}$+<=>^~|]+, GPT-2, \p{N}+, [0-9]{3}: llama.cpp's fallback
    Llama3,        // the Llama 3 pattern (numbers in groups of up to three)
    Qwen2,         // the Llama 3 pattern with every number alone
    DeepseekLlm,   // [\r\n], \s?<cased letter>+, \s?<ASCII/fullwidth symbol>+, \s+$, <CJK>+, \p{N}+
    DeepseekCoder, // [\r\n], \s?\p{L}+, \s?\p{P}+, <CJK>+, \p{N}
};

// The names llama.cpp maps to each pattern (its aliases of one pattern included); anything else
// is refused by name rather than split with a pattern the vocabulary was not trained with.
PreSplit pre_split_for(const std::string& pre) {
    if (pre == "gpt-2") return PreSplit::Gpt2;
    if (pre == "starcoder" || pre == "refact" || pre == "smollm") return PreSplit::DigitsGpt2;
    if (pre.empty() || pre == "default") return PreSplit::Default;
    if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return PreSplit::Llama3;
    if (pre == "qwen2" || pre == "deepseek-r1-qwen") return PreSplit::Qwen2;
    if (pre == "deepseek-llm") return PreSplit::DeepseekLlm;
    if (pre == "deepseek-coder") return PreSplit::DeepseekCoder;
    throw Error(ErrorCode::unsupported, "tokenizer: tokenizer.ggml.pre = '" + pre +
                "' is not supported for gpt2 vocabularies (supported: llama-bpe (also llama3, llama-v3), qwen2 (also "
                "deepseek-r1-qwen), deepseek-llm, deepseek-coder, gpt-2, starcoder, refact, smollm, default)");
}

using Range = std::pair<size_t, size_t>; // [begin, end) in code points

struct Text {
    const std::vector<uint32_t>& cps;
    const std::vector<CharClass>& cls;
};

// Pass "X+": maximal runs of X, and the stretches between them.
template <typename Pred>
void split_runs(const Range& r, Pred is_x, std::vector<Range>& out) {
    for (size_t i = r.first; i < r.second;) {
        const bool x = is_x(i);
        size_t j = i + 1;
        while (j < r.second && is_x(j) == x) ++j;
        out.emplace_back(i, j);
        i = j;
    }
}

// Pass "X": every X alone, and the stretches between them.
template <typename Pred>
void split_each(const Range& r, Pred is_x, std::vector<Range>& out) {
    for (size_t i = r.first; i < r.second;) {
        size_t j = i + 1;
        if (!is_x(i))
            while (j < r.second && !is_x(j)) ++j;
        out.emplace_back(i, j);
        i = j;
    }
}

// Pass "[0-9][0-9][0-9]": leftmost non-overlapping triples of ASCII digits.
void split_triples(const Text& t, const Range& r, std::vector<Range>& out) {
    const auto digit = [&](size_t i) { return t.cps[i] >= '0' && t.cps[i] <= '9'; };
    size_t gap = r.first, i = r.first;
    while (i + 3 <= r.second) {
        if (digit(i) && digit(i + 1) && digit(i + 2)) {
            if (gap < i) out.emplace_back(gap, i);
            out.emplace_back(i, i + 3);
            i += 3;
            gap = i;
        } else {
            ++i;
        }
    }
    if (gap < r.second) out.emplace_back(gap, r.second);
}

// Pass: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// The lookahead sees only this piece: its end counts as the end of text, as in llama.cpp.
void split_gpt2(const Text& t, const Range& r, std::vector<Range>& out) {
    const size_t end = r.second;
    const auto in = [&](size_t i) { return i < end; };
    const auto letter = [&](size_t i) { return in(i) && t.cls[i].letter; };
    const auto number = [&](size_t i) { return in(i) && t.cls[i].number; };
    const auto space = [&](size_t i) { return in(i) && t.cls[i].whitespace; };
    const auto other = [&](size_t i) { return in(i) && !t.cls[i].letter && !t.cls[i].number && !t.cls[i].whitespace; };

    size_t pos = r.first;
    const auto emit = [&](size_t to) {
        out.emplace_back(pos, to);
        pos = to;
    };
    while (pos < end) {
        const uint32_t c = t.cps[pos];
        if (c == '\'' && in(pos + 1)) {
            const uint32_t c1 = t.cps[pos + 1];
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                emit(pos + 2);
                continue;
            }
            if (in(pos + 2)) {
                const uint32_t c2 = t.cps[pos + 2];
                if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
                    emit(pos + 3);
                    continue;
                }
            }
        }
        // An optional single ' ' glues onto a following letter, number or symbol run.
        const size_t k = c == ' ' ? pos + 1 : pos;
        if (letter(k)) {
            size_t j = k;
            while (letter(j)) ++j;
            emit(j);
            continue;
        }
        if (number(k)) {
            size_t j = k;
            while (number(j)) ++j;
            emit(j);
            continue;
        }
        if (other(k)) {
            size_t j = k;
            while (other(j)) ++j;
            emit(j);
            continue;
        }
        size_t j = pos;
        while (space(j)) ++j;
        if (j - pos > 1 && in(j)) {
            emit(j - 1); // \s+(?!\S): leave the last blank to lead the next word
        } else if (j > pos) {
            emit(j);
        } else {
            emit(pos + 1);
        }
    }
}

// Pass: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//       \s*[\r\n]+|\s+(?!\S)|\s+
// Llama 3 (D = 3) and Qwen2 (D = 1). As in split_gpt2, the piece's end counts as the end of text.
void split_llama3(const Text& t, const Range& r, size_t max_digits, std::vector<Range>& out) {
    const size_t end = r.second;
    const auto in = [&](size_t i) { return i < end; };
    const auto letter = [&](size_t i) { return in(i) && t.cls[i].letter; };
    const auto number = [&](size_t i) { return in(i) && t.cls[i].number; };
    const auto space = [&](size_t i) { return in(i) && t.cls[i].whitespace; };
    const auto other = [&](size_t i) { return in(i) && !t.cls[i].letter && !t.cls[i].number && !t.cls[i].whitespace; };
    const auto newline = [&](size_t i) { return in(i) && (t.cps[i] == '\r' || t.cps[i] == '\n'); };
    const auto lower = [&](size_t i) { return t.cps[i] >= 'A' && t.cps[i] <= 'Z' ? t.cps[i] + 32 : t.cps[i]; };

    size_t pos = r.first;
    const auto emit = [&](size_t to) {
        out.emplace_back(pos, to);
        pos = to;
    };
    while (pos < end) {
        const uint32_t c = t.cps[pos];
        if (c == '\'' && in(pos + 1)) { // contractions, either case
            const uint32_t c1 = lower(pos + 1);
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                emit(pos + 2);
                continue;
            }
            if (in(pos + 2)) {
                const uint32_t c2 = lower(pos + 2);
                if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
                    emit(pos + 3);
                    continue;
                }
            }
        }
        // A letter run, optionally led by one character that is no newline, letter or number.
        if (!newline(pos) && !number(pos) && (letter(pos) || letter(pos + 1))) {
            size_t j = pos + 1;
            while (letter(j)) ++j;
            emit(j);
            continue;
        }
        if (number(pos)) {
            size_t j = pos;
            while (number(j) && j - pos < max_digits) ++j;
            emit(j);
            continue;
        }
        // A symbol run, optionally led by one ' ', then any newlines.
        const size_t k = c == ' ' ? pos + 1 : pos;
        if (other(k)) {
            size_t j = k;
            while (other(j)) ++j;
            while (newline(j)) ++j;
            emit(j);
            continue;
        }
        size_t j = pos, after_newline = 0;
        while (space(j)) {
            if (newline(j)) after_newline = j + 1;
            ++j;
        }
        if (after_newline > 0) {
            emit(after_newline); // \s*[\r\n]+: blanks up to the last newline of the run
        } else if (j - pos > 1 && in(j)) {
            emit(j - 1); // \s+(?!\S): leave the last blank to lead the next word
        } else if (j > pos) {
            emit(j);
        } else {
            emit(pos + 1);
        }
    }
}

// Pass "\s?X+": a run of X, led by one blank where there is one.
template <typename Pred>
void split_blank_led_runs(const Text& t, const Range& r, Pred is_x, std::vector<Range>& out) {
    size_t gap = r.first;
    for (size_t i = r.first; i < r.second;) {
        size_t j = i;
        if (t.cls[i].whitespace && i + 1 < r.second && is_x(i + 1)) j = i + 1;
        if (!is_x(j)) {
            ++i;
            continue;
        }
        while (j < r.second && is_x(j)) ++j;
        if (gap < i) out.emplace_back(gap, i);
        out.emplace_back(i, j);
        i = gap = j;
    }
    if (gap < r.second) out.emplace_back(gap, r.second);
}

// Pass "\s+$": the blanks that end the piece.
void split_trailing_blanks(const Text& t, const Range& r, std::vector<Range>& out) {
    size_t b = r.second;
    while (b > r.first && t.cls[b - 1].whitespace) --b;
    if (b > r.first) out.emplace_back(r.first, b);
    if (b < r.second) out.emplace_back(b, r.second);
}

struct CodeRange {
    uint32_t first, last;
};

template <size_t N>
bool in_table(const CodeRange (&table)[N], uint32_t cp) {
    const auto it = std::upper_bound(std::begin(table), std::end(table), cp,
                                     [](uint32_t c, const CodeRange& r) { return c < r.first; });
    return it != std::begin(table) && cp <= std::prev(it)->last;
}

// DeepSeek LLM's letter class: the cased letters (Lu, Ll, Lt) of an older Unicode version, as its
// pattern lists them.
constexpr CodeRange kDeepseekLetters[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA}, {0x1BC, 0x1BF},
    {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377}, {0x37B, 0x37D}, {0x37F, 0x37F},
    {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481},
    {0x48A, 0x52F}, {0x531, 0x556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D},
    {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC},
    {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102},
    {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126},
    {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3},
    {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF},
    {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F},
    {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF},
    {0x1E900, 0x1E943},
};
// DeepSeek LLM's symbol class: ASCII punctuation and symbols, their fullwidth forms, curly quotes,
// and the ideographic space, comma and full stop.
constexpr CodeRange kDeepseekSymbols[] = {{0x21, 0x2F},     {0x3A, 0x7E},     {0x2018, 0x201F}, {0x3000, 0x3002},
                                          {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E}};
// Both DeepSeek patterns' CJK class: U+0800..U+9FA5 (from the Samaritan block to the last
// unified ideograph of Unicode 1.1) and the Hangul syllables and Jamo extension B.
constexpr CodeRange kDeepseekCjk[] = {{0x0800, 0x9FA5}, {0xAC00, 0xD7FF}};

// tokenizer.ggml.merges as a table from (left, right) to rank. The merge texts live in one arena
// and the table is open addressing over entry indexes, so 280k merges cost three arrays rather
// than 280k hash-map nodes. Sized once; the first occurrence of a pair keeps its rank.
class MergeRanks {
public:
    explicit MergeRanks(size_t n_merges) {
        size_t cap = 16;
        while (cap < 2 * n_merges) cap *= 2;
        slots_.assign(cap, -1);
        entries_.reserve(n_merges);
    }
    void add(std::string_view left, std::string_view right, int rank) {
        const size_t s = slot_of(left, right);
        if (slots_[s] >= 0) return;
        slots_[s] = static_cast<int32_t>(entries_.size());
        entries_.push_back({arena_.size(), static_cast<uint32_t>(left.size()), static_cast<uint32_t>(right.size()), rank});
        arena_.append(left);
        arena_.append(right);
    }
    // The pair's rank, or -1 if the pair never merges.
    int find(std::string_view left, std::string_view right) const {
        const int32_t e = slots_[slot_of(left, right)];
        return e < 0 ? -1 : entries_[static_cast<size_t>(e)].rank;
    }

private:
    struct Entry {
        size_t off;                   // left then right in arena_
        uint32_t left_len, right_len;
        int rank;
    };
    size_t slot_of(std::string_view left, std::string_view right) const {
        const std::hash<std::string_view> h;
        const size_t mask = slots_.size() - 1;
        size_t s = (h(left) * 0x9E3779B97F4A7C15ull ^ h(right)) & mask;
        for (;; s = (s + 1) & mask) {
            const int32_t e = slots_[s];
            if (e < 0) return s;
            const Entry& x = entries_[static_cast<size_t>(e)];
            if (x.left_len == left.size() && x.right_len == right.size() &&
                std::string_view(arena_).substr(x.off, x.left_len) == left &&
                std::string_view(arena_).substr(x.off + x.left_len, x.right_len) == right)
                return s;
        }
    }
    std::string arena_;
    std::vector<Entry> entries_;
    std::vector<int32_t> slots_; // index into entries_, -1: empty
};

class BpeTokenizer final : public VocabTokenizer {
public:
    explicit BpeTokenizer(TokenizerSpec& spec)
        : VocabTokenizer(spec, TokenizerModel::Bpe), split_(pre_split_for(spec.pre)), ranks_(spec.merges.size()) {
        // llama.cpp's settings for Llama 3's pattern: whole-word lookup first, and BOS added
        // unless tokenizer.ggml.add_bos_token says otherwise.
        if (split_ == PreSplit::Llama3) {
            ignore_merges_ = true;
            if (!spec.add_bos) {
                if (bos_ < 0)
                    throw Error(ErrorCode::format, "tokenizer: llama-bpe vocabularies add a BOS token but there is none");
                add_bos_ = true;
            }
        }
        if (spec.merges.empty()) throw Error(ErrorCode::format, "tokenizer: tokenizer.ggml.merges is missing or empty (needed by gpt2 vocabularies)");
        for (size_t i = 0; i < spec.merges.size(); ++i) {
            const std::string& m = spec.merges[i];
            // Split at the first space after the first character: a part may itself be " ".
            const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
            if (sp == std::string::npos)
                throw Error(ErrorCode::format, "tokenizer: tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + m +
                            "' is not of the form 'left right'");
            ranks_.add(std::string_view(m).substr(0, sp), std::string_view(m).substr(sp + 1), static_cast<int>(i));
        }
    }

    TokenizerModel model() const override { return TokenizerModel::Bpe; }

private:
    std::string render_token(TokenId id) const override {
        const auto i = static_cast<size_t>(id);
        const std::string& p = pieces_[i];
        if (kinds_[i] == TokenKind::UserDefined) return p; // stored as plain text, not byte-level
        if (kinds_[i] == TokenKind::Byte)
            if (const int b = parse_byte_piece(p); b >= 0) return std::string(1, static_cast<char>(b));
        std::string out;
        for (size_t pos = 0; pos < p.size();) {
            const uint32_t cp = unicode::next_code_point(p, pos);
            const int b = unicode::symbol_to_byte(cp);
            if (b >= 0)
                out += static_cast<char>(b);
            else
                unicode::append_utf8(out, cp); // outside the byte alphabet: keep the character
        }
        return out;
    }

    void encode_text(std::string_view text, bool /*after_special*/, std::vector<TokenId>& out) const override {
        const std::vector<uint32_t> cps = unicode::to_code_points(text);
        std::vector<CharClass> cls(cps.size());
        for (size_t i = 0; i < cps.size(); ++i) cls[i] = unicode::classify(cps[i]);
        const Text t{cps, cls};

        std::vector<Range> words{{0, cps.size()}}, next;
        const auto pass = [&](auto&& split_one) {
            next.clear();
            for (const Range& r : words) split_one(r, next);
            words.swap(next);
        };
        const auto gpt2 = [&](const Range& r, std::vector<Range>& o) { split_gpt2(t, r, o); };
        switch (split_) {
        case PreSplit::Gpt2:
            pass(gpt2);
            break;
        case PreSplit::DigitsGpt2:
            pass([&](const Range& r, std::vector<Range>& o) { split_each(r, [&](size_t i) { return cls[i].number; }, o); });
            pass(gpt2);
            break;
        case PreSplit::Default:
            pass([&](const Range& r, std::vector<Range>& o) {
                split_runs(r, [&](size_t i) {
                    const uint32_t c = cps[i];
                    return cls[i].punctuation || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
                           c == '^' || c == '~' || c == '|';
                }, o);
            });
            pass(gpt2);
            pass([&](const Range& r, std::vector<Range>& o) { split_runs(r, [&](size_t i) { return cls[i].number; }, o); });
            pass([&](const Range& r, std::vector<Range>& o) { split_triples(t, r, o); });
            break;
        case PreSplit::Llama3:
        case PreSplit::Qwen2: {
            const size_t digits = split_ == PreSplit::Llama3 ? 3 : 1;
            pass([&](const Range& r, std::vector<Range>& o) { split_llama3(t, r, digits, o); });
            break;
        }
        case PreSplit::DeepseekLlm:
        case PreSplit::DeepseekCoder: {
            // Classes spelled with explicit characters are matched by llama.cpp against the text
            // with every non-ASCII blank replaced by U+000B, so those blanks never belong to them
            // (U+3000 is in both the CJK and the symbol ranges but never matches either).
            const auto listed = [&](const auto& table) {
                return [&](size_t i) { return !(cps[i] > 0x7F && cls[i].whitespace) && in_table(table, cps[i]); };
            };
            const auto newline = [&](size_t i) { return cps[i] == '\r' || cps[i] == '\n'; };
            pass([&](const Range& r, std::vector<Range>& o) { split_each(r, newline, o); });
            if (split_ == PreSplit::DeepseekLlm) {
                pass([&](const Range& r, std::vector<Range>& o) { split_blank_led_runs(t, r, listed(kDeepseekLetters), o); });
                pass([&](const Range& r, std::vector<Range>& o) { split_blank_led_runs(t, r, listed(kDeepseekSymbols), o); });
                pass([&](const Range& r, std::vector<Range>& o) { split_trailing_blanks(t, r, o); });
                pass([&](const Range& r, std::vector<Range>& o) { split_runs(r, listed(kDeepseekCjk), o); });
                pass([&](const Range& r, std::vector<Range>& o) { split_runs(r, [&](size_t i) { return cls[i].number; }, o); });
            } else {
                pass([&](const Range& r, std::vector<Range>& o) {
                    split_blank_led_runs(t, r, [&](size_t i) { return cls[i].letter; }, o);
                });
                pass([&](const Range& r, std::vector<Range>& o) {
                    split_blank_led_runs(t, r, [&](size_t i) { return cls[i].punctuation; }, o);
                });
                pass([&](const Range& r, std::vector<Range>& o) { split_runs(r, listed(kDeepseekCjk), o); });
                pass([&](const Range& r, std::vector<Range>& o) { split_each(r, [&](size_t i) { return cls[i].number; }, o); });
            }
            break;
        }
        }

        std::string word;
        for (const Range& r : words) {
            // Each byte of the word's UTF-8 becomes one printable symbol (malformed input was
            // already replaced by U+FFFD when decoding).
            std::string utf8;
            for (size_t i = r.first; i < r.second; ++i) unicode::append_utf8(utf8, cps[i]);
            word.clear();
            for (char c : utf8) word += unicode::byte_to_symbol(static_cast<uint8_t>(c));
            encode_word(word, out);
        }
    }

    void encode_word(const std::string& w, std::vector<TokenId>& out) const {
        if (ignore_merges_) // Llama 3: a word that is a whole token is taken as is, merges or not
            if (const TokenId id = find(w); id >= 0) {
                out.push_back(id);
                return;
            }
        std::vector<MergeSymbol> sym = utf8_symbols(w);
        const std::string_view ws(w);
        const int head = merge_symbols(sym, [&](const MergeSymbol& a, const MergeSymbol& b, double& p) {
            const int rank = ranks_.find(ws.substr(a.off, a.n), ws.substr(b.off, b.n));
            if (rank < 0) return false;
            p = -static_cast<double>(rank); // lower rank merges first
            return true;
        });

        for (int i = head; i != -1; i = sym[static_cast<size_t>(i)].next) {
            const MergeSymbol& s = sym[static_cast<size_t>(i)];
            const std::string_view piece = ws.substr(s.off, s.n);
            if (const TokenId id = find(piece); id >= 0) {
                out.push_back(id);
                continue;
            }
            // A symbol the vocabulary lacks: either a merge whose result is not in it (an
            // inconsistent file), or a byte some byte-level vocabularies have no token for
            // (StarCoder's has none for 0xF1, for instance). Fall back to the single symbols and
            // drop those that are missing too, as llama.cpp does (StarCoder's unknown token is
            // "<|endoftext|>", which would end the prompt).
            for (size_t off = 0; off < piece.size();) {
                const size_t n = std::min(unicode::utf8_seq_len(static_cast<unsigned char>(piece[off])), piece.size() - off);
                const TokenId id = find(piece.substr(off, n));
                off += n;
                if (id < 0) continue;
                out.push_back(id);
            }
        }
    }

    PreSplit split_;
    bool ignore_merges_ = false;
    MergeRanks ranks_; // (left, right) -> rank (its line in tokenizer.ggml.merges)
};

} // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(TokenizerSpec& spec) {
    return std::make_unique<BpeTokenizer>(spec);
}

} // namespace rwd::detail
