// run_batched: the continuous-batching loop over a workload (admit while fewer than concurrency
// requests are active, step, report retirements), each request with its own guess source built
// by the library's one factory.
#include "rewind/bench/bench_batch.h"

#include <algorithm>
#include <chrono>

#include "rewind/speculate/grammar_constraint.h"
#include "rewind/speculate/source_factory.h"
#include "rewind/speculate/suffix_source.h"

namespace rwd::bench {
namespace {

namespace sp = rwd::speculate;

// The source `opts` names for `item`, or null for plain decoding. Throws rwd::Error (the
// request's own) when the factory refuses it, e.g. "ref" for an item without references.
std::unique_ptr<sp::GuessSource> source_for(const BatchRunOptions& opts, const WorkItem& item, const Context& ctx,
                                            int64_t capacity, const std::shared_ptr<sp::SuffixCache>& suffix_cache) {
    if (opts.spec == "none") return nullptr;
    sp::SourceSpec spec;
    sp::parse_source_kind(opts.spec, spec);
    spec.branches = opts.branches;
    if (spec.kind == sp::SourceKind::Ref || spec.kind == sp::SourceKind::Auto) spec.references = item.references;
    if (spec.kind == sp::SourceKind::Draft || spec.kind == sp::SourceKind::Auto) spec.draft = opts.draft;
    if (spec.kind == sp::SourceKind::Suffix) spec.suffix_cache = suffix_cache; // outputs recorded as requests retire
    spec.draft_options.context =
        ContextOptions{.n_threads = ctx.options().n_threads, .device = ctx.options().device, .simd = ctx.options().simd};
    spec.draft_options.cache_type = opts.kv_type;
    return sp::make_guess_source(spec, ctx.model(), capacity);
}

void check_options(const BatchRunOptions& opts) {
    if (opts.concurrency < 1) throw Error("batch: concurrency must be >= 1, got " + std::to_string(opts.concurrency));
    if (opts.k < 1 || opts.k > sp::SpeculativeOptions::kMaxK)
        throw Error("batch: k must be in [1, " + std::to_string(sp::SpeculativeOptions::kMaxK) + "], got " +
                    std::to_string(opts.k));
    if (opts.spec != "none") {
        sp::SourceSpec probe;
        sp::parse_source_kind(opts.spec, probe); // an unknown name is the caller's error, not each request's
    }
}

// The request of one item, but its constraint and source (built where a refusal is caught).
sp::BatchRequest request_of(const BatchRunOptions& opts, const WorkItem& w, const std::vector<TokenId>& prompt) {
    sp::BatchRequest req;
    req.prompt = prompt;
    req.generate.max_tokens = opts.max_tokens > 0 ? opts.max_tokens : w.max_tokens;
    req.generate.sampler = opts.sampler;
    req.generate.logprobs = opts.logprobs;
    req.k = opts.k;
    req.k_policy = opts.adaptive ? sp::KPolicy::Adaptive : sp::KPolicy::Fixed;
    return req;
}

} // namespace

BatchRun run_batched(Context& ctx, const std::vector<WorkItem>& items, const BatchRunOptions& opts,
                     const BatchRunObserver& on_retire) {
    check_options(opts);
    const Model& model = ctx.model();
    const int64_t n_ctx = model.hparams().n_ctx_train;
    sp::BatchDecoder dec(ctx, sp::BatchOptions{.kv_budget_bytes = opts.kv_budget_bytes,
                                               .kv_type = opts.kv_type,
                                               .prefill_chunk = opts.prefill_chunk,
                                               .pass_tokens = opts.pass_tokens,
                                               .cost_model = opts.cost_model,
                                               .pass_fixed_seconds = opts.pass_fixed_seconds,
                                               .pass_row_seconds = opts.pass_row_seconds});

    // One cache of finished outputs for every "suffix" request of this run: each source adds its
    // generation when it is destroyed, so requests admitted later guess from earlier ones.
    const auto suffix_cache = std::make_shared<sp::SuffixCache>();
    grammar::GrammarCache grammars; // each distinct item grammar compiled once for the vocabulary
    BatchRun run;
    run.items.resize(items.size());
    std::vector<size_t> index_of_id; // [id] -> workload index (ids count up from 1)
    index_of_id.push_back(0);
    auto retire = [&](BatchRunItem& it) {
        run.generated += static_cast<int64_t>(it.result.tokens.size());
        if (on_retire) on_retire(items[it.index], it);
    };

    const auto t0 = std::chrono::steady_clock::now();
    size_t next = 0;
    while (next < items.size() || !dec.idle()) {
        while (next < items.size() && dec.active() < static_cast<size_t>(opts.concurrency)) {
            const WorkItem& w = items[next];
            BatchRunItem& it = run.items[next];
            it.index = next;
            it.prompt = model.tokenizer().encode(w.prompt);
            sp::BatchRequest req = request_of(opts, w, it.prompt);
            try {
                const int64_t capacity =
                    std::clamp<int64_t>(static_cast<int64_t>(it.prompt.size()) + req.generate.max_tokens, 1, n_ctx);
                if (!w.grammar.empty()) req.constraint = make_grammar_constraint(w.grammar, model.tokenizer(), &grammars);
                req.source = source_for(opts, w, ctx, capacity, suffix_cache);
                const uint64_t id = dec.submit(std::move(req));
                index_of_id.push_back(next);
                (void)id;
            } catch (const Error& e) {
                // The KV budget is full: wait for a retirement (unless nothing is active, in
                // which case the request can never fit and this refusal is its own).
                if (e.code() == ErrorCode::capacity && !dec.idle()) break;
                it.refused = true;
                it.result.failed = true;
                it.result.error_code = e.code();
                it.result.error = e.what();
                retire(it);
            }
            ++next;
        }
        for (sp::BatchResult& r : dec.step()) {
            BatchRunItem& it = run.items[index_of_id.at(static_cast<size_t>(r.id))];
            it.result = std::move(r);
            retire(it);
        }
    }
    run.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    run.passes = dec.passes();
    run.decode_seconds = dec.decode_seconds();
    run.decode_tokens = dec.decode_tokens();
    run.decode_levels.assign(dec.decode_levels().begin(), dec.decode_levels().end());
    return run;
}

} // namespace rwd::bench
