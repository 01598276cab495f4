// Several sources behind one: reference copy, prompt lookup and a draft model ("auto"). Members
// are asked in order of preference (cheapest first) and one proposal is chosen per pass; every
// member follows the accepted text whether it answered or not.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "rewind/speculate/guess_source.h"

namespace rwd::speculate {

enum class ComposePolicy {
    // The longest proposal wins, ties to the earlier member: for chains their length, for trees
    // the guesses they expect to stand (each guess's path probability from its weights, summed;
    // a guess without a weight counts 1, so a chain's value is its length). Members are asked
    // in order until one proposes a chain of all k tokens (none can do better), so a short copy
    // near the end of a reference no longer hides a longer n-gram or draft proposal, and the
    // draft (the only member that costs forward passes) is asked only when the cheaper members
    // fall short.
    Longest,
    // The first member with any guess answers; the rest are not asked.
    First,
};
const char* compose_policy_name(ComposePolicy p); // "longest", "first"

class CompositeSource final : public GuessSource {
public:
    // Throws rwd::Error (argument) if `members` is empty or holds a null source.
    explicit CompositeSource(std::vector<std::unique_ptr<GuessSource>> members,
                             ComposePolicy policy = ComposePolicy::Longest);

    std::string_view name() const override { return name_; } // "ref+ngram+draft"
    void reset(const GenerationStart& start) override;
    void propose(std::span<const TokenId> context, int k, Proposal& out) override;
    void accept(std::span<const TokenId> context) override;

    ComposePolicy policy() const { return policy_; }
    size_t size() const { return members_.size(); }
    GuessSource& member(size_t i) { return *members_.at(i); }
    // Per member: proposals of its that were chosen since the last reset().
    const std::vector<int64_t>& answered() const { return answered_; }

private:
    double value(const Proposal& p);
    std::vector<double> reach_; // value() scratch
    std::vector<std::unique_ptr<GuessSource>> members_;
    ComposePolicy policy_;
    std::vector<int64_t> answered_;
    std::string name_;
    Proposal trial_; // reused: nothing is allocated per pass once warm
};

} // namespace rwd::speculate
