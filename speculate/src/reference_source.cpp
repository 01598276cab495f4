// ReferenceSource: every reference is a closed document of one TokenIndex, built once.
#include "rewind/speculate/reference_source.h"

#include <fstream>
#include <sstream>

#include "continuation_tree.h"
#include "rewind/error.h"
#include "rewind/file_io.h"

namespace rwd::speculate {

ReferenceSource::ReferenceSource(const std::vector<std::vector<TokenId>>& references,
                                 ReferenceSourceOptions opts)
    : opts_(opts), index_(opts.range) {
    check_tree_options("reference source", opts.branches, opts.max_occurrences);
    if (references.empty()) throw Error("reference source: no reference documents");
    int64_t total = 0;
    for (size_t i = 0; i < references.size(); ++i) {
        if (references[i].empty())
            throw Error("reference source: reference " + std::to_string(i) + " is empty");
        total += static_cast<int64_t>(references[i].size());
    }
    if (total > opts.max_tokens)
        throw Error(ErrorCode::capacity, "reference source: references hold " + std::to_string(total) +
                    " tokens, above the limit of " + std::to_string(opts.max_tokens));
    index_.reserve(total + static_cast<int64_t>(references.size()));
    for (const auto& ref : references) {
        index_.push(ref);
        index_.end_document();
    }
    n_refs_ = static_cast<int64_t>(references.size());
    if (opts.branches > 1) tree_ = std::make_unique<ContinuationTree>();
}

ReferenceSource::~ReferenceSource() = default;
ReferenceSource::ReferenceSource(ReferenceSource&&) noexcept = default;

ReferenceSource ReferenceSource::from_texts(const Tokenizer& tok, const std::vector<std::string>& texts,
                                            ReferenceSourceOptions opts) {
    std::vector<std::vector<TokenId>> refs;
    refs.reserve(texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
        refs.push_back(tok.encode(texts[i], AddBos::No));
        if (refs.back().empty())
            throw Error("reference source: reference " + std::to_string(i) + " is empty");
    }
    return ReferenceSource(refs, opts);
}

void ReferenceSource::propose(std::span<const TokenId> context, int k, Proposal& out) {
    check_k(name(), k);
    const IndexMatch m = index_.find(context);
    if (!tree_) {
        index_.copy(m, k, RunOff::Stop, out.tokens);
        return;
    }
    index_.continuations(m, opts_.max_occurrences, k, RunOff::Stop, found_);
    tree_->build(found_, TreeShape{.k = k, .branches = opts_.branches, .max_depth = k}, out);
}

std::string read_text_file(const std::string& path) {
    return read_file_limited(path, kMaxReferenceFileBytes, "reference file");
}

} // namespace rwd::speculate
