// Suffix guessing (after SuffixDecoding, Oliaro et al. 2024): trees of continuations of the
// context's longest suffix, found in the request's own text and in a cache of earlier requests'
// outputs shared by many sources, ranked by how often each continuation occurred.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "rewind/speculate/guess_source.h"
#include "rewind/speculate/token_index.h"

namespace rwd::speculate {

struct SuffixCacheOptions {
    // Live tokens kept (separators between documents not counted): adding past it evicts the
    // oldest documents first. In [1, kMaxTokens]. The index costs 30 to 50 bytes per token and
    // suffix length (its table at load 1/4..1/2 plus occurrence links) and holds at most
    // 1.5 * max_tokens tokens (evicted ones until they are compacted away): the default, 2^17
    // tokens (about 500 KB of text) at 11 lengths, stays within about 110 MB.
    int64_t max_tokens = int64_t{1} << 17;
    NgramRange range{2, 12}; // suffix lengths matched; n_max is the longest match looked for
    static constexpr int64_t kMaxTokens = int64_t{1} << 30;
};

// Earlier generations' text, shared (std::shared_ptr) by the suffix sources of many requests and
// threads: every member takes an internal mutex, so any thread may call any of them at any time.
// Documents are indexed as closed TokenIndex documents; eviction marks the oldest dead at once
// and rebuilds the index when the dead part reaches half the budget (amortised O(1) per token).
class SuffixCache {
public:
    // Throws rwd::Error (argument) unless max_tokens is in [1, kMaxTokens] and the range valid.
    explicit SuffixCache(SuffixCacheOptions opts = {});
    SuffixCache(const SuffixCache&) = delete;
    SuffixCache& operator=(const SuffixCache&) = delete;

    // Adds one document (e.g. a finished generation's output); empty ones are ignored. One longer
    // than max_tokens keeps its last max_tokens tokens. Throws rwd::Error (argument) for a
    // negative id, leaving the cache as it was.
    void add(std::span<const TokenId> document);
    void clear();

    // Fills `out` (cleared first) with the continuations (up to max_len tokens each, never past
    // the end of their document) of up to max_occurrences occurrences of the longest suffix of
    // `context` found in the live documents, newest first; out.match_length is that suffix's
    // length (0 and no continuations when nothing matches).
    void lookup(std::span<const TokenId> context, int max_occurrences, int max_len, Continuations& out) const;

    const SuffixCacheOptions& options() const { return opts_; }
    int64_t n_tokens() const;       // live tokens, <= max_tokens
    int64_t n_documents() const;    // live documents
    int64_t indexed_tokens() const; // tokens in the index, evicted and separators included

private:
    void compact(); // rebuilds the index from the live documents

    const SuffixCacheOptions opts_;
    mutable std::mutex mu_;
    std::deque<std::vector<TokenId>> docs_; // live documents, oldest first
    std::deque<int64_t> starts_;            // where each live document begins in the index
    int64_t live_tokens_ = 0;
    int64_t live_from_ = 0;                 // index positions before this belong to evicted documents
    TokenIndex index_;
};

struct SuffixSourceOptions {
    // Suffix lengths matched in the request's own text (prompt and output so far); n_max is the
    // longest match looked for (up to NgramRange::kLimit).
    NgramRange range{2, 12};
    // Adaptive depth: a match of length m yields a tree at most min(k, ceil(alpha * m)) deep, so
    // a short, weak match guesses a little and a long one a lot. Finite, > 0.
    float alpha = 1.0f;
    int branches = 4;          // children per node at most (>= 1; 1: a single path)
    float min_weight = 0.1f;   // a continuation taken by fewer than this share of its parent's is left out, [0, 1]
    int max_occurrences = 64;  // occurrences of a match visited per lookup (>= 1): bounds the work
    bool cache_prompts = false; // also add each request's prompt to the cache (not only its output)
    // Whether this source adds its generations to the cache. A harness that replays one request
    // several times turns it off and adds each request's output itself, once.
    bool record = true;
    SuffixCacheOptions cache; // the private cache's, when the source is given none
};

class ContinuationTree;

class SuffixSource final : public GuessSource {
public:
    // `cache` null: a private cache (opts.cache), kept across reset()s. Throws rwd::Error
    // (argument) for invalid options.
    explicit SuffixSource(std::shared_ptr<SuffixCache> cache = nullptr, SuffixSourceOptions opts = {});
    // Adds the generation in progress to the cache (see reset()); an error doing so is dropped.
    ~SuffixSource() override;
    SuffixSource(const SuffixSource&) = delete;
    SuffixSource& operator=(const SuffixSource&) = delete;

    std::string_view name() const override { return "suffix"; }
    // Adds the previous generation's output (the tokens after its prompt that this source saw,
    // i.e. up to its last propose() or accept()) to the cache when `record`, then starts anew.
    void reset(const GenerationStart& start) override;
    // The better-scoring (expected accepted guesses, by the counts) of two trees: one from the
    // request's own text, one from the cache; ties go to the request's own.
    void propose(std::span<const TokenId> context, int k, Proposal& out) override;
    void accept(std::span<const TokenId> context) override;

    const SuffixSourceOptions& options() const { return opts_; }
    SuffixCache& cache() { return *cache_; }
    const TokenIndex& index() const { return local_; }
    // Per reset(): proposals taken from the request's own text, and from the cache.
    int64_t local_proposals() const { return from_local_; }
    int64_t cache_proposals() const { return from_cache_; }

private:
    void sync(std::span<const TokenId> context);
    void record();

    SuffixSourceOptions opts_;
    std::shared_ptr<SuffixCache> cache_;
    TokenIndex local_;
    int64_t prompt_len_ = 0;
    bool started_ = false;
    int64_t from_local_ = 0, from_cache_ = 0;
    Continuations found_;
    std::unique_ptr<ContinuationTree> tree_;
    Proposal trial_; // reused
};

} // namespace rwd::speculate
