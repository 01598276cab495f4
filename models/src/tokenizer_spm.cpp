// SentencePiece-style BPE ("llama" vocabularies): spaces become U+2581, adjacent symbols merge by
// vocabulary score, and whatever forms no piece falls back to <0xNN> byte tokens.
#include <algorithm>
#include <array>
#include <cstdio>
#include <queue>
#include <string>

#include "rewind/error.h"
#include "tokenizer_impl.h"
#include "unicode.h"

namespace rwd::detail {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81"; // U+2581, SentencePiece's visible space

class SpmTokenizer final : public VocabTokenizer {
public:
    explicit SpmTokenizer(TokenizerSpec& spec) : VocabTokenizer(spec, TokenizerModel::Spm) {
        byte_value_.assign(pieces_.size(), -1);
        for (size_t i = 0; i < pieces_.size(); ++i) {
            if (kinds_[i] != TokenKind::Byte) continue;
            byte_value_[i] = parse_byte_piece(pieces_[i]);
            if (byte_value_[i] < 0)
                throw Error(ErrorCode::format, "tokenizer: tokenizer.ggml.tokens[" + std::to_string(i) + "] = '" + pieces_[i] +
                            "' is a byte token in tokenizer.ggml.token_type but not of the form <0xNN>");
        }
        // Byte fallback prefers the <0xNN> piece and, like llama.cpp, accepts the bare byte.
        for (int b = 0; b < 256; ++b) {
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", b);
            TokenId id = find(name);
            if (id < 0) id = find(std::string(1, static_cast<char>(b)));
            byte_token_[static_cast<size_t>(b)] = id;
        }
    }

    TokenizerModel model() const override { return TokenizerModel::Spm; }

private:
    std::string render_token(TokenId id) const override {
        const auto i = static_cast<size_t>(id);
        if (kinds_[i] == TokenKind::Byte) return std::string(1, static_cast<char>(byte_value_[i]));
        if (kinds_[i] == TokenKind::UserDefined) return pieces_[i]; // shown verbatim, as llama.cpp does
        std::string out;
        const std::string& p = pieces_[i];
        for (size_t pos = 0; pos < p.size();) {
            if (p.compare(pos, kSpace.size(), kSpace) == 0) {
                out += ' ';
                pos += kSpace.size();
            } else {
                out += p[pos++];
            }
        }
        return out;
    }

    void encode_text(std::string_view text, bool after_special, std::vector<TokenId>& out) const override {
        std::string s;
        s.reserve(text.size() + 3 + text.size() / 4);
        if (add_space_prefix_ && after_special) s += kSpace;
        for (char c : text) {
            if (c == ' ')
                s += kSpace;
            else
                s += c;
        }

        std::vector<MergeSymbol> sym = utf8_symbols(s);
        const std::string_view escaped(s);
        const int head = merge_symbols(sym, [&](const MergeSymbol& l, const MergeSymbol& r, double& p) {
            const TokenId id = find(escaped.substr(l.off, l.n + r.n));
            if (id < 0) return false;
            p = scores_[static_cast<size_t>(id)]; // higher score merges first
            return true;
        });

        // Merges only ever produce vocabulary pieces, so a symbol that is no piece is a single
        // character the vocabulary lacks: spell it in bytes.
        for (int i = head; i != -1; i = sym[static_cast<size_t>(i)].next) {
            const MergeSymbol& x = sym[static_cast<size_t>(i)];
            const std::string_view t = escaped.substr(x.off, x.n);
            if (const TokenId id = find(t); id >= 0) {
                out.push_back(id);
                continue;
            }
            for (char c : t) out.push_back(byte_token(static_cast<unsigned char>(c)));
        }
    }

    TokenId byte_token(unsigned char b) const {
        const TokenId id = byte_token_[b];
        if (id >= 0) return id;
        if (unk_ >= 0) return unk_;
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", b);
        throw Error(ErrorCode::unsupported, std::string("tokenizer: cannot encode byte ") + hex +
                    ": the vocabulary has no byte token for it and no unknown token");
    }

    std::vector<int> byte_value_;           // per token: the byte of a <0xNN> piece, else -1
    std::array<TokenId, 256> byte_token_{}; // per byte: its fallback token, or -1
};

} // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(TokenizerSpec& spec) {
    return std::make_unique<SpmTokenizer>(spec);
}

} // namespace rwd::detail
