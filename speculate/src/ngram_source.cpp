// NgramSource: the live text is one open document of a TokenIndex, extended as tokens arrive.
#include "rewind/speculate/ngram_source.h"

namespace rwd::speculate {

NgramSource::NgramSource(NgramSourceOptions opts) : index_(opts.range) {}

void NgramSource::reset(const GenerationStart& start) {
    index_.clear();
    index_.reserve(static_cast<int64_t>(start.prompt.size()) + 512);
    index_.push(start.prompt);
}

void NgramSource::sync(std::span<const TokenId> context) {
    const auto have = static_cast<size_t>(index_.size());
    // O(1) consistency check: the context must extend what was indexed. A caller that rewrote
    // history gets a rebuilt index rather than stale guesses.
    const bool extends = context.size() >= have && (have == 0 || index_.tokens()[have - 1] == context[have - 1]);
    if (!extends) {
        index_.clear();
        index_.push(context);
        return;
    }
    index_.push(context.subspan(have));
}

void NgramSource::propose(std::span<const TokenId> context, int k, Proposal& out) {
    check_k(name(), k);
    sync(context);
    index_.copy(index_.find(context), k, RunOff::Overlap, out.tokens);
}

void NgramSource::accept(std::span<const TokenId> context) { sync(context); }

} // namespace rwd::speculate
