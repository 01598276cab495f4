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
    Gpt2,       // the GPT-2 pattern alone
    DigitsGpt2, // every \p{N} alone, then GPT-2 (starcoder, refact, smollm)
    Default,    // [\p{P}$+<=>^~|]+, GPT-2, \p{N}+, [0-9]{3}: llama.cpp's fallback
};

PreSplit pre_split_for(const std::string& pre) {
    if (pre == "gpt-2") return PreSplit::Gpt2;
    if (pre == "starcoder" || pre == "refact" || pre == "smollm") return PreSplit::DigitsGpt2;
    if (pre.empty() || pre == "default") return PreSplit::Default;
    throw Error(ErrorCode::unsupported, "tokenizer: tokenizer.ggml.pre = '" + pre +
                "' is not supported for gpt2 vocabularies (supported: gpt-2, starcoder, refact, smollm, default)");
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

// Key of a merge pair: the left part's length first, so ("a b", "c") and ("a", "b c") differ.
void merge_key(std::string& key, std::string_view a, std::string_view b) {
    const auto len = static_cast<uint32_t>(a.size());
    key.assign(reinterpret_cast<const char*>(&len), sizeof len);
    key.append(a);
    key.append(b);
}

class BpeTokenizer final : public VocabTokenizer {
public:
    explicit BpeTokenizer(const TokenizerSpec& spec)
        : VocabTokenizer(spec, TokenizerModel::Bpe), split_(pre_split_for(spec.pre)) {
        if (spec.merges.empty()) throw Error(ErrorCode::format, "tokenizer: tokenizer.ggml.merges is missing or empty (needed by gpt2 vocabularies)");
        ranks_.reserve(spec.merges.size());
        std::string key;
        for (size_t i = 0; i < spec.merges.size(); ++i) {
            const std::string& m = spec.merges[i];
            // Split at the first space after the first character: a part may itself be " ".
            const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
            if (sp == std::string::npos)
                throw Error(ErrorCode::format, "tokenizer: tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + m +
                            "' is not of the form 'left right'");
            merge_key(key, std::string_view(m).substr(0, sp), std::string_view(m).substr(sp + 1));
            ranks_.emplace(key, static_cast<int>(i)); // the first occurrence keeps its rank
        }
        render_all();
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
        for (uint32_t cp : unicode::to_code_points(p)) {
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
        std::vector<MergeSymbol> sym = utf8_symbols(w);
        const std::string_view ws(w);
        std::string key;
        const int head = merge_symbols(sym, [&](const MergeSymbol& a, const MergeSymbol& b, double& p) {
            merge_key(key, ws.substr(a.off, a.n), ws.substr(b.off, b.n));
            const auto it = ranks_.find(std::string_view(key));
            if (it == ranks_.end()) return false;
            p = -static_cast<double>(it->second); // lower rank merges first
            return true;
        });

        for (int i = head; i != -1; i = sym[static_cast<size_t>(i)].next) {
            const MergeSymbol& s = sym[static_cast<size_t>(i)];
            const std::string_view piece = ws.substr(s.off, s.n);
            if (const TokenId id = find(piece); id >= 0) {
                out.push_back(id);
                continue;
            }
            // A merge whose result is not in the vocabulary (an inconsistent file): fall back to
            // the single symbols, then to the unknown token.
            for (size_t off = 0; off < piece.size();) {
                const size_t n = std::min(unicode::utf8_seq_len(static_cast<unsigned char>(piece[off])), piece.size() - off);
                TokenId id = find(piece.substr(off, n));
                if (id < 0) id = unk_;
                if (id < 0)
                    throw Error(ErrorCode::format, "tokenizer: the vocabulary has no token for byte symbol '" +
                                std::string(piece.substr(off, n)) + "' and no unknown token");
                out.push_back(id);
                off += n;
            }
        }
    }

    PreSplit split_;
    StringMap<int> ranks_; // merge_key(left, right) -> rank (its line in tokenizer.ggml.merges)
};

} // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const TokenizerSpec& spec) {
    return std::make_unique<BpeTokenizer>(spec);
}

} // namespace rwd::detail
