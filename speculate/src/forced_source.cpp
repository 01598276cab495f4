// ForcedSource: the constraint's forced tokens as a chain, then (optionally) an inner source's
// guesses for the text after them, re-rooted under the last forced token.
#include "rewind/speculate/forced_source.h"

#include <memory>

namespace rwd::speculate {

ForcedSource::ForcedSource(GuessSource* inner) : inner_(inner), name_("forced") {
    if (inner_) {
        name_ += '+';
        name_ += inner_->name();
    }
}

void ForcedSource::reset(const GenerationStart& start) {
    constraint_ = start.constraint;
    if (inner_) inner_->reset(start);
}

void ForcedSource::accept(std::span<const TokenId> context) {
    if (inner_) inner_->accept(context);
}

void ForcedSource::propose(std::span<const TokenId> context, int k, Proposal& out) {
    check_k(name(), k);
    forced_.clear();
    if (constraint_) constraint_->forced_tokens(static_cast<size_t>(k), forced_);
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
