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
    // Fill the prefix with seeded K/V values (KvCache::import) instead of a prefill pass: what a
    // pass costs does not depend on the cached values, and a 4,096-token prefill of a 1B model
    // takes many minutes on a small machine.
    bool seeded_prefix = false;
    KvType kv_type = KvType::F32; // the cache the passes attend over
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
    int64_t decode_tokens = 64;  // then this many single-token passes (greedy)
    int rounds = 5;              // timed rounds (the median is kept), after one untimed round
    KvType kv_type = KvType::F32; // the cache's storage type
};

// Prefill and decode speed on a fresh cache, measured through generate_plain, the loop `rewind
// generate` runs (sampling, stop checks and all), end-of-generation tokens ignored so every round
// runs decode_tokens passes. Decode speed comes twice (see Throughput): from the median interval
// between generated tokens, and from each round's wall time. Throws rwd::Error on options out of
// range or prompt + decode tokens beyond the model's context.
Throughput measure_throughput(Context& ctx, const ThroughputOptions& opts = {});

// The prompt whose prefill rate sets the floor of a pass: long enough that prefill runs the wide
// tiles at their steady rate, short enough that its attention stays a small share.
inline constexpr int64_t kFloorPromptTokens = 512;

// The least a pass over n tokens of a dense model can cost: max(one_token_seconds, n tokens at
// the prefill rate). A pass reads every weight once, so it cannot beat a 1-token pass; and its
// tokens take at least the arithmetic prefill spends on as many prompt tokens. 0 when either
// figure is missing (<= 0).
double dense_pass_floor(double one_token_seconds, int64_t n, double prefill_tokens_per_s);

// Cost of a pass over n tokens / cost of a 1-token pass on `curve`; 0 when either is missing.
double cost_ratio(const std::vector<CostPoint>& curve, int64_t n);

// Projected speedup of a configuration that verifies k guesses per pass (k + 1 tokens) and
// generates tokens_per_pass tokens per pass on average: tokens_per_pass / cost_ratio(curve, k + 1).
// Guessing, sampling and shorter passes (fewer guesses than k) are not counted, so a real run
// differs by those. 0 when the curve lacks the pass size.
double projected_speedup(double tokens_per_pass, int k, const std::vector<CostPoint>& curve);

// The floor of a mixture-of-experts pass over n tokens that read `experts` distinct experts
// (summed over layers): max(the bytes it must read / the read bandwidth, n / the prefill rate),
// the bytes being dense_bytes plus each expert read once (experts x per_expert_bytes). 0 when the
// bandwidth and the prefill rate are both unknown (not positive).
double moe_pass_floor_seconds(int64_t n, double experts, double dense_bytes, double per_expert_bytes, double read_gbps,
                              double prefill_tokens_per_s);

// One projection per speculative configuration of `measured` (summaries over all items of a
// workload run) onto `curve` and, when not empty, `long_curve`.
std::vector<Projection> project_speedups(const std::vector<ConfigSummary>& measured, const std::vector<CostPoint>& curve,
                                         const std::vector<CostPoint>& long_curve = {});

} // namespace rwd::bench
