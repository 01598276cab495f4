// Sources in order of preference: the first that has a guess answers ("auto": reference copy,
// then prompt lookup, then a draft model). Every member follows the accepted text.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "rewind/speculate/guess_source.h"

namespace rwd::speculate {

class CompositeSource final : public GuessSource {
public:
    // Throws rwd::Error if `members` is empty or holds a null source.
    explicit CompositeSource(std::vector<std::unique_ptr<GuessSource>> members);

    std::string_view name() const override { return name_; } // "ref+ngram+draft"
    void reset(const GenerationStart& start) override;
    void propose(std::span<const TokenId> context, int k, Proposal& out) override;
    void accept(std::span<const TokenId> context) override;

    size_t size() const { return members_.size(); }
    GuessSource& member(size_t i) { return *members_.at(i); }
    // Per member: proposals it answered since the last reset().
    const std::vector<int64_t>& answered() const { return answered_; }

private:
    std::vector<std::unique_ptr<GuessSource>> members_;
    std::vector<int64_t> answered_;
    std::string name_;
};

} // namespace rwd::speculate
