// TokenIndex: n-gram hashes chained backwards from the newest token, so one pass over at most
// n_max tokens yields the keys of every suffix length at once; the table maps a key to its latest
// position and prev_ links each position to the one before it.
#include "rewind/speculate/token_index.h"

#include <algorithm>
#include <limits>
#include <string>

#include "rewind/error.h"
#include "rewind/hash.h"

namespace rwd::speculate {
namespace {

// Extends the hash of an n-gram by the token before it.
uint64_t extend(uint64_t h, TokenId t) { return mix64(h ^ static_cast<uint32_t>(t)); }

// The table key of an n-gram of length n whose backward chain hash is h; never 0 (empty slot).
uint64_t key_of(uint64_t h, int n) {
    const uint64_t k = mix64(h ^ (static_cast<uint64_t>(n) * 0xd6e8feb86659fd93ull));
    return k == 0 ? 1 : k;
}

constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max() - 1;
constexpr size_t kInitialSlots = 1024;

} // namespace

void validate(const NgramRange& r) {
    if (r.n_min < 1 || r.n_max < r.n_min || r.n_max > NgramRange::kLimit)
        throw Error("n-gram range [" + std::to_string(r.n_min) + ", " + std::to_string(r.n_max) +
                    "] is invalid: need 1 <= n_min <= n_max <= " + std::to_string(NgramRange::kLimit));
}

TokenIndex::TokenIndex(NgramRange range) : range_(range) {
    validate(range_);
    keys_.assign(kInitialSlots, 0);
    values_.assign(kInitialSlots, -1);
}

void TokenIndex::clear() {
    tokens_.clear();
    doc_start_ = 0;
    std::fill(keys_.begin(), keys_.end(), 0);
    n_entries_ = 0;
    prev_.clear();
}

void TokenIndex::reserve(int64_t n_tokens) {
    if (n_tokens <= 0) return;
    tokens_.reserve(static_cast<size_t>(std::min(n_tokens, kMaxTokens)));
    prev_.reserve(static_cast<size_t>(std::min(n_tokens, kMaxTokens) * (range_.n_max - range_.n_min + 1)));
    const int64_t want = std::min(n_tokens, kMaxTokens) * (range_.n_max - range_.n_min + 1) * 2;
    while (static_cast<int64_t>(keys_.size()) < want) grow();
}

void TokenIndex::push(TokenId token) {
    if (token < 0) throw Error("token index: invalid token id " + std::to_string(token));
    const int64_t j = size();
    if (j >= kMaxTokens)
        throw Error(ErrorCode::capacity, "token index: more than " + std::to_string(kMaxTokens) + " tokens");
    // The n-grams ending at j - 1 now have a continuation (the new token at j).
    const int64_t avail = j - doc_start_;
    const int n_top = static_cast<int>(std::min<int64_t>(range_.n_max, avail));
    const size_t width = static_cast<size_t>(range_.n_max - range_.n_min + 1);
    const size_t links = prev_.size();
    prev_.resize(links + width, -1);
    uint64_t h = 0;
    for (int n = 1; n <= n_top; ++n) {
        h = extend(h, tokens_[static_cast<size_t>(j - n)]);
        if (n >= range_.n_min)
            prev_[links + static_cast<size_t>(n - range_.n_min)] = insert(key_of(h, n), static_cast<int32_t>(j));
    }
    tokens_.push_back(token);
}

void TokenIndex::push(std::span<const TokenId> tokens) {
    for (TokenId t : tokens) push(t);
}

bool TokenIndex::follow(std::span<const TokenId> context) {
    const auto have = static_cast<size_t>(size());
    const bool extends = context.size() >= have && (have == 0 || tokens_[have - 1] == context[have - 1]);
    if (!extends) {
        clear();
        push(context);
        return true;
    }
    push(context.subspan(have));
    return false;
}

void TokenIndex::end_document() {
    if (document_size() == 0) return;
    if (size() >= kMaxTokens)
        throw Error(ErrorCode::capacity, "token index: more than " + std::to_string(kMaxTokens) + " tokens");
    tokens_.push_back(kSeparator);
    prev_.resize(prev_.size() + static_cast<size_t>(range_.n_max - range_.n_min + 1), -1);
    doc_start_ = size();
}

IndexMatch TokenIndex::find(std::span<const TokenId> context, int64_t min_pos) const {
    const int m = static_cast<int>(std::min<size_t>(static_cast<size_t>(range_.n_max), context.size()));
    if (m < range_.n_min) return {};
    uint64_t keys[NgramRange::kLimit + 1];
    uint64_t h = 0;
    const size_t end = context.size();
    for (int n = 1; n <= m; ++n) {
        h = extend(h, context[end - static_cast<size_t>(n)]);
        keys[n] = key_of(h, n);
    }
    for (int n = m; n >= range_.n_min; --n) {
        const int32_t v = lookup(keys[n]);
        if (v < 0 || v < min_pos) continue;
        // Guard against a 64-bit hash collision: compare the tokens themselves.
        const auto stored = std::span<const TokenId>(tokens_).subspan(static_cast<size_t>(v - n), static_cast<size_t>(n));
        if (std::equal(stored.begin(), stored.end(), context.end() - n)) return {v, n};
    }
    return {};
}

int TokenIndex::copy(const IndexMatch& match, int k, RunOff run_off, std::vector<TokenId>& out) const {
    if (!match.found() || k <= 0) return 0;
    const size_t start = out.size();
    const int64_t n = size();
    for (int i = 0; i < k; ++i) {
        const int64_t p = match.pos + i;
        TokenId t;
        if (p < n) {
            t = tokens_[static_cast<size_t>(p)];
            if (t == kSeparator) break;
        } else if (run_off == RunOff::Overlap && match.pos >= doc_start_) {
            // p - n < i: the token was copied earlier in this very call.
            t = out[start + static_cast<size_t>(p - n)];
        } else {
            break;
        }
        out.push_back(t);
    }
    return static_cast<int>(out.size() - start);
}

int TokenIndex::occurrences(const IndexMatch& match, int max_visits, std::vector<int64_t>& out, int64_t min_pos) const {
    if (!match.found() || max_visits < 1 || match.pos < min_pos || match.pos >= size()) return 0;
    const int n = match.n;
    if (n < range_.n_min || n > range_.n_max || match.pos < n) return 0;
    const size_t width = static_cast<size_t>(range_.n_max - range_.n_min + 1);
    const auto want = std::span<const TokenId>(tokens_).subspan(static_cast<size_t>(match.pos - n), static_cast<size_t>(n));
    int added = 0;
    int64_t p = match.pos;
    for (int visits = 0; p >= min_pos && p >= n && visits < max_visits; ++visits) {
        // A 64-bit key collision would splice another n-gram's chain in: compare the tokens.
        const auto have = std::span<const TokenId>(tokens_).subspan(static_cast<size_t>(p - n), static_cast<size_t>(n));
        if (std::equal(have.begin(), have.end(), want.begin())) {
            out.push_back(p);
            ++added;
        }
        p = prev_[static_cast<size_t>(p) * width + static_cast<size_t>(n - range_.n_min)];
    }
    return added;
}

void TokenIndex::continuations(const IndexMatch& match, int max_occurrences, int max_len, RunOff run_off,
                               Continuations& out, int64_t min_pos) const {
    out.clear();
    if (!match.found() || max_occurrences < 1 || max_len < 1) return;
    out.match_length = match.n;
    occurrences(match, max_occurrences, out.positions, min_pos);
    for (int64_t p : out.positions) {
        if (copy(IndexMatch{p, match.n}, max_len, run_off, out.tokens) > 0)
            out.offsets.push_back(static_cast<int32_t>(out.tokens.size()));
    }
}

void TokenIndex::continuations_backoff(std::span<const TokenId> context, int max_occurrences, int max_len,
                                       RunOff run_off, Continuations& out, int64_t min_pos) const {
    out.clear();
    const IndexMatch longest = find(context, min_pos);
    if (!longest.found() || max_occurrences < 1 || max_len < 1) return;
    out.match_length = longest.n;
    const size_t end = context.size();
    uint64_t h = 0, keys[NgramRange::kLimit + 1];
    for (int n = 1; n <= longest.n; ++n) {
        h = extend(h, context[end - static_cast<size_t>(n)]);
        keys[n] = key_of(h, n);
    }
    for (int n = longest.n; n >= range_.n_min && static_cast<int>(out.positions.size()) < max_occurrences; --n) {
        const int32_t latest = lookup(keys[n]);
        if (latest < 0 || latest < min_pos) continue;
        const size_t before = out.positions.size();
        // Visits stop at max_occurrences new positions (those of longer matches come again).
        occurrences(IndexMatch{latest, n}, max_occurrences + static_cast<int>(before), out.positions, min_pos);
        const auto w = static_cast<int32_t>((n - range_.n_min + 1));
        size_t kept = before;
        for (size_t i = before; i < out.positions.size(); ++i) {
            const int64_t p = out.positions[i];
            if (std::find(out.positions.begin(), out.positions.begin() + static_cast<std::ptrdiff_t>(before), p) !=
                out.positions.begin() + static_cast<std::ptrdiff_t>(before))
                continue; // already in from a longer match
            if (static_cast<int>(kept) >= max_occurrences) break;
            out.positions[kept++] = p;
            if (copy(IndexMatch{p, n}, max_len, run_off, out.tokens) > 0) {
                out.offsets.push_back(static_cast<int32_t>(out.tokens.size()));
                out.weights.push_back(w);
            }
        }
        out.positions.resize(kept);
    }
}

int32_t TokenIndex::insert(uint64_t key, int32_t value) {
    if ((n_entries_ + 1) * 2 > static_cast<int64_t>(keys_.size())) grow();
    const size_t mask = keys_.size() - 1;
    for (size_t i = key & mask;; i = (i + 1) & mask) {
        if (keys_[i] == key) {
            const int32_t before = values_[i];
            values_[i] = value; // latest occurrence wins
            return before;
        }
        if (keys_[i] == 0) {
            keys_[i] = key;
            values_[i] = value;
            ++n_entries_;
            return -1;
        }
    }
}

int32_t TokenIndex::lookup(uint64_t key) const {
    const size_t mask = keys_.size() - 1;
    for (size_t i = key & mask;; i = (i + 1) & mask) {
        if (keys_[i] == key) return values_[i];
        if (keys_[i] == 0) return -1;
    }
}

void TokenIndex::grow() {
    std::vector<uint64_t> old_keys(keys_.size() * 2, 0);
    std::vector<int32_t> old_values(values_.size() * 2, -1);
    old_keys.swap(keys_);
    old_values.swap(values_);
    const size_t mask = keys_.size() - 1;
    for (size_t s = 0; s < old_keys.size(); ++s) {
        const uint64_t key = old_keys[s];
        if (key == 0) continue;
        size_t i = key & mask;
        while (keys_[i] != 0) i = (i + 1) & mask;
        keys_[i] = key;
        values_[i] = old_values[s];
    }
}

} // namespace rwd::speculate
