// Private: state and steps shared by both tokenizer kinds (vocabulary lookup by text, splitting
// out special tokens, BOS/EOS), and the factories of the two concrete tokenizers.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/tokenizer.h"

namespace rwd::detail {

// Vocabulary lookup by text: open addressing over ids, comparing against the pieces themselves,
// so a vocabulary of 150k tokens costs one array of ints instead of 150k hash-map nodes (loading
// stays fast, also under sanitizers). Sized once; later duplicates win, as in llama.cpp.
class PieceIndex {
public:
    void build(const std::vector<std::string>& pieces) {
        size_t cap = 16;
        while (cap < 2 * pieces.size()) cap *= 2;
        slots_.assign(cap, -1);
        for (size_t i = 0; i < pieces.size(); ++i) {
            size_t s = slot_of(pieces[i], pieces);
            slots_[s] = static_cast<TokenId>(i);
        }
    }
    TokenId find(std::string_view text, const std::vector<std::string>& pieces) const {
        return slots_.empty() ? -1 : slots_[slot_of(text, pieces)];
    }

private:
    // The slot holding `text`, or the empty slot where it would go.
    size_t slot_of(std::string_view text, const std::vector<std::string>& pieces) const {
        const size_t mask = slots_.size() - 1;
        for (size_t s = std::hash<std::string_view>{}(text) & mask;; s = (s + 1) & mask) {
            const TokenId id = slots_[s];
            if (id < 0 || pieces[static_cast<size_t>(id)] == text) return s;
        }
    }
    std::vector<TokenId> slots_; // -1: empty
};

// The byte a piece like "<0x0A>" stands for, or -1 if the piece is not of that form.
inline int parse_byte_piece(std::string_view p) {
    const auto hex = [](char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
    const int hi = hex(p[3]), lo = hex(p[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Stores the checked vocabulary and implements everything but the text -> ids step of one
// fragment of plain text, which each kind supplies.
class VocabTokenizer : public Tokenizer {
public:
    std::vector<TokenId> encode(std::string_view text, AddBos add_bos = AddBos::Default,
                                SpecialTokens special = SpecialTokens::AsText) const final;
    std::string token_to_piece(TokenId id, bool render_special = false) const final;

protected:
    // Validates and takes the fields common to both kinds (special ids, flags, token kinds); moves
    // spec.tokens and spec.scores out (a vocabulary holds up to a few hundred thousand strings).
    explicit VocabTokenizer(TokenizerSpec& spec, TokenizerModel kind);

    // Appends the ids of one stretch of plain text. `after_special`: the stretch starts the text or
    // follows a special token (SentencePiece then prefixes a space).
    virtual void encode_text(std::string_view text, bool after_special, std::vector<TokenId>& out) const = 0;
    // The text of a normal, byte or user-defined token (control/unknown/unused are handled here).
    virtual std::string render_token(TokenId id) const = 0;

    TokenId find(std::string_view text) const { return by_text_.find(text, pieces_); }

    std::vector<float> scores_;

private:
    struct Fragment {
        size_t begin = 0, end = 0; // raw text [begin, end) when token < 0
        TokenId token = -1;
    };
    std::vector<Fragment> split_special(std::string_view text, SpecialTokens special) const;
    void mark_control_and_eog(const TokenizerSpec& spec); // fills flags_, eog_ids_ and eot_

    PieceIndex by_text_;
    std::vector<TokenId> specials_;     // control, user-defined, unknown; longest piece first
    std::vector<uint8_t> strip_;        // per token: 1 = eat whitespace before, 2 = after (Phi-3)
};

// One symbol of a word being merged: a byte range in a live doubly linked chain.
struct MergeSymbol {
    int prev, next; // neighbours in the live chain, -1 at the ends
    size_t off, n;  // bytes of the text; n == 0 once merged into the left neighbour
};

// One symbol per UTF-8 character of `text` (by lead byte; malformed bytes stand alone).
std::vector<MergeSymbol> utf8_symbols(std::string_view text);

// The merge loop both BPE kinds share: repeatedly merge the adjacent pair of highest priority
// (leftmost on ties) until no pair is mergeable. `priority(left, right, p)` returns whether the
// pair of live symbols may merge and, if so, its priority in p (SPM: the piece's score; GPT-2
// BPE: minus the merge rank). Returns the chain's head (0), or -1 when `sym` is empty.
template <class Priority>
int merge_symbols(std::vector<MergeSymbol>& sym, Priority&& priority) {
    struct Bigram {
        double priority;
        int left, right;
        size_t size; // bytes of the merged text when queued: a mismatch later means it is stale
    };
    struct Order {
        bool operator()(const Bigram& a, const Bigram& b) const {
            return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
        }
    };
    if (sym.empty()) return -1;
    std::priority_queue<Bigram, std::vector<Bigram>, Order> queue;
    const auto try_add = [&](int l, int r) {
        if (l < 0 || r < 0) return;
        double p = 0;
        if (!priority(sym[static_cast<size_t>(l)], sym[static_cast<size_t>(r)], p)) return;
        queue.push({p, l, r, sym[static_cast<size_t>(l)].n + sym[static_cast<size_t>(r)].n});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
        const Bigram b = queue.top();
        queue.pop();
        MergeSymbol& left = sym[static_cast<size_t>(b.left)];
        MergeSymbol& right = sym[static_cast<size_t>(b.right)];
        // Symbols only grow, so an unchanged total size means neither side changed since.
        if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;
        left.n += right.n;
        right.n = 0;
        left.next = right.next;
        if (right.next >= 0) sym[static_cast<size_t>(right.next)].prev = b.left;
        try_add(left.prev, b.left);
        try_add(b.left, left.next);
    }
    return 0;
}

// Both consume spec.tokens and spec.scores.
std::unique_ptr<Tokenizer> make_spm_tokenizer(TokenizerSpec& spec);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(TokenizerSpec& spec);

} // namespace rwd::detail
