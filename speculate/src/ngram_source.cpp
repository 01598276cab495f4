// NgramSource: the live text is one open document of a TokenIndex, extended as tokens arrive.
#include "rewind/speculate/ngram_source.h"

#include "continuation_tree.h"

namespace rwd::speculate {

NgramSource::NgramSource(NgramSourceOptions opts) : opts_(opts), index_(opts.range) {
    check_tree_options("ngram source", opts.branches, opts.max_occurrences);
    if (opts.branches > 1) tree_ = std::make_unique<ContinuationTree>();
}

NgramSource::~NgramSource() = default;
NgramSource::NgramSource(NgramSource&&) noexcept = default;

void NgramSource::reset(const GenerationStart& start) {
    index_.clear();
    index_.reserve(static_cast<int64_t>(start.prompt.size()) + 512);
    index_.push(start.prompt);
}

void NgramSource::sync(std::span<const TokenId> context) { index_.follow(context); }

void NgramSource::propose(std::span<const TokenId> context, int k, Proposal& out) {
    check_k(name(), k);
    sync(context);
    if (!tree_) {
        index_.copy(index_.find(context), k, RunOff::Overlap, out.tokens);
        return;
    }
    // Every suffix length's occurrences: the longest match leads, shorter ones add alternatives.
    index_.continuations_backoff(context, opts_.max_occurrences, k, RunOff::Overlap, found_);
    tree_->build(found_, TreeShape{.k = k, .branches = opts_.branches, .max_depth = k}, out);
}

void NgramSource::accept(std::span<const TokenId> context) { sync(context); }

} // namespace rwd::speculate
