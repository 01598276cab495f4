// ForcedSource: the constraint's forced tokens as a chain, then (optionally) an inner source's
// guesses for the text after them, re-rooted under the last forced token.
#include "rewind/speculate/forced_source.h"

#include <algorithm>
#include <memory>

namespace rwd::speculate {

ForcedSource::ForcedSource(GuessSource* inner) : inner_(inner), name_("forced") {
    if (inner_) {
        name_ += '+';
        name_ += inner_->name();
    }
}

namespace {

// How many leading tokens `emitted` shares with `split`.
int64_t common_prefix(std::span<const TokenId> emitted, const std::vector<TokenId>& split) {
    const size_t n = std::min(emitted.size(), split.size());
    size_t i = 0;
    while (i < n && emitted[i] == split[i]) ++i;
    return static_cast<int64_t>(i);
}

} // namespace

void ForcedSource::reset(const GenerationStart& start) {
    constraint_ = start.constraint;
    split_tok_.clear();
    split_chr_.clear();
    matched_tok_ = matched_chr_ = 0;
    if (inner_) inner_->reset(start);
}

void ForcedSource::accept(std::span<const TokenId> context) {
    // What the model wrote where text was forced: a vote for the split it followed further.
    if (!split_tok_.empty() && context.size() > split_at_) {
        const auto emitted = context.subspan(split_at_);
        matched_tok_ += common_prefix(emitted, split_tok_);
        matched_chr_ += common_prefix(emitted, split_chr_);
    }
    split_tok_.clear();
    split_chr_.clear();
    if (inner_) inner_->accept(context);
}

void ForcedSource::propose(std::span<const TokenId> context, int k, Proposal& out) {
    check_k(name(), k);
    forced_.clear();
    split_tok_.clear();
    split_chr_.clear();
    if (constraint_) {
        constraint_->forced_tokens(static_cast<size_t>(k), split_tok_);
        if (!split_tok_.empty()) constraint_->forced_characters(static_cast<size_t>(k), split_chr_);
        split_at_ = context.size();
        forced_ = matched_chr_ > matched_tok_ && !split_chr_.empty() ? split_chr_ : split_tok_;
    }
    if (forced_.size() > static_cast<size_t>(k)) forced_.resize(static_cast<size_t>(k));
    const auto n = static_cast<int>(forced_.size());
    if (n == 0) {
        if (inner_) inner_->propose(context, k, out);
        return;
    }
    out.tokens.assign(forced_.begin(), forced_.end());
    out.forced = n;
    if (!inner_ || n >= k) return;
    context_.assign(context.begin(), context.end());
    context_.insert(context_.end(), forced_.begin(), forced_.end());
    trial_.clear();
    inner_->propose(context_, k - n, trial_);
    if (trial_.tokens.empty()) return;
    // The inner guesses hang under the last forced token; a forced guess stands for sure as far
    // as the source can tell (weight 1) and, in rejection mode, was "drawn" as a point mass.
    out.tokens.insert(out.tokens.end(), trial_.tokens.begin(), trial_.tokens.end());
    if (!trial_.is_chain()) {
        out.parents.resize(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) out.parents[static_cast<size_t>(i)] = i - 1;
        for (const int32_t p : trial_.parents) out.parents.push_back(p < 0 ? n - 1 : p + n);
    }
    if (!trial_.weights.empty()) {
        out.weights.assign(static_cast<size_t>(n), 1.0f);
        out.weights.insert(out.weights.end(), trial_.weights.begin(), trial_.weights.end());
    }
    if (!trial_.probs.empty()) {
        const size_t n_vocab = trial_.probs.size() / trial_.tokens.size();
        out.probs.assign(static_cast<size_t>(n) * n_vocab, 0.0f);
        for (int i = 0; i < n; ++i)
            out.probs[static_cast<size_t>(i) * n_vocab + static_cast<size_t>(forced_[static_cast<size_t>(i)])] = 1.0f;
        out.probs.insert(out.probs.end(), trial_.probs.begin(), trial_.probs.end());
    }
}

GuessSource& with_forced(GuessSource& source, const TokenConstraint* constraint, std::unique_ptr<ForcedSource>& holder) {
    if (!constraint || dynamic_cast<ForcedSource*>(&source)) return source;
    holder = std::make_unique<ForcedSource>(&source);
    return *holder;
}

} // namespace rwd::speculate
