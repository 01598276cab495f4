// CompositeSource: members answer in order; under Longest the longest proposal is kept (its
// tokens and, in rejection mode, its distributions). Members that were not chosen are still told
// what was accepted, so a draft model that sat out catches up in one pass later.
#include "rewind/speculate/composite_source.h"

#include <algorithm>

#include "rewind/error.h"

namespace rwd::speculate {

const char* compose_policy_name(ComposePolicy p) {
    switch (p) {
    case ComposePolicy::Longest: return "longest";
    case ComposePolicy::First: return "first";
    }
    return "?";
}

CompositeSource::CompositeSource(std::vector<std::unique_ptr<GuessSource>> members, ComposePolicy policy)
    : members_(std::move(members)), policy_(policy) {
    if (members_.empty()) throw Error("composite source: no member sources");
    for (const auto& m : members_) {
        if (!m) throw Error("composite source: null member source");
        if (!name_.empty()) name_ += '+';
        name_ += m->name();
    }
    answered_.assign(members_.size(), 0);
}

void CompositeSource::reset(const GenerationStart& start) {
    for (auto& m : members_) m->reset(start);
    std::fill(answered_.begin(), answered_.end(), 0);
}

void CompositeSource::propose(std::span<const TokenId> context, int k, Proposal& out) {
    check_k(name(), k);
    out.clear();
    if (policy_ == ComposePolicy::First) {
        for (size_t i = 0; i < members_.size(); ++i) {
            members_[i]->propose(context, k, out);
            if (!out.tokens.empty()) {
                ++answered_[i];
                return;
            }
        }
        return;
    }
    // Longest: `out` holds the best so far; a trial that beats it is swapped in (buffers are
    // exchanged, not copied or freed).
    size_t best = members_.size();
    double best_value = 0;
    for (size_t i = 0; i < members_.size() && best_value < static_cast<double>(k); ++i) {
        trial_.clear();
        members_[i]->propose(context, k, trial_);
        const double v = value(trial_);
        if (v > best_value) {
            std::swap(out, trial_);
            best_value = v;
            best = i;
        }
    }
    if (best < members_.size()) ++answered_[best];
}

// The sum of the guesses' path probabilities (a weightless guess counts 1: a chain's length).
double CompositeSource::value(const Proposal& p) {
    if (p.weights.empty()) return static_cast<double>(p.tokens.size());
    reach_.resize(p.tokens.size());
    double sum = 0;
    for (size_t i = 0; i < p.tokens.size(); ++i) {
        const int32_t a = p.parent(i);
        reach_[i] = (a < 0 ? 1.0 : reach_[static_cast<size_t>(a)]) * p.weights[i];
        sum += reach_[i];
    }
    return sum;
}

void CompositeSource::accept(std::span<const TokenId> context) {
    for (auto& m : members_) m->accept(context);
}

} // namespace rwd::speculate
