// The verification cost curve: what one target forward pass over n new tokens costs, n = 1..17.
// Speculation pays off only when a pass over k+1 tokens costs far less than k+1 single passes.
#pragma once
#include <cstdint>
#include <vector>

#include "rewind/context.h"
#include "rewind/speculate/bench_result.h"

namespace rewind::bench {

struct CostCurveOptions {
    int64_t max_n = 17;  // n = 1..max_n new tokens per pass (17 = k 16 plus the target's token)
    int64_t prefix = 0;  // tokens already cached before each pass
    int repeat = 25;     // timed passes per n (the median is kept)
    int warmup = 3;      // untimed rounds over every n first
};

// Times ctx.forward over n new tokens (all logits, as verification needs them) after `prefix`
// cached tokens, interleaving the n values within each round so drift hits all of them alike.
// Throws rewind::Error on options out of range or prefix + max_n beyond the model's context.
std::vector<CostPoint> measure_cost_curve(Context& ctx, const CostCurveOptions& opts = {});

} // namespace rewind::bench
