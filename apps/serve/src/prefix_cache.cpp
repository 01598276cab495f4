// PrefixCache: a linear scan per lookup (entries are few: each holds a whole request's KV).
#include "prefix_cache.h"

#include <algorithm>

namespace rwd::serve {

const PrefixCache::Entry* PrefixCache::lookup(std::span<const TokenId> prompt) {
    auto best = entries_.end();
    size_t best_n = 0;
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        const size_t lim = std::min(it->tokens.size(), prompt.size());
        size_t n = 0;
        while (n < lim && it->tokens[n] == prompt[n]) ++n;
        if (n > best_n) {
            best_n = n;
            best = it;
        }
    }
    if (best == entries_.end()) return nullptr;
    entries_.splice(entries_.begin(), entries_, best);
    return &entries_.front();
}

void PrefixCache::keep(std::vector<TokenId> tokens, std::shared_ptr<KvCache> cache, uint64_t bytes) {
    if (!cache || tokens.empty() || bytes > budget_) return;
    // An entry whose tokens this one extends says nothing more: drop it.
    for (auto it = entries_.begin(); it != entries_.end();) {
        if (it->tokens.size() <= tokens.size() && std::equal(it->tokens.begin(), it->tokens.end(), tokens.begin())) {
            bytes_ -= it->bytes;
            it = entries_.erase(it);
        } else {
            ++it;
        }
    }
    while (!entries_.empty() && bytes_ + bytes > budget_) {
        bytes_ -= entries_.back().bytes;
        entries_.pop_back();
    }
    entries_.push_front(Entry{std::move(tokens), std::move(cache), bytes});
    bytes_ += bytes;
}

} // namespace rwd::serve
