// The benchmark loop. One target context and cache serve every run (the cache is truncated to 0
// before each), so no run pays for allocation or first-touch page faults that another skipped;
// one draft source likewise serves the "draft" and "auto" configurations, and one suffix cache,
// filled item by item, every "suffix" run.
#include "rewind/bench/bench_runner.h"

#include <chrono>
#include <fstream>
#include <thread>

#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/kernels/simd.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/draft_source.h"
#include "rewind/speculate/grammar_constraint.h"
#include "rewind/speculate/source_factory.h"
#include "rewind/speculate/suffix_source.h"

namespace rwd::bench {
namespace {

namespace sp = rwd::speculate;
using Clock = std::chrono::steady_clock;

bool applies(const Config& c, const WorkItem& item) {
    return c.source != Source::Ref || !item.references.empty();
}

struct Outcome {
    RunSample sample;
    std::vector<TokenId> tokens;
};

class Engine {
public:
    Engine(const BenchModels& models, const RunnerOptions& opts)
        : opts_(opts), target_(models.target, ContextOptions{.n_threads = opts.n_threads, .device = opts.device, .simd = opts.simd}),
          cache_(*models.target, KvCacheOptions{.type = opts.kv_type}) {
        if (models.draft) {
            sp::DraftSourceOptions d;
            d.cache_type = opts.kv_type;
            d.context.n_threads = opts.n_threads;
            d.context.device = opts.device;
            d.context.simd = opts.simd;
            draft_ = std::make_shared<sp::DraftSource>(models.draft, *models.target, cache_.capacity(), d);
        }
    }

    Context& target() { return target_; }

    // What an item generated, for the suffix configurations of the items after it.
    void remember(std::span<const TokenId> output) { suffix_cache_->add(output); }

    Outcome run(const Config& c, const WorkItem& item, const std::vector<TokenId>& prompt, int64_t max_tokens) {
        GenerateOptions g;
        g.max_tokens = max_tokens;
        g.sampler = opts_.sampler;
        cache_.truncate(0);
        Outcome out;
        // Built before the clock starts, from the cache: the grammar is compiled once per
        // distinct text, not by whichever configuration happens to run it first.
        const std::unique_ptr<TokenConstraint> constraint =
            item.grammar.empty() ? nullptr : make_grammar_constraint(item.grammar, target_.model().tokenizer(), &grammars_);
        if (c.source == Source::Baseline) {
            const auto t0 = Clock::now();
            GenerateResult res = generate_plain(target_, cache_, prompt, g, {}, constraint.get());
            out.sample.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
            out.sample.prompt_seconds = res.prompt_seconds;
            out.sample.tokens = static_cast<int64_t>(res.tokens.size());
            out.sample.passes = out.sample.tokens; // one token per pass, by definition
            out.tokens = std::move(res.tokens);
            return out;
        }
        sp::SpeculativeOptions so;
        so.generate = g;
        so.k = c.k;
        so.k_policy = c.cost ? sp::KPolicy::Cost : c.adaptive ? sp::KPolicy::Adaptive : sp::KPolicy::Fixed;
        so.verify = sp::VerifyMode::Exact;
        // The clock starts before the source is built: indexing a request's reference documents
        // is part of serving that request.
        const auto t0 = Clock::now();
        std::unique_ptr<sp::GuessSource> source = make_source(c, item);
        sp::SpeculativeResult res = sp::generate_speculative(target_, cache_, prompt, *source, so, {}, constraint.get());
        out.sample.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        out.sample.prompt_seconds = res.prompt_seconds;
        out.sample.tokens = static_cast<int64_t>(res.tokens.size());
        out.sample.passes = res.stats.passes;
        out.sample.proposed = res.stats.proposed;
        out.sample.accepted = res.stats.accepted;
        out.sample.depth = res.stats.depth_sum;
        out.sample.propose_seconds = res.stats.propose_seconds;
        out.sample.verify_seconds = res.stats.verify_seconds;
        out.tokens = std::move(res.tokens);
        return out;
    }

private:
    // Through the library's factory, lending it the one draft source: its context and cache are
    // built once, not once per request.
    std::unique_ptr<sp::GuessSource> make_source(const Config& c, const WorkItem& item) {
        sp::SourceSpec spec;
        sp::parse_source_kind(source_name(c.source), spec);
        spec.branches = c.branches;
        if (spec.kind == sp::SourceKind::Ref || spec.kind == sp::SourceKind::Auto) spec.references = item.references;
        if ((spec.kind == sp::SourceKind::Draft || spec.kind == sp::SourceKind::Auto) && draft_) {
            draft_->set_branches(c.branches > 0 ? c.branches : 1); // one draft serves every configuration
            spec.draft = std::shared_ptr<sp::GuessSource>(draft_);
        }
        if (spec.kind == sp::SourceKind::Suffix) {
            spec.suffix_cache = suffix_cache_;
            spec.suffix.record = false; // the loop adds each item's output once (remember())
        }
        return sp::make_guess_source(spec, target_.model(), cache_.capacity());
    }

