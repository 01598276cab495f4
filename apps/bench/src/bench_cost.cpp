// Verification cost curve: repeated timed forward passes over a fixed cached prefix, which is
// filled once and restored by truncate() (O(1)) before every pass; and plain prefill/decode
// throughput for context.
#include "rewind/bench/bench_cost.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>

#include "rewind/error.h"
#include "rewind/generate.h"
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

    const KvCacheOptions copts{opts.prefix + opts.max_n, opts.kv_type};
    KvCache cache(model, copts);
    if (opts.seeded_prefix && opts.prefix > 0) {
        const auto& hp = model.hparams();
        const size_t count = static_cast<size_t>(hp.n_layer * opts.prefix * hp.n_embd_kv());
        std::vector<float> k(count), v(count);
        std::mt19937 rng(1234);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (float& x : k) x = nd(rng);
        for (float& x : v) x = nd(rng);
        cache = KvCache::import(model, opts.prefix, k, v, copts);
    } else if (!prefix.empty()) {
        ctx.forward(cache, prefix, Logits::None);
    }

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
                p.experts_per_layer = static_cast<double>(ctx.experts_read()) / static_cast<double>(model.hparams().n_layer);
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
    if (opts.prompt_tokens + opts.decode_tokens + 1 > model.hparams().n_ctx_train)
        throw Error(ErrorCode::capacity, "throughput: " + std::to_string(opts.prompt_tokens) + " prompt + " +
                    std::to_string(opts.decode_tokens) + " decode tokens exceed the model's context of " +
                    std::to_string(model.hparams().n_ctx_train));
    std::vector<TokenId> prompt(static_cast<size_t>(opts.prompt_tokens));
    for (int64_t i = 0; i < opts.prompt_tokens; ++i) prompt[static_cast<size_t>(i)] = filler_token(i, model.n_vocab());
    KvCache cache(model, KvCacheOptions{opts.prompt_tokens + opts.decode_tokens + 1, opts.kv_type});
    GenerateOptions g;
    g.max_tokens = opts.decode_tokens + 1; // the first token comes from the prompt's pass
    // Every round runs all its passes (as llama-bench's tg does): an end-of-generation token a
    // few tokens in would leave a figure over a handful of passes.
    g.stop_at_eog = false;
    // The time of each generated token: consecutive ones are one decode pass apart (the pass,
    // sampling and stop checks), the interval the cost curve's 1-token pass should predict.
    std::vector<Clock::time_point> stamps(static_cast<size_t>(g.max_tokens));
    size_t stamped = 0;
    const TokenCallback on_token = [&](TokenId) {
        if (stamped < stamps.size()) stamps[stamped++] = Clock::now();
        return true;
    };
    std::vector<double> prefill, wall, intervals;
    intervals.reserve(static_cast<size_t>(opts.rounds * opts.decode_tokens));
    for (int round = 0; round <= opts.rounds; ++round) { // round 0 warms up
        cache.truncate(0);
        stamped = 0;
        const GenerateResult r = generate_plain(ctx, cache, prompt, g, on_token);
        const auto passes = static_cast<int64_t>(r.tokens.size()) - 1;
        if (round == 0) continue;
        prefill.push_back(r.prompt_seconds);
        if (passes > 0) wall.push_back(r.generate_seconds / static_cast<double>(passes));
        for (size_t i = 1; i < stamped; ++i)
            intervals.push_back(std::chrono::duration<double>(stamps[i] - stamps[i - 1]).count());
    }
    const auto d = static_cast<double>(opts.decode_tokens);
    Throughput t{opts.prompt_tokens, opts.decode_tokens, median(prefill), 0, 0};
    t.decode_seconds = intervals.empty() ? 0 : median(intervals) * d;
    t.decode_wall_seconds = wall.empty() ? 0 : median(wall) * d;
    return t;
}

double dense_pass_floor(double one_token_seconds, int64_t n, double prefill_tokens_per_s) {
    if (one_token_seconds <= 0 || prefill_tokens_per_s <= 0 || n < 1) return 0;
    return std::max(one_token_seconds, static_cast<double>(n) / prefill_tokens_per_s);
}

double cost_ratio(const std::vector<CostPoint>& curve, int64_t n) {
    double one = 0, at = 0;
    for (const CostPoint& p : curve) {
        if (p.n == 1) one = p.seconds;
        if (p.n == n) at = p.seconds;
    }
    return one > 0 && at > 0 ? at / one : 0;
}

double projected_speedup(double tokens_per_pass, int k, const std::vector<CostPoint>& curve) {
    const double ratio = cost_ratio(curve, int64_t{k} + 1);
    return ratio > 0 ? tokens_per_pass / ratio : 0;
}

double moe_pass_floor_seconds(int64_t n, double experts, double dense_bytes, double per_expert_bytes, double read_gbps,
                              double prefill_tokens_per_s) {
    const double memory = read_gbps > 0 ? (dense_bytes + experts * per_expert_bytes) / (read_gbps * 1e9) : 0;
    const double arithmetic = prefill_tokens_per_s > 0 ? static_cast<double>(n) / prefill_tokens_per_s : 0;
    return std::max(memory, arithmetic);
}

std::vector<Projection> project_speedups(const std::vector<ConfigSummary>& measured, const std::vector<CostPoint>& curve,
                                         const std::vector<CostPoint>& long_curve) {
    std::vector<Projection> out;
    for (const ConfigSummary& s : measured) {
        if (s.config.source == Source::Baseline || s.items == 0) continue;
        Projection p;
        p.config = s.config;
        p.tokens_per_pass = s.tokens_per_pass;
        // A pass's rows: k + 1 at a fixed k (chain or tree: every pass may be that wide); under
        // the cost policy, which sizes each pass, its mean rounded up.
        const int k = s.config.cost ? static_cast<int>(std::ceil(s.guesses_per_pass)) : s.config.k;
        p.cost_ratio = cost_ratio(curve, int64_t{k} + 1);
        p.speedup = projected_speedup(s.tokens_per_pass, k, curve);
        if (!long_curve.empty()) {
            p.cost_ratio_long = cost_ratio(long_curve, int64_t{k} + 1);
            p.speedup_long = projected_speedup(s.tokens_per_pass, k, long_curve);
        }
        out.push_back(p);
    }
    return out;
}

} // namespace rwd::bench
