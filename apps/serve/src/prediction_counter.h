// The guess source of a Predicted Output, wrapped to count the completion tokens the prediction
// foresaw (OpenAI's accepted_prediction_tokens) while it guesses as the source it wraps.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "rewind/speculate/guess_source.h"

namespace rwd::serve {

// At each accept(), counts how many of the last proposal's tokens the sequence now holds
// (following the tree down along the accepted tokens) into `hits`. Counted whether or not a
// composite chose this member's proposal: a token that appeared where the prediction put it was
// predicted either way.
class PredictionCounter final : public speculate::GuessSource {
public:
    PredictionCounter(std::unique_ptr<speculate::GuessSource> inner, std::shared_ptr<std::atomic<int64_t>> hits)
        : inner_(std::move(inner)), hits_(std::move(hits)) {}
    std::string_view name() const override { return inner_->name(); }
    void reset(const speculate::GenerationStart& start) override;
    void propose(std::span<const TokenId> context, int k, speculate::Proposal& out) override;
    void accept(std::span<const TokenId> context) override;

private:
    std::unique_ptr<speculate::GuessSource> inner_;
    std::shared_ptr<std::atomic<int64_t>> hits_;
    speculate::Proposal last_; // the last proposal, until accept()
    size_t base_ = 0;          // the context's length when it was made
};

} // namespace rwd::serve
