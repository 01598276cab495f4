// Verification cost curve: repeated timed forward passes over a fixed cached prefix, which is
// filled once and restored by truncate() (O(1)) before every pass; and plain prefill/decode
// throughput for context.
#include "rewind/bench/bench_cost.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "rewind/error.h"
#include "rewind/kv_cache.h"

namespace rwd::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Any valid ids do: the cost of a pass does not depend on which tokens it runs. A spread of ids
// avoids one hot embedding row flattering the cache.
TokenId filler_token(int64_t i, int64_t n_vocab) { return static_cast<TokenId>((17 + 911 * i) % n_vocab); }

} // namespace

std::vector<CostPoint> measure_cost_curve(Context& ctx, const CostCurveOptions& opts) {
    const Model& model = ctx.model();
    const int64_t n_ctx = model.hparams().n_ctx_train;
    if (opts.max_n < 1) throw Error("cost curve: max_n must be at least 1");
    if (opts.prefix < 0) throw Error("cost curve: prefix must not be negative");
    if (opts.repeat < 1) throw Error("cost curve: repeat must be at least 1");
    if (opts.warmup < 0) throw Error("cost curve: warmup must not be negative");
    if (opts.rounds < 1) throw Error("cost curve: rounds must be at least 1");
    if (opts.prefix + opts.max_n > n_ctx)
        throw Error(ErrorCode::capacity, "cost curve: prefix " + std::to_string(opts.prefix) + " + " + std::to_string(opts.max_n) +
                    " tokens exceed the model's context of " + std::to_string(n_ctx));
    if (opts.max_n > ctx.options().max_batch)
        throw Error(ErrorCode::capacity, "cost curve: max_n " + std::to_string(opts.max_n) + " exceeds the context's max_batch " +
                    std::to_string(ctx.options().max_batch));

    const int64_t n_vocab = model.n_vocab();
    auto token_at = [&](int64_t i) { return filler_token(i, n_vocab); };
    std::vector<TokenId> prefix(static_cast<size_t>(opts.prefix)), batch(static_cast<size_t>(opts.max_n));
    for (int64_t i = 0; i < opts.prefix; ++i) prefix[static_cast<size_t>(i)] = token_at(i);
    for (int64_t i = 0; i < opts.max_n; ++i) batch[static_cast<size_t>(i)] = token_at(opts.prefix + i);

    KvCache cache(model, KvCacheOptions{opts.prefix + opts.max_n, KvType::F32});
    if (!prefix.empty()) ctx.forward(cache, prefix, Logits::None);

    std::vector<CostPoint> points(static_cast<size_t>(opts.max_n));
    for (int64_t n = 1; n <= opts.max_n; ++n) points[static_cast<size_t>(n - 1)].n = n;
    const int rounds = std::min(opts.rounds, opts.repeat);
    for (int round = 0; round < rounds; ++round) {
        // This round's share of the timed passes: repeat split as evenly as it goes.
        const int timed = opts.repeat / rounds + (round < opts.repeat % rounds ? 1 : 0);
        for (auto& p : points) {
            const std::span<const TokenId> tokens(batch.data(), static_cast<size_t>(p.n));
            for (int i = 0; i < opts.warmup + timed; ++i) {
                cache.truncate(opts.prefix);
                const auto t0 = Clock::now();
                ctx.forward(cache, tokens, Logits::All);
                const double s = seconds_since(t0);
                if (i >= opts.warmup) p.samples.push_back(s);
            }
        }
    }
    for (auto& p : points) p.seconds = median(p.samples);
    return points;
}

Throughput measure_throughput(Context& ctx, const ThroughputOptions& opts) {
    const Model& model = ctx.model();
    if (opts.prompt_tokens < 1 || opts.decode_tokens < 1 || opts.rounds < 1)
        throw Error("throughput: prompt tokens, decode tokens and rounds must be positive");
    if (opts.prompt_tokens + opts.decode_tokens > model.hparams().n_ctx_train)
        throw Error(ErrorCode::capacity, "throughput: " + std::to_string(opts.prompt_tokens) + " prompt + " +
                    std::to_string(opts.decode_tokens) + " decode tokens exceed the model's context of " +
                    std::to_string(model.hparams().n_ctx_train));
    std::vector<TokenId> prompt(static_cast<size_t>(opts.prompt_tokens));
    for (int64_t i = 0; i < opts.prompt_tokens; ++i) prompt[static_cast<size_t>(i)] = filler_token(i, model.n_vocab());
    KvCache cache(model, KvCacheOptions{opts.prompt_tokens + opts.decode_tokens, KvType::F32});
    std::vector<double> prefill, decode;
    for (int round = 0; round <= opts.rounds; ++round) { // round 0 warms up
        cache.truncate(0);
        auto t0 = Clock::now();
        auto logits = ctx.forward(cache, prompt, Logits::Last);
        const double p = seconds_since(t0);
        t0 = Clock::now();
        for (int64_t i = 0; i < opts.decode_tokens; ++i) {
            const auto next = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
            logits = ctx.forward(cache, std::span<const TokenId>(&next, 1), Logits::Last);
        }
        const double d = seconds_since(t0);
        if (round > 0) {
            prefill.push_back(p);
            decode.push_back(d);
        }
    }
    return {opts.prompt_tokens, opts.decode_tokens, median(prefill), median(decode)};
}

} // namespace rwd::bench
