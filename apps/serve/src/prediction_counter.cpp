// PredictionCounter: forwards to the prediction's reference source and counts its hits.
#include "prediction_counter.h"

namespace rwd::serve {

void PredictionCounter::reset(const speculate::GenerationStart& start) {
    last_.clear();
    inner_->reset(start);
}

void PredictionCounter::propose(std::span<const TokenId> context, int k, speculate::Proposal& out) {
    inner_->propose(context, k, out);
    last_ = out;
    base_ = context.size();
}

void PredictionCounter::accept(std::span<const TokenId> context) {
    int32_t node = -1;
    int64_t n = 0;
    for (size_t pos = base_; pos < context.size(); ++pos) {
        int32_t next = -2;
        for (size_t i = 0; i < last_.tokens.size(); ++i)
            if (last_.parent(i) == node && last_.tokens[i] == context[pos]) {
                next = static_cast<int32_t>(i);
                break;
            }
        if (next == -2) break;
        node = next;
        ++n;
    }
    *hits_ += n;
    last_.clear();
    inner_->accept(context);
}

} // namespace rwd::serve