    const RunnerOptions& opts_;
    Context target_;
    KvCache cache_;
    std::shared_ptr<sp::DraftSource> draft_; // shared by the sources of every request
    std::shared_ptr<sp::SuffixCache> suffix_cache_ = std::make_shared<sp::SuffixCache>();
    grammar::GrammarCache grammars_; // the items' grammars, compiled once each for the target's vocabulary
};

void validate(const BenchModels& models, const std::vector<WorkItem>& items, const RunnerOptions& opts) {
    if (!models.target) throw Error("bench: no target model");
    if (items.empty()) throw Error("bench: no workload items");
    if (opts.repeat < 1) throw Error("bench: repeat must be at least 1");
    if (opts.warmup < 0) throw Error("bench: warmup must not be negative");
    if (opts.n_threads < 1) throw Error("bench: threads must be at least 1");
    bool any_refs = false;
    for (const auto& it : items) any_refs = any_refs || !it.references.empty();
    for (const auto& c : opts.configs) {
        if (c.source == Source::Baseline) throw Error("bench: the baseline is always measured; do not list it");
        if (c.source == Source::Draft && !models.draft)
            throw Error("bench: configuration '" + c.label() + "' needs a draft model (--draft)");
        if (c.source == Source::Ref && !any_refs)
            throw Error("bench: configuration '" + c.label() + "' needs items with references (--ref or a workload with \"references\")");
    }
    const Sampler check(opts.sampler, models.target->n_vocab()); // throws on invalid sampling options
    (void)check;
}

} // namespace

std::vector<Config> make_configs(std::span<const Source> sources, std::span<const int> ks, KModes modes,
                                 std::span<const int> branches, bool cost) {
    if (sources.empty()) throw Error("bench: no guess source given");
    if (ks.empty()) throw Error("bench: no k given");
    const int own[] = {0};
    if (branches.empty()) branches = own;
    std::vector<Config> out;
    for (Source s : sources) {
        if (s == Source::Baseline) throw Error("bench: the baseline is always measured; do not list it");
        for (int b : branches) {
            if (b < 0) throw Error("bench: branches (--tree) must be >= 0, got " + std::to_string(b));
            for (int k : ks) {
                if (k < 1 || k > sp::SpeculativeOptions::kMaxK)
                    throw Error("bench: k " + std::to_string(k) + " is outside [1, " +
                                std::to_string(sp::SpeculativeOptions::kMaxK) + "]");
                if (modes != KModes::Adaptive) out.push_back({s, k, false, b});
                if (modes == KModes::Adaptive || (modes == KModes::Both && k > 1)) out.push_back({s, k, true, b});
                if (cost) out.push_back({s, k, false, b, true});
            }
        }
    }
    // A repeated source or k would measure one configuration twice under two rows.
    for (size_t i = 0; i < out.size(); ++i)
        for (size_t j = i + 1; j < out.size(); ++j)
            if (out[i] == out[j]) throw Error("bench: configuration '" + out[i].label() + "' listed twice");
    return out;
}

namespace {

// The result before any measurement: the setup, the machine, and the configurations with the
// baseline first.
BenchResult empty_result(const RunnerOptions& opts) {
    BenchResult result;
    result.machine = detect_machine();
    result.machine.simd = simd_label(opts.simd);
    result.setup.threads = opts.n_threads;
    result.setup.kv_type = opts.kv_type == KvType::F16 ? "f16" : "f32";
    result.setup.device = device_name(opts.device);
    result.setup.temperature = opts.sampler.temperature;
    result.setup.seed = opts.sampler.seed;
    result.setup.repeat = opts.repeat;
    result.setup.warmup = opts.warmup;
    result.setup.max_tokens = opts.max_tokens;
    result.configs.push_back(Config{});
    result.configs.insert(result.configs.end(), opts.configs.begin(), opts.configs.end());
    return result;
}

// The measuring loop: the engine, the items' prompts, and the progress it reports.
class Measurement {
public:
    Measurement(const BenchModels& models, const std::vector<WorkItem>& items, const RunnerOptions& opts,
                const std::vector<Config>& configs, const ProgressFn& progress)
        : items_(items), opts_(opts), configs_(configs), progress_(progress), engine_(models, opts) {
        const Tokenizer& tok = models.target->tokenizer();
        prompts_.reserve(items.size());
        for (const auto& it : items) prompts_.push_back(tok.encode(it.prompt));
        prog_.items_total = static_cast<int64_t>(items.size());
        for (const auto& it : items)
            for (const auto& c : configs)
                if (applies(c, it)) prog_.runs_total += opts.repeat;
    }

    void report(const std::string& current) {
        if (!progress_) return;
        prog_.elapsed_seconds = std::chrono::duration<double>(Clock::now() - start_).count();
        prog_.current = current;
        progress_(prog_);
    }

