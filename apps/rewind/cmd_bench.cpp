// `rewind bench --cost-curve`: what the runtime's forward pass costs on this machine: prompt
// (prefill) and decode throughput, and the cost of one pass over n new tokens on a warm context
// (the verification cost that decides whether speculation pays), as a Markdown table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/kernels/simd.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "rewind/speculate/bench_cost.h"
#include "rewind/speculate/bench_stats.h"

namespace rewind::cli {
namespace {

struct BenchFlags {
    std::string model = default_model_path();
    bool cost_curve = false;
    int threads = 1;
    std::string n_list = "1,2,4,8,9,16,17";
    int64_t prefix = 100;        // warm context for the cost curve
    int64_t prompt_tokens = 128; // prefill measurement
    int64_t decode_tokens = 64;  // decode measurement, after the prompt
    int repeat = 25;
};

void add_bench_flags(CLI::App& cmd, BenchFlags& f) {
    cmd.add_option("-m,--model", f.model, "GGUF model file")->capture_default_str();
    cmd.add_flag("--cost-curve", f.cost_curve, "Measure prefill, decode and the cost of a pass over n new tokens");
    cmd.add_option("-t,--threads", f.threads, "Threads")->capture_default_str();
    cmd.add_option("--n", f.n_list, "Comma-separated token counts per pass")->capture_default_str();
    cmd.add_option("--prefix", f.prefix, "Tokens already cached before each timed pass")->capture_default_str();
    cmd.add_option("--prompt-tokens", f.prompt_tokens, "Prompt length for the prefill measurement")
        ->capture_default_str();
    cmd.add_option("--decode-tokens", f.decode_tokens, "Tokens decoded one by one after the prompt")
        ->capture_default_str();
    cmd.add_option("--repeat", f.repeat, "Timed repetitions (the median is reported)")->capture_default_str();
}

std::vector<int64_t> parse_n_list(const std::string& s) {
    std::vector<int64_t> out;
    std::stringstream in(s);
    std::string item;
    while (std::getline(in, item, ',')) {
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != item.size() || v < 1) throw Error("bench: --n wants positive integers, got '" + item + "'");
        out.push_back(v);
    }
    if (out.empty()) throw Error("bench: --n is empty");
    return out;
}

// Deterministic, spread-out ids: the cost of a pass does not depend on which tokens it runs.
std::vector<TokenId> filler_tokens(int64_t n, int64_t n_vocab) {
    std::vector<TokenId> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<TokenId>((7 + 613 * i) % n_vocab);
    return t;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Throughput {
    double prefill_seconds = 0; // median over repeats, one pass over the whole prompt
    double decode_seconds = 0;  // median over repeats of decode_tokens single-token passes
};

Throughput measure_throughput(Context& ctx, const BenchFlags& f) {
    const Model& m = ctx.model();
    const auto prompt = filler_tokens(f.prompt_tokens, m.n_vocab());
    KvCache cache(m, KvCacheOptions{.capacity = f.prompt_tokens + f.decode_tokens, .type = KvType::F32});
    const int rounds = std::max(3, f.repeat / 5);
    std::vector<double> prefill, decode;
    for (int r = 0; r < rounds + 1; ++r) { // round 0 warms up
        cache.truncate(0);
        auto t0 = std::chrono::steady_clock::now();
        auto logits = ctx.forward(cache, prompt, Logits::Last);
        const double p = seconds_since(t0);
        t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < f.decode_tokens; ++i) {
            const auto next = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
            logits = ctx.forward(cache, std::span<const TokenId>(&next, 1), Logits::Last);
        }
        const double d = seconds_since(t0);
        if (r > 0) {
            prefill.push_back(p);
            decode.push_back(d);
        }
    }
    return {bench::median(prefill), bench::median(decode)};
}

int run_bench(const BenchFlags& f) {
    if (!f.cost_curve) throw Error("bench: say what to measure (--cost-curve)");
    if (f.repeat < 1 || f.prompt_tokens < 1 || f.decode_tokens < 1 || f.prefix < 0)
        throw Error("bench: --repeat, --prompt-tokens and --decode-tokens must be positive, --prefix >= 0");
    const std::vector<int64_t> ns = parse_n_list(f.n_list);
    const int64_t max_n = *std::max_element(ns.begin(), ns.end());

    auto model = Model::load(f.model);
    const int64_t n_ctx = model->hparams().n_ctx_train;
    if (f.prompt_tokens + f.decode_tokens > n_ctx)
        throw Error("bench: --prompt-tokens + --decode-tokens exceed the model's context of " + std::to_string(n_ctx));
    Context ctx(model, ContextOptions{.n_threads = f.threads, .max_batch = std::max<int64_t>(max_n, 256)});

    std::printf("model: %s (%s, %lld layers, n_embd %lld, weights %s)\n", f.model.c_str(),
                model->hparams().architecture.c_str(), static_cast<long long>(model->hparams().n_layer),
                static_cast<long long>(model->hparams().n_embd), dtype_name(model->layers.at(0).wq.type));
    std::printf("threads: %d, SIMD: %s\n\n", f.threads, simd_name(detect_simd()));

    const Throughput tp = measure_throughput(ctx, f);
    std::printf("prefill: %lld tokens in %.2f ms = %.0f tokens/s\n", static_cast<long long>(f.prompt_tokens),
                tp.prefill_seconds * 1e3, static_cast<double>(f.prompt_tokens) / tp.prefill_seconds);
    std::printf("decode:  %lld tokens after the prompt in %.2f ms = %.0f tokens/s (%.3f ms/token)\n\n",
                static_cast<long long>(f.decode_tokens), tp.decode_seconds * 1e3,
                static_cast<double>(f.decode_tokens) / tp.decode_seconds,
                tp.decode_seconds * 1e3 / static_cast<double>(f.decode_tokens));

    bench::CostCurveOptions co;
    co.max_n = max_n;
    co.prefix = f.prefix;
    co.repeat = f.repeat;
    const std::vector<bench::CostPoint> curve = bench::measure_cost_curve(ctx, co);
    const double one = curve.at(0).seconds;
    std::printf("cost of one forward pass over n new tokens after %lld cached (median of %d, all logits):\n\n",
                static_cast<long long>(f.prefix), f.repeat);
    std::printf("| n | ms/pass | ms/token | ratio to n=1 |\n| ---: | ---: | ---: | ---: |\n");
    for (int64_t n : ns) {
        const double s = curve.at(static_cast<size_t>(n - 1)).seconds;
        std::printf("| %lld | %.3f | %.3f | %.2fx |\n", static_cast<long long>(n), s * 1e3,
                    s * 1e3 / static_cast<double>(n), s / one);
    }
    return 0;
}

} // namespace

void register_bench(CLI::App& app, Runner& run) {
    auto flags = std::make_shared<BenchFlags>();
    CLI::App* cmd = app.add_subcommand("bench", "Measure the runtime: forward-pass cost curve");
    add_bench_flags(*cmd, *flags);
    cmd->callback([flags, &run] { run = [flags] { return run_bench(*flags); }; });
}

} // namespace rewind::cli
