// What the verification core knows of a constraint on the output (a grammar, a JSON Schema, a
// regex): which tokens may come next, and how to advance and undo. The runtime never knows what
// implements it (speculate adapts the grammar library's matcher to it).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "rewind/tokenizer.h"

namespace rwd {

// One sequence's constraint state. Deterministic: the same tokens accepted give the same masks,
// so constrained speculative decoding decides exactly as constrained plain decoding.
// How the verification core uses it (DecodeState, docs/constrained-decoding.md): fill_mask once
// per decided position; accept() for each emitted token but an end-of-generation one (that token
// ends a constrained generation); to cut guesses, snapshot/accept/rollback along a depth-first
// walk that only ever rolls back to a state on the present path, ending where it started.
// Threads: belongs to one thread at a time (like the DecodeState that uses it).
class TokenConstraint {
public:
    virtual ~TokenConstraint() = default;

    // Back to the start: no token accepted.
    virtual void reset() = 0;

    // The tokens allowed next, as bits: token t is bit (t % 32) of mask[t / 32]; `mask` has
    // (n_vocab + 31) / 32 words, all written. A token is allowed iff its bytes extend the text
    // accepted so far to a prefix of a sentence of the language; an end-of-generation token iff
    // that text is a complete sentence; a control token never, unless the constraint names it.
    // Throws rwd::Error (shape) on a mask of another size.
    virtual void fill_mask(std::span<uint32_t> mask) = 0;

    // Whether `t` may come next (fill_mask's rule for one token).
    virtual bool allows(TokenId t) = 0;

    // Advances past `t`; returns false, the state unchanged, when `t` is not allowed.
    virtual bool accept(TokenId t) = 0;

    // The text accepted so far is a complete sentence (end of generation allowed there).
    virtual bool is_complete() const = 0;
    // Nothing but end of generation can follow: the sentence is complete and cannot grow.
    virtual bool is_finished() const = 0;

    // O(1) undo, as the KV cache rolls back: snapshot() names the present state; rollback(s)
    // returns to it. `s` must have been taken since the last reset() on the path that led here
    // (states reached by accept() after it); throws rwd::Error (state) otherwise.
    using Snapshot = uint64_t;
    virtual Snapshot snapshot() const = 0;
    virtual void rollback(Snapshot s) = 0;

    // Text the constraint forces from here (the only continuation it admits, up to a point
    // where it branches or `max_tokens` tokens), tokenized as the model's tokenizer would,
    // appended to `out`: free guesses for speculation. Leaves the state unchanged.
    virtual void forced_tokens(size_t max_tokens, std::vector<TokenId>& out) = 0;

    // The same forced text split another way: each character (a whole UTF-8 sequence) as the
    // tokenizer encodes it alone, up to `max_tokens` tokens, appended to `out`. A model need not
    // write forced text as its tokenizer would (a small model writes JSON keys letter by letter),
    // so a guess source may propose whichever split the model has been seen to use. Leaves the
    // state unchanged. The default offers no such split (nothing appended).
    virtual void forced_characters(size_t max_tokens, std::vector<TokenId>& out) {
        (void)max_tokens;
        (void)out;
    }
};

} // namespace rwd
