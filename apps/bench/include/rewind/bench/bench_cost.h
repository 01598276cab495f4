// The verification cost curve: what one target forward pass over n new tokens costs, n = 1..17.
// Speculation pays off only when a pass over k+1 tokens costs far less than k+1 single passes.
#pragma once
#include <cstdint>
#include <vector>

#include "rewind/context.h"
#include "rewind/bench/bench_result.h"

namespace rwd::bench {

struct CostCurveOptions {
    int64_t max_n = 17;   // n = 1..max_n new tokens per pass (17 = k 16 plus the target's token)
    int64_t prefix = 100; // tokens already cached before each pass: a warm context, as in use
    int repeat = 25;      // timed passes per n (the median is kept)
    int warmup = 6;       // untimed passes of each n before its timed ones, every round
    int rounds = 5;       // the timed passes of each n are split over this many rounds
};

// Times ctx.forward over n new tokens (all logits, as verification needs them) after `prefix`
// cached tokens. Each n is timed in blocks of passes of that same size, after untimed ones:
// a pass right after a pass of another size runs slower (on pycode-4m a 1-token pass right
// after a 17-token one costs about 1.7x its settled time, and settles over about five passes),
// while plain decoding runs 1-token passes back to back. The blocks of all n alternate over
// `rounds` rounds, so slow drift of the machine hits every n alike. Throws rwd::Error on options out of range or
// prefix + max_n beyond the model's context.
std::vector<CostPoint> measure_cost_curve(Context& ctx, const CostCurveOptions& opts = {});

struct ThroughputOptions {
    int64_t prompt_tokens = 128; // one prefill pass over this many tokens
    int64_t decode_tokens = 64;  // then this many single-token passes (greedy on the logits)
    int rounds = 5;              // timed rounds (the median is kept), after one untimed round
};

// Prefill and decode speed of plain forward passes on a fresh cache. Throws rwd::Error on
// options out of range or prompt + decode tokens beyond the model's context.
Throughput measure_throughput(Context& ctx, const ThroughputOptions& opts = {});

} // namespace rwd::bench
