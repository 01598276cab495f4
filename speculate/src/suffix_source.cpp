// SuffixCache and SuffixSource. Structure: TokenIndex's occurrence-walking n-gram index (not a
// suffix tree): bounded work per lookup (n_max hashes, max_occurrences links) and per token
// (n_max - n_min + 1 entries), and the same continuation-tree builder as ngram and ref.
#include "rewind/speculate/suffix_source.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "continuation_tree.h"
#include "rewind/error.h"

namespace rwd::speculate {
namespace {

SuffixCacheOptions checked(SuffixCacheOptions o) {
    if (o.max_tokens < 1 || o.max_tokens > SuffixCacheOptions::kMaxTokens)
        throw Error("suffix cache: max_tokens " + std::to_string(o.max_tokens) + " is outside [1, " +
                    std::to_string(SuffixCacheOptions::kMaxTokens) + "]");
    validate(o.range);
    return o;
}

void check_options(const SuffixSourceOptions& o) {
    validate(o.range);
    check_tree_options("suffix source", o.branches, o.max_occurrences);
    if (!(std::isfinite(o.alpha) && o.alpha > 0.0f))
        throw Error("suffix source: alpha " + std::to_string(o.alpha) + " must be finite and above 0");
    if (!(o.min_weight >= 0.0f && o.min_weight <= 1.0f))
        throw Error("suffix source: min_weight " + std::to_string(o.min_weight) + " is outside [0, 1]");
}

} // namespace

SuffixCache::SuffixCache(SuffixCacheOptions opts) : opts_(checked(opts)), index_(opts.range) {}

void SuffixCache::add(std::span<const TokenId> document) {
    for (TokenId t : document)
        if (t < 0) throw Error("suffix cache: invalid token id " + std::to_string(t));
    if (document.empty()) return;
    if (static_cast<int64_t>(document.size()) > opts_.max_tokens)
        document = document.last(static_cast<size_t>(opts_.max_tokens));
    const std::lock_guard lock(mu_);
    live_tokens_ += static_cast<int64_t>(document.size());
    while (live_tokens_ > opts_.max_tokens) {
        live_tokens_ -= static_cast<int64_t>(docs_.front().size());
        docs_.pop_front();
        starts_.pop_front();
        live_from_ = starts_.empty() ? index_.size() : starts_.front();
    }
    docs_.emplace_back(document.begin(), document.end());
    starts_.push_back(index_.size());
    index_.push(document);
    index_.end_document();
    if (live_from_ * 2 > opts_.max_tokens) compact();
}

void SuffixCache::compact() {
    index_.clear();
    starts_.clear();
    for (const auto& d : docs_) {
        starts_.push_back(index_.size());
        index_.push(d);
        index_.end_document();
    }
    live_from_ = 0;
}

void SuffixCache::clear() {
    const std::lock_guard lock(mu_);
    docs_.clear();
    starts_.clear();
    live_tokens_ = 0;
    live_from_ = 0;
    index_.clear();
}

void SuffixCache::lookup(std::span<const TokenId> context, int max_occurrences, int max_len, Continuations& out) const {
    const std::lock_guard lock(mu_);
    index_.continuations(index_.find(context, live_from_), max_occurrences, max_len, RunOff::Stop, out, live_from_);
}

int64_t SuffixCache::n_tokens() const {
    const std::lock_guard lock(mu_);
    return live_tokens_;
}

int64_t SuffixCache::n_documents() const {
    const std::lock_guard lock(mu_);
    return static_cast<int64_t>(docs_.size());
}

int64_t SuffixCache::indexed_tokens() const {
    const std::lock_guard lock(mu_);
    return index_.size();
}

SuffixSource::SuffixSource(std::shared_ptr<SuffixCache> cache, SuffixSourceOptions opts)
    : opts_((check_options(opts), opts)),
      cache_(cache ? std::move(cache) : std::make_shared<SuffixCache>(opts.cache)),
      local_(opts.range),
      tree_(std::make_unique<ContinuationTree>()) {}

SuffixSource::~SuffixSource() {
    try {
        record();
    } catch (...) {
        // A destructor must not throw; losing one generation's text only costs future guesses.
    }
}

void SuffixSource::record() {
    if (!opts_.record || !started_) return;
    const auto text = local_.tokens();
    const auto p = static_cast<size_t>(std::min<int64_t>(prompt_len_, local_.size()));
    if (p == text.size()) return; // nothing was generated
    if (opts_.cache_prompts) cache_->add(text.first(p));
    cache_->add(text.subspan(p));
}

void SuffixSource::reset(const GenerationStart& start) {
    record();
    started_ = true;
    local_.clear();
    local_.reserve(static_cast<int64_t>(start.prompt.size()) + 512);
    local_.push(start.prompt);
    prompt_len_ = static_cast<int64_t>(start.prompt.size());
    from_local_ = from_cache_ = 0;
}

void SuffixSource::sync(std::span<const TokenId> context) {
    // A rewritten history keeps as prompt what is left of it: only what follows is output.
    if (local_.follow(context)) prompt_len_ = std::min<int64_t>(prompt_len_, static_cast<int64_t>(context.size()));
}

void SuffixSource::propose(std::span<const TokenId> context, int k, Proposal& out) {
    check_k(name(), k);
    sync(context);
    auto shape = [&](int match_length) {
        const double depth = std::ceil(static_cast<double>(opts_.alpha) * match_length);
        return TreeShape{.k = k,
                         .branches = opts_.branches,
                         .max_depth = static_cast<int>(std::clamp(depth, 1.0, static_cast<double>(k))),
                         .min_weight = opts_.min_weight};
    };
    local_.continuations(local_.find(context), opts_.max_occurrences, k, RunOff::Overlap, found_);
    const double local_score = tree_->build(found_, shape(found_.match_length), out);
    cache_->lookup(context, opts_.max_occurrences, k, found_);
    const double cache_score = tree_->build(found_, shape(found_.match_length), trial_);
    if (cache_score > local_score) {
        std::swap(out, trial_);
        ++from_cache_;
    } else if (!out.tokens.empty()) {
        ++from_local_;
    }
}

void SuffixSource::accept(std::span<const TokenId> context) { sync(context); }

} // namespace rwd::speculate
