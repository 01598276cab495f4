// Verification cost curve: repeated timed forward passes over a fixed cached prefix, which is
// filled once and restored by truncate() (O(1)) before every pass.
#include "rewind/speculate/bench_cost.h"

#include <chrono>
#include <string>

#include "rewind/error.h"
#include "rewind/kv_cache.h"

namespace rewind::bench {

std::vector<CostPoint> measure_cost_curve(Context& ctx, const CostCurveOptions& opts) {
    const Model& model = ctx.model();
    const int64_t n_ctx = model.hparams().n_ctx_train;
    if (opts.max_n < 1) throw Error("cost curve: max_n must be at least 1");
    if (opts.prefix < 0) throw Error("cost curve: prefix must not be negative");
    if (opts.repeat < 1) throw Error("cost curve: repeat must be at least 1");
    if (opts.warmup < 0) throw Error("cost curve: warmup must not be negative");
    if (opts.prefix + opts.max_n > n_ctx)
        throw Error("cost curve: prefix " + std::to_string(opts.prefix) + " + " + std::to_string(opts.max_n) +
                    " tokens exceed the model's context of " + std::to_string(n_ctx));
    if (opts.max_n > ctx.options().max_batch)
        throw Error("cost curve: max_n " + std::to_string(opts.max_n) + " exceeds the context's max_batch " +
                    std::to_string(ctx.options().max_batch));

    // Any valid ids do: the cost of a pass does not depend on which tokens it runs. A spread
    // of ids avoids one hot embedding row flattering the cache.
    const int64_t n_vocab = model.n_vocab();
    auto token_at = [&](int64_t i) { return static_cast<TokenId>((17 + 911 * i) % n_vocab); };
    std::vector<TokenId> prefix(static_cast<size_t>(opts.prefix)), batch(static_cast<size_t>(opts.max_n));
    for (int64_t i = 0; i < opts.prefix; ++i) prefix[static_cast<size_t>(i)] = token_at(i);
    for (int64_t i = 0; i < opts.max_n; ++i) batch[static_cast<size_t>(i)] = token_at(opts.prefix + i);

    KvCache cache(model, KvCacheOptions{opts.prefix + opts.max_n, KvType::F32});
    if (!prefix.empty()) ctx.forward(cache, prefix, Logits::None);

    std::vector<CostPoint> points(static_cast<size_t>(opts.max_n));
    for (int64_t n = 1; n <= opts.max_n; ++n) points[static_cast<size_t>(n - 1)].n = n;
    using clock = std::chrono::steady_clock;
    for (int round = 0; round < opts.warmup + opts.repeat; ++round) {
        for (auto& p : points) {
            cache.truncate(opts.prefix);
            const auto t0 = clock::now();
            ctx.forward(cache, std::span<const TokenId>(batch.data(), static_cast<size_t>(p.n)), Logits::All);
            const double s = std::chrono::duration<double>(clock::now() - t0).count();
            if (round >= opts.warmup) p.samples.push_back(s);
        }
    }
    for (auto& p : points) p.seconds = median(p.samples);
    return points;
}

} // namespace rewind::bench
