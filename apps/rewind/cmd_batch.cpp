// `rewind batch`: runs a workload with continuous batching (many requests in each forward pass,
// each with its own guesses and rollback) and writes one JSON line per request as it retires;
// a summary (aggregate tokens/s, passes) goes to stderr. Exit status 1 when any request failed
// (every other request's line is still written; stderr names the failed ones).
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "rewind/bench/bench_batch.h"
#include "rewind/bench/bench_workload.h"
#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/model.h"
#include "rewind/speculate/source_factory.h"
#include "rewind/tokenizer.h"

namespace rwd::cli {
namespace {

namespace rb = rwd::bench;

struct BatchFlags {
    std::string model = default_model_path();
    std::string workload, draft;
    int64_t items = 0;
    int64_t n_predict = 0;
    int concurrency = 4;
    std::string spec = "none";
    int k = 8;
    bool adaptive = false;
    int tree = 0; // continuations per node of ngram, ref and suffix (0: each source's own)
    float temperature = 0.0f;
    int32_t top_k = 0;
    uint64_t seed = 0;
    int threads = 1;
    int64_t kv_budget_mib = 0;
    int64_t prefill_chunk = 64;
    int64_t pass_tokens = 0;
    bool cost_model = false;
    std::vector<double> pass_cost_ms; // --pass-cost FIXED_MS,PER_ROW_MS (empty: fitted)
    bool no_repack = false;
    bool widen_q4 = false; // ModelOptions::widen_q4
};

nlohmann::ordered_json line_of(const rb::WorkItem& w, const rb::BatchRunItem& it, const Tokenizer& tok,
                               const BatchFlags& f) {
    const auto& r = it.result;
    nlohmann::ordered_json j;
    j["id"] = w.id;
    j["index"] = it.index;
    j["prompt_tokens"] = it.prompt.size();
    j["prompt_tokens_shared"] = it.result.prompt_tokens_shared;
    j["generated_ids"] = r.tokens;
    Utf8StreamDecoder dec(tok, /*at_text_start=*/false);
    std::string text;
    for (TokenId t : r.tokens) text += dec.push(t);
    text += dec.flush();
    j["text"] = text;
    if (r.failed) {
        j["error"] = r.error;
        j["error_code"] = error_code_name(r.error_code);
        j["admitted"] = !it.refused;
    } else {
        j["stop_reason"] = stop_reason_name(r.stop);
    }
    j["latency_seconds"] = r.latency_seconds;
    j["first_token_seconds"] = r.queue_to_first_token_seconds;
    if (f.spec != "none") {
        const auto& s = r.stats;
        j["speculation"] = {{"source", f.spec},      {"k", f.k},
                            {"passes", s.passes},    {"proposed", s.proposed},
                            {"accepted", s.accepted}, {"emitted", s.emitted},
                            {"acceptance_rate", s.acceptance_rate()}, {"tokens_per_pass", s.tokens_per_pass()},
                            {"tree_passes", s.tree_passes}, {"mean_depth", s.mean_depth()}};
    }
    return j;
}

int run_batch(const BatchFlags& f) {
    if (f.kv_budget_mib < 0) throw Error("batch: --kv-budget-mib must not be negative");
    if (!f.draft.empty() && f.spec != "draft" && f.spec != "auto" && f.spec != "auto-first")
        throw Error("batch: --draft is only used with --spec draft or auto");
    if (f.spec == "draft" && f.draft.empty()) throw Error("batch: --spec draft needs --draft MODEL");
    if (f.spec == "none" && (f.adaptive || f.tree > 0)) throw Error("batch: --adaptive and --tree need --spec");
    if (!f.pass_cost_ms.empty() &&
        (f.pass_cost_ms.size() != 2 || !(f.pass_cost_ms[0] > 0) || !(f.pass_cost_ms[1] > 0) ||
         std::isinf(f.pass_cost_ms[0]) || std::isinf(f.pass_cost_ms[1])))
        throw Error("batch: --pass-cost wants two positive numbers, FIXED_MS,PER_ROW_MS");
    const auto items = rb::take_first(rb::load_workload(f.workload), f.items);
    const ModelOptions mo{.repack = !f.no_repack, .widen_q4 = f.widen_q4};
    auto model = Model::load(f.model, mo);
    Context ctx(model, ContextOptions{.n_threads = f.threads});

    rb::BatchRunOptions o;
    o.concurrency = f.concurrency;
    o.spec = f.spec;
    o.k = f.k;
    o.adaptive = f.adaptive;
    o.branches = f.tree;
    o.sampler.temperature = f.temperature;
    o.sampler.top_k = f.top_k;
    o.sampler.seed = f.seed;
    o.max_tokens = f.n_predict;
    o.kv_budget_bytes = static_cast<uint64_t>(f.kv_budget_mib) << 20;
    o.prefill_chunk = f.prefill_chunk;
    o.pass_tokens = f.pass_tokens;
    o.cost_model = f.cost_model;
    if (!f.pass_cost_ms.empty()) {
        o.pass_fixed_seconds = f.pass_cost_ms[0] * 1e-3;
        o.pass_row_seconds = f.pass_cost_ms[1] * 1e-3;
    }
    if (!f.draft.empty()) o.draft = Model::load(f.draft, mo);

    int64_t failed = 0;
    std::string failed_ids; // "id (code), ..." for the summary
    const rb::BatchRun run = rb::run_batched(ctx, items, o, [&](const rb::WorkItem& w, const rb::BatchRunItem& it) {
        if (it.result.failed) {
            ++failed;
            if (!failed_ids.empty()) failed_ids += ", ";
            failed_ids += w.id + " (" + error_code_name(it.result.error_code) + ")";
        }
        const std::string s = line_of(w, it, model->tokenizer(), f)
                                  .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
        std::printf("%s\n", s.c_str());
        std::fflush(stdout);
    });
    std::fprintf(stderr,
                 "batch: %zu requests (%lld failed), concurrency %d, spec %s: %lld tokens in %.3f s "
                 "(%.1f tokens/s aggregate; %.1f tokens/s in the passes without prompt chunks, %.1f in those "
                 "carrying all %d requests), %lld passes\n",
                 items.size(), static_cast<long long>(failed), f.concurrency, f.spec.c_str(),
                 static_cast<long long>(run.generated), run.wall_seconds, run.tokens_per_second(),
                 run.decode_tokens_per_second(), run.decode_tokens_per_second_at(static_cast<size_t>(f.concurrency)),
                 f.concurrency, static_cast<long long>(run.passes));
    // Every other request's line is written; the status still says that not all of them ran.
    if (failed > 0) {
        std::fprintf(stderr, "batch: failed requests: %s\n", failed_ids.c_str());
        return 1;
    }
    return 0;
}

} // namespace

void register_batch(CLI::App& app, Runner& run) {
    auto f = std::make_shared<BatchFlags>();
    CLI::App* cmd = app.add_subcommand(
        "batch", "Run a workload with continuous batching (one JSON line per request; per-request speculation)");
    cmd->add_option("-m,--model", f->model, "GGUF model file")->capture_default_str();
    cmd->add_option("--workload", f->workload,
                    "JSON-lines workload file {id, kind?, prompt, references?, max_tokens}, at most 64 MiB")
        ->required();
    cmd->add_option("--items,--limit", f->items, "Take only the first N items");
    cmd->add_option("-n,--n-predict", f->n_predict, "Tokens to generate per request (default: the workload's max_tokens)");
    cmd->add_option("--concurrency", f->concurrency, "Requests decoding at once (each pass carries all of them)")
        ->capture_default_str();
    cmd->add_option("--spec", f->spec,
                    "Guess source of every request: none, ngram, ref (the item's references), draft, auto, auto-first, "
                    "suffix (one cache of the finished requests' outputs serves them all)")
        ->check(CLI::IsMember([] {
            std::vector<std::string> c{"none"};
            for (const char* n : speculate::kSourceNames) c.emplace_back(n);
            return c;
        }()))
        ->capture_default_str();
    cmd->add_option("--tree", f->tree,
                    "Token trees: up to this many continuations per node for ngram, ref and suffix (1: chains; "
                    "default: ngram and ref chains, suffix 4)")
        ->check(CLI::Range(1, 64));
    cmd->add_option("--draft", f->draft, "Draft GGUF model (--spec draft/auto)")->check(CLI::ExistingFile);
    cmd->add_option("-k", f->k, "Guesses per request and pass (the ceiling with --adaptive)")->capture_default_str();
    cmd->add_flag("--adaptive", f->adaptive, "Adapt each request's guesses per pass to its recent acceptance");
    cmd->add_option("--temp", f->temperature, "Temperature; 0 or below = greedy")->capture_default_str();
    cmd->add_option("--top-k", f->top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str();
    cmd->add_option("-s,--seed", f->seed, "Sampling seed (randomness is keyed by seed and position)")->capture_default_str();
    cmd->add_option("-t,--threads", f->threads, "Threads")->capture_default_str();
    cmd->add_option("--kv-budget-mib", f->kv_budget_mib,
                    "Total KV cache of the active requests in MiB (0: no limit); admission waits for room")
        ->capture_default_str();
    cmd->add_option("--prefill-chunk", f->prefill_chunk,
                    "Prompt tokens per pass (all requests still prefilling together), run inside the decode passes")
        ->capture_default_str();
    cmd->add_option("--pass-tokens", f->pass_tokens,
                    "Pending tokens + guesses per pass (guesses least likely to stand dropped first); 0 = no limit")
        ->capture_default_str();
    cmd->add_flag("--cost-model", f->cost_model,
                  "Verify a guess only while its chance to stand pays for its row (pass time fitted as a + b * rows)");
    cmd->add_option("--pass-cost", f->pass_cost_ms,
                    "--cost-model's pass time a + b * rows as FIXED_MS,PER_ROW_MS (e.g. from `rewind bench "
                    "--cost-curve`) instead of fitting it to the run's own passes")
        ->delimiter(',');
    cmd->add_flag("--no-repack", f->no_repack, "Keep Q8_0, Q5_0, Q5_1 and K-quant weights in the file's layout (no repacking at load)");
    cmd->add_flag("--widen-q4", f->widen_q4,
                  "Widen Q4_0 and Q4_1 weights to the packed Q8_0 layout at load: the same outputs, faster products, +89 % / +80 % of their memory");
    cmd->callback([f, &run] { run = [f] { return run_batch(*f); }; });
}

} // namespace rwd::cli
