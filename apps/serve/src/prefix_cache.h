// The KV caches of finished requests, kept within a byte budget (least recently used out first)
// so that a later request sharing a prefix of their tokens skips recomputing it.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <vector>

#include "rewind/kv_cache.h"
#include "rewind/tokenizer.h"

namespace rwd::serve {

// Not thread-safe: the scheduler's thread alone uses it.
class PrefixCache {
public:
    struct Entry {
        std::vector<TokenId> tokens;  // the positions `cache` holds
        std::shared_ptr<KvCache> cache;
        uint64_t bytes = 0;           // counted against the budget
    };

    explicit PrefixCache(uint64_t budget_bytes) : budget_(budget_bytes) {}
    bool enabled() const { return budget_ > 0; }
    uint64_t bytes() const { return bytes_; }

    // The entry sharing the longest prefix with `prompt` (at least one token), now the most
    // recently used; null if none. Valid until the next keep().
    const Entry* lookup(std::span<const TokenId> prompt);
    // Keeps `cache` (holding `tokens`, `bytes` of the budget), dropping the entries whose tokens
    // it extends and then the least recently used until it fits. Ignored if it alone is over
    // the budget or holds nothing.
    void keep(std::vector<TokenId> tokens, std::shared_ptr<KvCache> cache, uint64_t bytes);

private:
    uint64_t budget_;
    uint64_t bytes_ = 0;
    std::list<Entry> entries_; // most recently used first
};

} // namespace rwd::serve