    // Caches, page tables and branch predictors see every code path once before any timing
    // counts: each configuration on the first item it applies to.
    void warm_up() {
        for (int w = 0; w < opts_.warmup; ++w)
            for (const auto& c : configs_)
                for (size_t i = 0; i < items_.size(); ++i)
                    if (applies(c, items_[i])) {
                        report("warm-up: " + c.label());
                        run_checked(c, items_[i], prompts_[i]);
                        break;
                    }
    }

    // Every repeat of every configuration on item i, then the lossless check of its outputs.
    ItemResult measure_item(size_t i) {
        const WorkItem& it = items_[i];
        const size_t nc = configs_.size();
        ItemResult ir;
        ir.id = it.id;
        ir.kind = it.kind;
        ir.workload = it.workload;
        ir.prompt_tokens = static_cast<int64_t>(prompts_[i].size());
        ir.max_tokens = max_tokens_of(it);
        ir.constrained = !it.grammar.empty();
        ir.cells.resize(nc);
        // outputs[ci][r]: the ids each run produced, compared once the item is done.
        std::vector<std::vector<std::vector<TokenId>>> outputs(nc);
        for (int r = 0; r < opts_.repeat; ++r) {
            // Rotating the order each repeat (and item) keeps any one configuration from always
            // running right after the same neighbour, whose cache footprint it would inherit.
            for (size_t j = 0; j < nc; ++j) {
                const size_t ci = (j + static_cast<size_t>(r) + i) % nc;
                if (!applies(configs_[ci], it)) continue;
                report(it.id + ": " + configs_[ci].label());
                Outcome o = run_checked(configs_[ci], it, prompts_[i]);
                ir.cells[ci].repeats.push_back(o.sample);
                outputs[ci].push_back(std::move(o.tokens));
                ++prog_.runs_done;
            }
        }
        check_lossless(ir, outputs);
        ++prog_.items_done;
        return ir;
    }

    Engine& engine() { return engine_; }

private:
    int64_t max_tokens_of(const WorkItem& it) const { return opts_.max_tokens > 0 ? opts_.max_tokens : it.max_tokens; }

    Outcome run_checked(const Config& c, const WorkItem& it, const std::vector<TokenId>& prompt) {
        try {
            return engine_.run(c, it, prompt, max_tokens_of(it));
        } catch (const Error& e) {
            throw Error(e.code(), "bench: item '" + it.id + "', " + c.label() + ": " + e.what());
        }
    }

    // Every run, the baseline's own repeats included, must reproduce the baseline's first output
    // exactly; each cell keeps its first output.
    void check_lossless(ItemResult& ir, std::vector<std::vector<std::vector<TokenId>>>& outputs) {
        const std::vector<TokenId> expected = outputs[0].front(); // a copy: outputs are moved below
        engine_.remember(expected); // the baseline's output, the one every configuration must produce
        for (size_t ci = 0; ci < outputs.size(); ++ci) {
            Cell& cell = ir.cells[ci];
            for (size_t r = 0; r < outputs[ci].size(); ++r) {
                const int64_t d = first_difference(expected, outputs[ci][r]);
                if (d >= 0 && cell.lossless()) {
                    cell.first_difference = d;
                    cell.failed_repeat = static_cast<int64_t>(r);
                }
            }
            if (!outputs[ci].empty()) cell.output = std::move(outputs[ci].front());
        }
    }

    const std::vector<WorkItem>& items_;
    const RunnerOptions& opts_;
    const std::vector<Config>& configs_;
    const ProgressFn& progress_;
    Engine engine_;
    std::vector<std::vector<TokenId>> prompts_;
    Progress prog_;
    const Clock::time_point start_ = Clock::now();
};

} // namespace

BenchResult run_bench(const BenchModels& models, const std::vector<WorkItem>& items, const RunnerOptions& opts,
                      const ProgressFn& progress) {
    validate(models, items, opts);
    BenchResult result = empty_result(opts);
    Measurement m(models, items, opts, result.configs, progress);
    m.warm_up();
    for (size_t i = 0; i < items.size(); ++i) {
        result.items.push_back(m.measure_item(i));
        m.report(items[i].id);
    }
    if (opts.cost_curve) {
        m.report("verification cost curve");
        result.cost_prefix = opts.cost.prefix;
        result.cost_curve = measure_cost_curve(m.engine().target(), opts.cost);
    }
    return result;
}

MachineInfo detect_machine() {
    MachineInfo m;
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) {
                m.cpu_model = line.substr(colon + 1);
                m.cpu_model.erase(0, m.cpu_model.find_first_not_of(" \t"));
            }
            break;
        }
    }
    std::ifstream load("/proc/loadavg");
    if (double l = 0; load >> l) m.load_average = l;
    m.simd = simd_name(detect_simd());
    m.cores = static_cast<int>(std::thread::hardware_concurrency());
    return m;
}

std::string simd_label(SimdLevel used) {
    if (used == detect_simd()) return simd_name(used);
    return std::string(simd_name(used)) + " (capped; CPU " + simd_name(detect_simd()) + ")";
}

} // namespace rwd::bench
