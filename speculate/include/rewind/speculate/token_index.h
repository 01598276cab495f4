// An incremental n-gram index over token sequences: for each n-gram (n in [n_min, n_max]) the
// latest position that followed it, and from there every earlier one. Shared by prompt lookup,
// reference copy and suffix guessing.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "rewind/tokenizer.h"

namespace rwd::speculate {

// Which suffix lengths are matched. Longer matches are tried first.
struct NgramRange {
    int n_min = 2;
    int n_max = 8;
    static constexpr int kLimit = 32; // the largest n_max accepted
};
// Throws rwd::Error (argument) unless 1 <= n_min <= n_max <= NgramRange::kLimit.
void validate(const NgramRange& range);

// Where a context's suffix was found: tokens()[pos - n, pos) equal the context's last n tokens,
// and tokens()[pos] (same document) is the first token that followed them.
struct IndexMatch {
    int64_t pos = -1;
    int n = 0;
    bool found() const { return pos >= 0; }
};

// Several continuations of one match, newest occurrence first: occurrence j's tokens are
// tokens[offsets[j], offsets[j + 1]). Buffers are reused across calls.
struct Continuations {
    int match_length = 0; // the n of the match they continue (0: no match)
    std::vector<TokenId> tokens;
    std::vector<int32_t> offsets{0};
    std::vector<int64_t> positions; // where each continuation starts (scratch for the index)
    // Empty, or one per continuation: how much it counts (a longer match counts more).
    std::vector<int32_t> weights;
    int32_t weight(size_t j) const { return weights.empty() ? 1 : weights[j]; }
    void clear() {
        match_length = 0;
        tokens.clear();
        weights.clear();
        offsets.assign(1, 0);
        positions.clear();
    }
    size_t size() const { return offsets.size() - 1; }
    std::span<const TokenId> operator[](size_t j) const {
        return std::span<const TokenId>(tokens).subspan(static_cast<size_t>(offsets[j]),
                                                        static_cast<size_t>(offsets[j + 1] - offsets[j]));
    }
};

// What a continuation does when it reaches the end of the document it was copied from.
enum class RunOff {
    Stop,      // copy only tokens that exist (references: the document ended)
    Overlap,   // keep copying from the copy itself, LZ77-style: the document is the live text,
               // so a match that runs into the present extends a repeating pattern
};

// Tokens are stored in documents; no n-gram and no continuation crosses a document boundary.
// Each push() indexes at most n_max - n_min + 1 n-grams (the ones ending just before the new
// token, which now have a continuation): O(n_max) per token, amortised, allocation only when the
// table or the link array grows. Lookups hash the context's suffix once (O(n_max)) and probe the table, never
// scanning the stored tokens. Among several occurrences of an n-gram the latest one wins: in
// live text the recent past predicts best, and in references the later document is the one the
// caller listed last. Every stored position also links, per n, to the previous occurrence of the
// n-gram it continues, so all occurrences of a match can be walked newest first (occurrences()):
// 4 * (n_max - n_min + 1) bytes per token on top of the table.
class TokenIndex {
public:
    explicit TokenIndex(NgramRange range = {});

    const NgramRange& range() const { return range_; }
    void clear();
    void reserve(int64_t n_tokens);

    // Appends to the current document. Throws rwd::Error past 2^31 - 2 stored tokens (capacity)
    // or for a negative id (argument).
    void push(TokenId token);
    void push(std::span<const TokenId> tokens);
    // For an index holding one open document of live text: brings it up to `context`, appending
    // what is new, or rebuilding it from `context` when that does not extend what is stored (an
    // O(1) check of the last stored token; a caller that rewrote history gets a rebuilt index
    // rather than stale guesses). Returns true when it rebuilt.
    bool follow(std::span<const TokenId> context);
    // Closes the current document: later tokens start a new one.
    void end_document();

    int64_t size() const { return static_cast<int64_t>(tokens_.size()); }    // stored tokens, separators included
    int64_t document_size() const { return size() - doc_start_; }           // tokens in the open document
    std::span<const TokenId> tokens() const { return tokens_; }              // kSeparator between documents
    int64_t n_entries() const { return n_entries_; }                         // distinct indexed n-grams

    static constexpr TokenId kSeparator = -1;

    // The longest suffix of `context` (n from n_max down to n_min) that occurs in the index with
    // at least one token after it; the latest such occurrence. Occurrences whose continuation is
    // before `min_pos` do not count (a caller that retired the oldest documents passes where the
    // live ones begin).
    IndexMatch find(std::span<const TokenId> context, int64_t min_pos = 0) const;

    // Appends to `out` the positions of the occurrences of `match`'s n-gram, newest first
    // (match.pos itself first), each a position whose preceding n tokens equal those before
    // match.pos; stops after visiting `max_visits` candidates (>= 1; the bound on the work) or at
    // one before `min_pos`. Returns how many were appended (0 when !match.found()).
    int occurrences(const IndexMatch& match, int max_visits, std::vector<int64_t>& out, int64_t min_pos = 0) const;

    // Fills `out` (cleared first) with the continuation (copy(), up to max_len tokens, see
    // RunOff) of each of up to `max_occurrences` occurrences of `match`, newest first; empty
    // continuations are left out.
    void continuations(const IndexMatch& match, int max_occurrences, int max_len, RunOff run_off, Continuations& out,
                       int64_t min_pos = 0) const;
    // As continuations() of `context`'s longest match (out.match_length), then backing off: the
    // occurrences of each shorter suffix of `context` down to n_min that are not already in,
    // newest first, up to `max_occurrences` in all. A continuation of an n-token match weighs
    // 2^(n - n_min), so the longer matches lead and the shorter ones add the alternatives the
    // longest never saw. Nothing when no suffix matches.
    void continuations_backoff(std::span<const TokenId> context, int max_occurrences, int max_len, RunOff run_off,
                               Continuations& out, int64_t min_pos = 0) const;

    // Appends to `out` up to k tokens that follow `match` in its document (see RunOff); returns
    // how many were appended.
    int copy(const IndexMatch& match, int k, RunOff run_off, std::vector<TokenId>& out) const;

private:
    // Returns the value the key held before (-1 when new).
    int32_t insert(uint64_t key, int32_t value);
    int32_t lookup(uint64_t key) const; // -1 when absent
    void grow();

    NgramRange range_;
    std::vector<TokenId> tokens_;
    int64_t doc_start_ = 0;
    // Open addressing, linear probing, power-of-two size; key 0 marks an empty slot.
    std::vector<uint64_t> keys_;
    std::vector<int32_t> values_;
    int64_t n_entries_ = 0;
    // [position * (n_max - n_min + 1) + n - n_min]: the previous position continuing the same
    // n-gram as `position` does (-1: none). Filled for every stored token, separators included.
    std::vector<int32_t> prev_;
};

} // namespace rwd::speculate
