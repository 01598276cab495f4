// A small real TokenConstraint for the tests (the grammar engine lives on its own): a language of
// byte pieces, each a byte set repeated min..max times, matched over the tokenizer's token bytes.
#pragma once
#include <array>
#include <bitset>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/constraint.h"
#include "rewind/error.h"
#include "rewind/tokenizer.h"

namespace rwd::constraint_test {

// One piece of the language: `set` repeated [min, max] times.
struct Piece {
    std::bitset<256> set;
    int min = 1, max = 1;
};

inline Piece lit(char c) {
    Piece p;
    p.set.set(static_cast<unsigned char>(c));
    return p;
}
inline Piece cls(std::string_view chars, int min, int max) {
    Piece p;
    for (char c : chars) p.set.set(static_cast<unsigned char>(c));
    p.min = min;
    p.max = max;
    return p;
}
inline std::string range(char a, char b) {
    std::string s;
    for (int c = a; c <= b; ++c) s += static_cast<char>(c);
    return s;
}
inline void literal(std::vector<Piece>& out, std::string_view text) {
    for (char c : text) out.push_back(lit(c));
}

// The sentences: piece 0's bytes, then piece 1's, ... Matching is deterministic (a byte stays in
// the present piece while it may, else moves on), so the pieces must be written so that a piece
// with min < max and the next one share no byte. State: (piece, count); snapshots are depths of
// a stack of states, each with a serial number, so a rollback to a state that is not an ancestor
// of the present one is caught (the O(1) contract of TokenConstraint::rollback).
class PieceConstraint final : public TokenConstraint {
public:
    PieceConstraint(const Tokenizer& tok, std::vector<Piece> pieces) : tok_(tok), pieces_(std::move(pieces)) {
        const auto n = static_cast<size_t>(tok.n_vocab());
        bytes_.resize(n);
        for (size_t t = 0; t < n; ++t) {
            const auto id = static_cast<TokenId>(t);
            if (!tok.is_control(id) && !tok.is_eog(id)) bytes_[t] = tok.token_to_piece(id);
        }
        reset();
    }

    void reset() override {
        stack_.assign(1, Entry{0, 0, serial_++});
    }
    void fill_mask(std::span<uint32_t> mask) override {
        if (static_cast<int64_t>(mask.size()) != (tok_.n_vocab() + 31) / 32)
            throw Error(ErrorCode::shape, "test constraint: mask of another size");
        std::fill(mask.begin(), mask.end(), 0u);
        for (TokenId t = 0; t < tok_.n_vocab(); ++t)
            if (allows(t)) mask[static_cast<size_t>(t) / 32] |= 1u << (t % 32);
    }
    bool allows(TokenId t) override {
        if (!tok_.valid(t)) return false;
        const Entry& e = stack_.back();
        if (e.end) return false;                         // after end of generation: nothing
        if (tok_.is_eog(t)) return complete(e.piece, e.count);
        const std::string& b = bytes_[static_cast<size_t>(t)];
        if (b.empty()) return false;
        int p = e.piece, c = e.count;
        for (char ch : b)
            if (!step(p, c, static_cast<unsigned char>(ch))) return false;
        return true;
    }
    bool accept(TokenId t) override {
        if (!allows(t)) return false;
        Entry e = stack_.back();
        if (tok_.is_eog(t)) e.end = true;
        else
            for (char ch : bytes_[static_cast<size_t>(t)]) step(e.piece, e.count, static_cast<unsigned char>(ch));
        e.serial = serial_++;
        stack_.push_back(e);
        ++accepted_;
        return true;
    }
    bool is_complete() const override { return !stack_.back().end && complete(stack_.back().piece, stack_.back().count); }
    bool is_finished() const override {
        const Entry& e = stack_.back();
        return !e.end && complete(e.piece, e.count) && !can_grow(e.piece, e.count);
    }
    Snapshot snapshot() const override {
        return (static_cast<uint64_t>(stack_.size()) << 32) | (stack_.back().serial & 0xffffffffu);
    }
    void rollback(Snapshot s) override {
        const auto depth = static_cast<size_t>(s >> 32);
        if (depth == 0 || depth > stack_.size() || (stack_[depth - 1].serial & 0xffffffffu) != (s & 0xffffffffu))
            throw Error(ErrorCode::state, "test constraint: rollback to a state off the present path");
        stack_.resize(depth);
    }
    void forced_tokens(size_t max_tokens, std::vector<TokenId>& out) override {
        const Entry& e = stack_.back();
        if (e.end) return;
        std::string text;
        int p = e.piece, c = e.count;
        // Forced while the text is incomplete and exactly one byte may follow.
        while (!complete(p, c)) {
            int only = -1, n = 0;
            for (int b = 0; b < 256 && n < 2; ++b) {
                int q = p, d = c;
                if (step(q, d, static_cast<unsigned char>(b))) {
                    only = b;
                    ++n;
                }
            }
            if (n != 1) break;
            text += static_cast<char>(only);
            step(p, c, static_cast<unsigned char>(only));
        }
        if (text.empty()) return;
        const std::vector<TokenId> ids = tok_.encode(text, AddBos::No);
        for (size_t i = 0; i < ids.size() && i < max_tokens; ++i) out.push_back(ids[i]);
    }

