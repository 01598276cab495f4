// `rewind batch`: runs a workload with continuous batching (many requests in each forward pass,
// each with its own guesses and rollback) and writes one JSON line per request as it retires;
// a summary (aggregate tokens/s, passes) goes to stderr. Exit status 1 when any request failed
// (every other request's line is still written; stderr names the failed ones).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "options.h"
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

// Speculation flags: no --ref (each request's references come from its workload item) and no k
// policy or verify mode (the batch decoder has its own).
constexpr unsigned kBatchSpecFlags = kAdaptive;

struct BatchFlags {
    ModelFlags model;
    WorkloadFlags workload;
    OutputFlags output{.n_predict = 0, .stop = {}, .ignore_eos = false}; // 0: each item's max_tokens
    int concurrency = 4;
    SpecFlags spec;
    SamplerOptions sampling;
    ConstraintFlags constraint; // for the items without a constraint of their own
    BatchingFlags batching;
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
    if (f.constraint.logprobs >= 0) j["logprobs"] = logprobs_json(r.logprobs, tok);
    if (r.failed) {
        j["error"] = r.error;
        j["error_code"] = error_code_name(r.error_code);
        j["admitted"] = !it.refused;
    } else {
        j["stop_reason"] = stop_reason_name(r.stop);
    }
    j["latency_seconds"] = r.latency_seconds;
    j["first_token_seconds"] = r.queue_to_first_token_seconds;
    if (f.spec.used()) {
        const auto& s = r.stats;
        j["speculation"] = {{"source", f.spec.spec}, {"k", f.spec.k},
                            {"passes", s.passes},    {"proposed", s.proposed},
                            {"accepted", s.accepted}, {"emitted", s.emitted},
                            {"forced_proposed", s.forced_proposed}, {"forced_accepted", s.forced_accepted},
                            {"acceptance_rate", s.acceptance_rate()}, {"tokens_per_pass", s.tokens_per_pass()},
                            {"tree_passes", s.tree_passes}, {"mean_depth", s.mean_depth()}};
    }
    return j;
}

int run_batch(const BatchFlags& f) {
    check_spec_flags("batch", f.spec, kBatchSpecFlags);
    rb::BatchRunOptions o = f.batching.batch_options("batch", f.sampling, f.output.n_predict);
    o.logprobs = f.constraint.with_logprobs({}).logprobs;
    std::vector<rb::WorkItem> items = f.workload.load();
    constrain_items(items, f.constraint);
    auto model = Model::load(f.model.model, f.model.model_options());
    Context ctx(model, f.model.context_options());
    o.concurrency = f.concurrency;
    o.spec = f.spec.spec;
    o.k = f.spec.k;
    o.adaptive = f.spec.adaptive;
    o.branches = f.spec.tree;
    if (!f.spec.draft.empty()) o.draft = Model::load(f.spec.draft, f.model.model_options());

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
                 items.size(), static_cast<long long>(failed), f.concurrency, f.spec.spec.c_str(),
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
    add_model_flags(*cmd, f->model);
    add_workload_flags(*cmd, f->workload)->required();
    add_output_flags(*cmd, f->output, 0);
    add_concurrency_flag(*cmd, f->concurrency);
    add_spec_flags(*cmd, f->spec, kBatchSpecFlags);
    add_sampling_flags(*cmd, f->sampling);
    add_constraint_flags(*cmd, f->constraint, kLogprobs);
    add_batching_flags(*cmd, f->batching, /*with_budget=*/true);
    cmd->callback([f, &run] { run = [f] { return run_batch(*f); }; });
}

} // namespace rwd::cli