    int64_t accepted() const { return accepted_; }
    // Whether `text` is a prefix (or, with `whole`, a complete sentence) of the language.
    bool matches(std::string_view text, bool whole) const {
        int p = 0, c = 0;
        for (char ch : text)
            if (!step(p, c, static_cast<unsigned char>(ch))) return false;
        return !whole || complete(p, c);
    }

private:
    struct Entry {
        int piece = 0, count = 0;
        uint64_t serial = 0;
        bool end = false; // an end-of-generation token was accepted
    };

    // Moves (p, c) past byte b; false (unchanged) when b cannot come next.
    bool step(int& p, int& c, unsigned char b) const {
        for (int q = p, d = c; q < static_cast<int>(pieces_.size()); ++q, d = 0) {
            const Piece& pc = pieces_[static_cast<size_t>(q)];
            if (d < pc.max && pc.set.test(b)) {
                p = q;
                c = d + 1;
                return true;
            }
            if (d < pc.min) return false;
        }
        return false;
    }
    bool complete(int p, int c) const {
        for (int q = p, d = c; q < static_cast<int>(pieces_.size()); ++q, d = 0)
            if (d < pieces_[static_cast<size_t>(q)].min) return false;
        return true;
    }
    bool can_grow(int p, int c) const {
        for (int q = p, d = c; q < static_cast<int>(pieces_.size()); ++q, d = 0)
            if (d < pieces_[static_cast<size_t>(q)].max) return true;
        return false;
    }

    const Tokenizer& tok_;
    std::vector<Piece> pieces_;
    std::vector<std::string> bytes_; // per token: its text ("" for control and EOG tokens)
    std::vector<Entry> stack_;
    uint64_t serial_ = 1;
    int64_t accepted_ = 0;
};

// Python one-liners the pycode models write readily: "def NAME(ARGS):\n    return EXPR\n".
inline std::vector<Piece> python_function() {
    std::vector<Piece> p;
    literal(p, "def ");
    p.push_back(cls(range('a', 'z') + "_", 1, 16));
    literal(p, "(");
    p.push_back(cls(range('a', 'z') + ", ", 0, 24));
    literal(p, "):\n    return ");
    p.push_back(cls(range('a', 'z') + range('0', '9') + "_ +-*/().,[]'", 1, 60));
    literal(p, "\n");
    return p;
}

// Free text over a few letters, spaces and newlines, at most 40 bytes: complete anywhere, so
// end of generation is always allowed, and finished at 40.
inline std::vector<Piece> short_text() {
    return {cls(range('a', 'z') + " \n", 0, 40)};
}

} // namespace rwd::constraint_test
