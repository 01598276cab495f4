// `rewind bench`: measures plain against speculative decoding on a workload (or one prompt) and
// prints a Markdown table; --json and --svg keep every raw figure and a plot. --cost-curve alone
// measures prefill/decode speed and the cost of one forward pass over n new tokens (what decides
// whether verifying k guesses at once pays). The measuring logic lives in rwd::bench.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "options.h"
#include "rewind/device.h"
#include "rewind/error.h"
#include "rewind/file_io.h"
#include "rewind/model.h"
#include "rewind/bench/bench_batch.h"
#include "rewind/bench/bench_concurrency.h"
#include "rewind/bench/bench_cost.h"
#include "rewind/bench/bench_report.h"
#include "rewind/bench/bench_runner.h"
#include "rewind/bench/bench_workload.h"
#include "rewind/bench/bench_memory.h"
#include "rewind/generate.h"
#include "rewind/speculate/reference_source.h"

namespace rwd::cli {

namespace {

namespace rb = rwd::bench;

struct BenchCliOptions {
    ModelFlags model;
    SpecSweepFlags spec;
    SamplerOptions sampling;
    ConstraintFlags constraint; // for the items without a constraint of their own
    WorkloadFlags workload;
    PromptFlags prompt;
    OutputFlags output{.n_predict = 0, .stop = {}, .ignore_eos = false}; // -n: tokens per item (0: the workload's max_tokens; 128 for -p)
    bool adaptive_only = false, k_cost = false;
    int repeat = 3, warmup = 1;
    std::string json_path, svg_path, markdown_path;
    bool progress = false, no_progress = false;
    bool repeat_given = false;
    bool cost_only = false, no_cost = false;
    std::vector<int64_t> cost_n{std::begin(rb::kCostRows), std::end(rb::kCostRows)};
    int64_t cost_prefix = 100;
    int cost_repeat = 25;
    int64_t prompt_tokens = 128, decode_tokens = 64; // --cost-curve's throughput measurement
    int64_t long_prefix = 4096;  // --cost-curve's second curve (0: none)
    bool long_prefill = false;   // fill the long prefix by a prefill pass (else seeded K/V values)
    int64_t bandwidth_mib = 512; // --cost-curve's memory bandwidth buffer (0: not measured)
    int cost_warmup = 6;
    std::string project;         // a saved workload report whose tokens per pass to project
    std::string from_json; // redraw the reports of a saved --json file instead of measuring
    std::vector<int> concurrency; // --concurrency: continuous-batching mode at these levels
    BatchingFlags batching;       // --concurrency: the batch decoder's settings
};

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
    return out;
}

// Shell-quotes an argument only when it needs it, so the recorded command stays readable.
std::string arg(const std::string& s) {
    if (!s.empty() && s.find_first_of(" \t\n'\"\\$`*?;&|<>(){}[]!#~") == std::string::npos) return s;
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string joined(const std::vector<int>& v) {
    std::vector<std::string> parts;
    for (int x : v) parts.push_back(std::to_string(x));
    return join(parts, ",");
}

// The sampling flags that differ from their defaults (the temperature and seed are always
// written by the caller).
std::string sampling_args(const SamplerOptions& s) {
    const SamplerOptions d;
    std::ostringstream c;
    if (s.top_k != d.top_k) c << " --top-k " << s.top_k;
    if (s.top_p != d.top_p) c << " --top-p " << s.top_p;
    if (s.min_p != d.min_p) c << " --min-p " << s.min_p;
    if (s.repeat_penalty != d.repeat_penalty) c << " --repeat-penalty " << s.repeat_penalty;
    if (s.repeat_last_n != d.repeat_last_n) c << " --repeat-last-n " << s.repeat_last_n;
    if (s.frequency_penalty != d.frequency_penalty) c << " --frequency-penalty " << s.frequency_penalty;
    if (s.presence_penalty != d.presence_penalty) c << " --presence-penalty " << s.presence_penalty;
    for (const auto& [id, bias] : s.logit_bias) c << " --logit-bias " << id << "=" << bias;
    return c.str();
}

// The cache type --kv-type picked, by name.
const char* kv_name(const BenchCliOptions& o) { return kv_type_of(o.batching.kv_type) == KvType::F16 ? "f16" : "f32"; }

// The command that reproduces this run, with every setting spelled out (defaults included), so
// the JSON and Markdown carry it whatever the user typed.
std::string canonical_command(const BenchCliOptions& o, const std::string& model) {
    std::ostringstream c;
    c << "rewind bench -m " << arg(model);
    if (!o.spec.draft.empty()) c << " --draft " << arg(o.spec.draft);
    if (!o.workload.workloads.empty()) {
        for (const auto& w : o.workload.workloads) c << " --workload " << arg(w);
        if (o.workload.items > 0) c << " --items " << o.workload.items;
    } else {
        c << " -p " << arg(o.prompt.prompt);
        for (const auto& r : o.spec.refs) c << " --ref " << arg(r);
    }
    if (o.output.n_predict > 0) c << " -n " << o.output.n_predict;
    if (!o.constraint.grammar_file.empty()) c << " --grammar " << arg(o.constraint.grammar_file);
    if (!o.constraint.json_schema.empty()) c << " --json-schema " << arg(o.constraint.json_schema);
    if (!o.constraint.regex.empty()) c << " --regex " << arg(o.constraint.regex);
    if (o.constraint.json_whitespace != "compact") c << " --json-whitespace " << o.constraint.json_whitespace;
    c << " --spec " << join(o.spec.spec, ",") << " --k " << joined(o.spec.ks);
    if (!o.spec.trees.empty()) c << " --tree " << joined(o.spec.trees);
    if (o.spec.adaptive) c << " --adaptive";
    if (o.adaptive_only) c << " --adaptive-only";
    if (o.k_cost) c << " --k-cost";
    c << " --repeat " << o.repeat << " --warmup " << o.warmup << " -t " << o.model.threads << " --kv-type " << kv_name(o);
    if (o.model.device != "cpu") c << " --device " << o.model.device;
    if (!o.model.simd.empty()) c << " --simd " << o.model.simd;
    c << " --temp " << o.sampling.temperature << " --seed " << o.sampling.seed << sampling_args(o.sampling);
    if (o.no_cost) c << " --no-cost-curve";
    else c << " --prefix " << o.cost_prefix << " --cost-repeat " << o.cost_repeat;
    return c.str();
}

void write_file(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    if (!f) throw Error(ErrorCode::io, "cannot write '" + path + "'");
    f << text;
    if (!f.flush()) throw Error(ErrorCode::io, "cannot write '" + path + "'");
}

// Redraws one stderr line at most ten times a second; finish() leaves the cursor on a fresh line.
class ProgressLine {
public:
    void update(const rb::Progress& p) {
        const auto now = std::chrono::steady_clock::now();
        if (drawn_ && now - last_ < std::chrono::milliseconds(100) && p.runs_done < p.runs_total) return;
        last_ = now;
        drawn_ = true;
        std::fprintf(stderr, "\r%s\x1b[K", rb::format_progress(p).c_str());
        std::fflush(stderr);
    }
    void finish() {
        if (drawn_) std::fprintf(stderr, "\r\x1b[K");
        drawn_ = false;
    }

private:
    std::chrono::steady_clock::time_point last_{};
    bool drawn_ = false;
};

int64_t max_of(const std::vector<int64_t>& ns) {
    if (ns.empty()) throw Error("bench: --n is empty");
    int64_t m = 0;
    for (int64_t n : ns) {
        if (n < 1) throw Error("bench: --n wants positive integers, got " + std::to_string(n));
        m = std::max(m, n);
    }
    return m;
}

// --cost-curve's reproducing command, every setting spelled out.
std::string cost_curve_command(const BenchCliOptions& o, const std::string& model_path, const Device& device,
                               SimdLevel simd, int repeat) {
    std::vector<std::string> ns;
    for (int64_t n : o.cost_n) ns.push_back(std::to_string(n));
    return "rewind bench --cost-curve -m " + arg(model_path) + " -t " + std::to_string(o.model.threads) +
           (device.kind == DeviceKind::Cpu ? std::string() : " --device " + device_name(device)) +
           (o.model.simd.empty() ? std::string() : " --simd " + std::string(simd_name(simd))) + " --n " +
           join(ns, ",") + " --prefix " + std::to_string(o.cost_prefix) + " --repeat " + std::to_string(repeat) +
           " --prompt-tokens " + std::to_string(o.prompt_tokens) + " --decode-tokens " +
           std::to_string(o.decode_tokens) + " --long-prefix " + std::to_string(o.long_prefix) +
           (o.long_prefill ? " --long-prefill" : "") + " --bandwidth-mib " + std::to_string(o.bandwidth_mib) +
           " --cost-warmup " + std::to_string(o.cost_warmup) + " --kv-type " + std::string(kv_name(o)) +
           (o.project.empty() ? std::string() : " --project " + arg(o.project));
}

// The prefill rate each pass's floor divides its tokens by (rb::dense_pass_floor): the throughput
// run's when its prompt has rb::kFloorPromptTokens tokens, else a prefill of that many of its own;
// 0 when the model's context is shorter.
double floor_prefill_rate(const Model& model, Context& ctx, const rb::Throughput& measured, int rounds) {
    const auto n = static_cast<double>(rb::kFloorPromptTokens);
    if (measured.prompt_tokens == rb::kFloorPromptTokens && measured.prefill_seconds > 0) return n / measured.prefill_seconds;
    if (rb::kFloorPromptTokens + 2 > model.hparams().n_ctx_train) return 0;
    rb::ThroughputOptions t;
    t.prompt_tokens = rb::kFloorPromptTokens;
    t.decode_tokens = 1;
    t.rounds = rounds;
    const rb::Throughput p = rb::measure_throughput(ctx, t);
    return p.prefill_seconds > 0 ? n / p.prefill_seconds : 0;
}

// --cost-curve's measurements into `r`: the memory bandwidth (first, while nothing else of ours
// runs), prefill and decode speed, the cost curve and the long-prefix one, and --project's
// projection.
void measure_cost(const BenchCliOptions& o, const Model& model, Context& ctx, int repeat, int64_t max_n,
                  rb::BenchResult& r) {
    if (o.bandwidth_mib > 0) {
        const int64_t bytes = o.bandwidth_mib << 20;
        r.scale.bandwidth_1 = rb::measure_memory_bandwidth(1, bytes);
        if (o.model.threads > 1) r.scale.bandwidth_n = rb::measure_memory_bandwidth(o.model.threads, bytes);
    }
    r.scale.weight_bytes_per_token = rb::weight_bytes_per_token(model);
    // The model's peak (its load), then the measurement's once the probe's buffers are gone.
    const int64_t load_peak = rb::peak_resident_bytes();
    rb::reset_peak_resident();
    const KvType kv = kv_type_of(o.batching.kv_type);
    const rb::ExpertBytes eb = rb::expert_bytes(model);
    r.scale.moe_dense_bytes = eb.dense;
    r.scale.moe_expert_bytes = eb.per_expert;
    r.scale.moe_layers = model.hparams().is_moe() ? model.hparams().n_layer : 0;
    rb::ThroughputOptions t;
    t.kv_type = kv;
    t.prompt_tokens = o.prompt_tokens;
    t.decode_tokens = o.decode_tokens;
    t.rounds = std::max(3, repeat / 5);
    r.throughput = rb::measure_throughput(ctx, t);
    r.scale.floor_prefill_tokens_per_s = floor_prefill_rate(model, ctx, r.throughput, t.rounds);
    rb::CostCurveOptions c;
    c.kv_type = kv;
    c.max_n = max_n;
    c.prefix = o.cost_prefix;
    c.repeat = repeat;
    c.warmup = o.cost_warmup;
    r.cost_prefix = c.prefix;
    r.cost_curve = rb::measure_cost_curve(ctx, c);
    if (o.long_prefix > 0) {
        // Clamped so that the longest pass still fits the model's context (the report says so).
        r.scale.long_prefix_asked = o.long_prefix;
        r.scale.long_prefix = std::min(o.long_prefix, model.hparams().n_ctx_train - max_n);
        if (r.scale.long_prefix > c.prefix) {
            c.prefix = r.scale.long_prefix;
            c.seeded_prefix = !o.long_prefill;
            r.scale.long_prefix_seeded = c.seeded_prefix;
            r.scale.long_curve = rb::measure_cost_curve(ctx, c);
        }
    }
    r.setup.peak_rss_bytes = std::max(load_peak, rb::peak_resident_bytes());
    if (!o.project.empty()) {
        std::ifstream f(o.project, std::ios::binary);
        if (!f) throw Error(ErrorCode::io, "cannot open '" + o.project + "'");
        std::ostringstream text;
        text << f.rdbuf();
        const rb::BenchResult measured = rb::from_json(text.str(), o.project);
        r.scale.projection_source =
            o.project + " (" + std::filesystem::path(measured.setup.model_path).filename().string() + ")";
        r.scale.projections = rb::project_speedups(rb::summarize_configs(measured), r.cost_curve, r.scale.long_curve);
    }
}

// The model line (and on a GPU, the decode's share of the peak memory bandwidth: decode is
// bound by reading the weights, bytes per token x tokens/s).
void print_cost_heading(const rb::BenchResult& r, const Model& model, const std::string& model_path,
                        const Device& device) {
    const auto& hp = model.hparams();
    std::printf("model: %s (%s, %lld layers, n_embd %lld, weights %s), SIMD %s\n\n", model_path.c_str(),
                hp.architecture.c_str(), static_cast<long long>(hp.n_layer), static_cast<long long>(hp.n_embd),
                dtype_name(model.layers.at(0).wq.type), r.machine.simd.c_str());
    if (device.kind != DeviceKind::Cuda) return;
    const DeviceDescription dd = describe_device(device);
    const double gbs = double(r.scale.weight_bytes_per_token) * r.throughput.decode_tokens_per_s() / 1e9;
    std::printf("device: %s (%s), peak memory bandwidth %.0f GB/s; decode reads %.2f GB/token at %.1f tokens/s "
                "= %.0f GB/s (%.0f%% of peak)\n\n",
                r.setup.device.c_str(), dd.name.c_str(), dd.peak_bandwidth_gbs,
                double(r.scale.weight_bytes_per_token) / 1e9, r.throughput.decode_tokens_per_s(), gbs,
                dd.peak_bandwidth_gbs > 0 ? 100.0 * gbs / dd.peak_bandwidth_gbs : 0.0);
}

int run_cost_curve(const BenchCliOptions& o, const std::string& model_path) {
    const int64_t max_n = max_of(o.cost_n);
    // In this mode --repeat (when given) counts timed passes, as --cost-repeat does.
    const int repeat = o.repeat_given ? o.repeat : o.cost_repeat;
    if (o.long_prefix < 0) throw Error(ErrorCode::argument, "bench: --long-prefix must not be negative");
    if (o.bandwidth_mib < 0) throw Error(ErrorCode::argument, "bench: --bandwidth-mib must not be negative");
    if (o.cost_warmup < 0) throw Error(ErrorCode::argument, "bench: --cost-warmup must not be negative");
    auto model = Model::load(model_path, o.model.model_options());
    ContextOptions copts = o.model.context_options();
    copts.max_batch = std::max<int64_t>(max_n, 256);
    Context ctx(model, copts);

    rb::BenchResult r;
    r.setup.model_path = model_path;
    r.setup.threads = o.model.threads;
    r.setup.device = device_name(copts.device);
    r.setup.repeat = repeat;
    r.setup.kv_type = kv_name(o);
    r.setup.command_line = cost_curve_command(o, model_path, copts.device, copts.simd, repeat);
    r.machine = rb::detect_machine();
    r.machine.simd = rb::simd_label(copts.simd);
    measure_cost(o, *model, ctx, repeat, max_n, r);

    print_cost_heading(r, *model, model_path, copts.device);
    std::ostringstream md;
    rb::write_cost_markdown(md, r, o.cost_n);
    md << "\n`" << r.setup.command_line << "`\n";
    std::cout << md.str() << std::flush;
    if (!o.json_path.empty()) write_file(o.json_path, rb::to_json(r) + "\n");
    return 0;
}

// Writes the Markdown report to stdout (and --markdown), --json and --svg; returns 2 when the
// lossless check failed, so scripts and CI notice.
int emit_reports(const rb::BenchResult& r, const BenchCliOptions& o) {
    std::ostringstream md;
    rb::write_markdown(md, r);
    std::cout << md.str() << std::flush;
    if (!o.markdown_path.empty()) write_file(o.markdown_path, md.str());
    if (!o.json_path.empty()) write_file(o.json_path, rb::to_json(r) + "\n");
    if (!o.svg_path.empty()) {
        std::ostringstream svg;
        rb::write_svg(svg, r);
        write_file(o.svg_path, svg.str());
    }
    if (!r.lossless()) {
        for (const auto& f : rb::lossless_failures(r))
            std::fprintf(stderr, "rewind bench: LOSSLESS CHECK FAILED: item %s, %s: first difference at generated token %lld (repeat %lld)\n",
                         f.item.c_str(), f.config.c_str(), static_cast<long long>(f.position),
                         static_cast<long long>(f.repeat));
        return 2;
    }
    return 0;
}


// --concurrency: the sweep of rwd::bench (the first --spec source at the largest --k), its
// table on stdout and each request that differed from its plain decoding on stderr.
int run_concurrency(const BenchCliOptions& o, const std::string& model_path) {
    if (o.workload.workloads.empty()) throw Error("bench: --concurrency needs --workload FILE");
    if (o.spec.spec.size() != 1)
        throw Error("bench: --concurrency measures one --spec source, got " + std::to_string(o.spec.spec.size()));
    if (o.spec.ks.empty()) throw Error("bench: --k is empty");
    if (o.spec.trees.size() > 1)
        throw Error("bench: --concurrency measures one --tree value, got " + std::to_string(o.spec.trees.size()));
    rb::ConcurrencyOptions co;
    co.levels = o.concurrency;
    co.repeat = o.repeat;
    co.plain = o.batching.batch_options("bench", o.sampling, o.output.n_predict);
    std::vector<rb::WorkItem> items = o.workload.load();
    constrain_items(items, o.constraint);
    auto model = Model::load(model_path, o.model.model_options());
    Context ctx(model, o.model.context_options());
    if (!o.spec.draft.empty()) co.plain.draft = Model::load(o.spec.draft, o.model.model_options());
    co.spec = co.plain;
    co.spec.spec = o.spec.spec.front();
    co.spec.k = o.spec.ks.back();
    co.spec.adaptive = o.spec.adaptive || o.adaptive_only;
    co.spec.branches = o.spec.trees.empty() ? 0 : o.spec.trees.front();

    const rb::ConcurrencySweep sweep = rb::run_concurrency_sweep(ctx, items, co);
    for (const rb::ConcurrencyMismatch& m : sweep.mismatches)
        std::fprintf(stderr, "rewind bench: LOSSLESS CHECK FAILED: item %s, %s at concurrency %d%s%s\n", m.item.c_str(),
                     m.what.c_str(), m.concurrency, m.error.empty() ? "" : ": ", m.error.c_str());
    char heading[1024];
    std::snprintf(heading, sizeof heading,
                  "model: %s, %zu requests, %d threads, %s, repeat %d (medians), prefill chunk %lld, pass tokens "
                  "%lld%s\n",
                  model_path.c_str(), items.size(), o.model.threads, o.sampling.greedy() ? "greedy" : "sampled",
                  o.repeat, static_cast<long long>(o.batching.prefill_chunk),
                  static_cast<long long>(o.batching.pass_tokens), o.batching.cost_model ? ", cost model" : "");
    std::ostringstream md;
    rb::write_concurrency_markdown(md, sweep, co, heading);
    std::cout << md.str() << std::flush;
    return sweep.mismatches.empty() ? 0 : 2;
}

// One item from -p (and its --ref documents).
rb::WorkItem prompt_item(const BenchCliOptions& o) {
    if (o.prompt.prompt.empty()) throw Error("bench: give --workload FILE or -p PROMPT");
    rb::WorkItem item;
    item.id = "prompt";
    item.workload = "prompt";
    item.prompt = o.prompt.prompt;
    for (const auto& r : o.spec.refs) item.references.push_back(speculate::read_text_file(r));
    item.max_tokens = o.output.n_predict > 0 ? o.output.n_predict : 128;
    return item;
}

rb::RunnerOptions runner_options(const BenchCliOptions& o) {
    std::vector<rb::Source> sources;
    for (const auto& s : o.spec.spec)
        if (s != "none") sources.push_back(rb::parse_source(s)); // plain decoding: the baseline, always run
    const rb::KModes modes =
        o.adaptive_only ? rb::KModes::Adaptive : o.spec.adaptive ? rb::KModes::Both : rb::KModes::Fixed;
    rb::RunnerOptions ro;
    ro.configs = rb::make_configs(sources, o.spec.ks, modes, o.spec.trees, o.k_cost);
    ro.repeat = o.repeat;
    ro.warmup = o.warmup;
    const ContextOptions copts = o.model.context_options();
    ro.n_threads = copts.n_threads;
    ro.device = copts.device;
    ro.simd = copts.simd;
    ro.sampler = o.sampling;
    ro.max_tokens = o.output.n_predict;
    ro.cost_curve = !o.no_cost;
    ro.cost.prefix = o.cost_prefix;
    ro.cost.max_n = std::max<int64_t>(max_of(o.cost_n), 17);
    ro.cost.repeat = o.cost_repeat;
    ro.cost.warmup = o.cost_warmup;
    ro.cost.kv_type = ro.kv_type = kv_type_of(o.batching.kv_type);
    return ro;
}

// The workload (or -p) against every configuration, with the progress line on a terminal.
int run_bench(const BenchCliOptions& o) {
    const std::string model_path = o.model.model.empty() ? default_model_path() : o.model.model;
    if (!o.concurrency.empty()) return run_concurrency(o, model_path);
    if (o.cost_only) return run_cost_curve(o, model_path);
    if (!o.from_json.empty()) {
        return emit_reports(rb::from_json(read_file_limited(o.from_json, kMaxWorkloadFileBytes, "bench JSON file"),
                                          o.from_json), o);
    }
    std::vector<rb::WorkItem> items =
        o.workload.workloads.empty() ? std::vector<rb::WorkItem>{prompt_item(o)} : o.workload.load();
    constrain_items(items, o.constraint);
    const rb::RunnerOptions ro = runner_options(o);
    rb::BenchModels models;
    models.target = Model::load(model_path, o.model.model_options());
    if (!o.spec.draft.empty()) models.draft = Model::load(o.spec.draft, o.model.model_options());

    const bool show = !o.no_progress && (o.progress || isatty(STDERR_FILENO));
    ProgressLine line;
    rb::ProgressFn on_progress;
    if (show) on_progress = [&line](const rb::Progress& p) { line.update(p); };
    rb::BenchResult r;
    try {
        r = rb::run_bench(models, items, ro, on_progress);
    } catch (...) {
        line.finish();
        throw;
    }
    line.finish();

    r.setup.model_path = model_path;
    r.setup.draft_path = o.spec.draft;
    r.setup.workloads = o.workload.workloads.empty() ? std::vector<std::string>{"prompt"} : o.workload.workloads;
    r.setup.items_per_workload = o.workload.items;
    r.setup.command_line = canonical_command(o, model_path);
    r.setup.peak_rss_bytes = rb::peak_resident_bytes();
    return emit_reports(r, o);
}

// What to measure: the workload or prompt and the configurations (the shared groups' flags) and
// how often.
void add_measure_flags(CLI::App& cmd, BenchCliOptions& o) {
    add_model_flags(cmd, o.model);
    auto* wl = add_workload_flags(cmd, o.workload);
    auto* p = add_prompt_flags(cmd, o.prompt.prompt, nullptr);
    wl->excludes(p);
    add_output_flags(cmd, o.output, 0);
    auto* ad = add_spec_sweep_flags(cmd, o.spec);
    cmd.get_option("--ref")->needs(p);
    cmd.add_flag("--adaptive-only", o.adaptive_only, "Measure adaptive k only")->excludes(ad);
    cmd.add_flag("--k-cost", o.k_cost,
                 "Also measure the cost policy: the guesses (chain or tree) that pay for their rows, at most k");
    add_sampling_flags(cmd, o.sampling);
    add_constraint_flags(cmd, o.constraint, 0);
    cmd.add_option("--warmup", o.warmup, "Untimed warm-up rounds")->capture_default_str();
}

// The reports: files beside the Markdown on stdout, the progress line, or a saved run redrawn.
void add_report_flags(CLI::App& cmd, BenchCliOptions& o) {
    cmd.add_option("--json", o.json_path, "Write every raw figure, the machine and settings as JSON");
    cmd.add_option("--svg", o.svg_path, "Write a plot of speedup and tokens per pass against k");
    cmd.add_option("--markdown", o.markdown_path, "Also write the Markdown report to this file");
    auto* pr = cmd.add_flag("--progress", o.progress, "Show the progress line even when stderr is not a terminal");
    cmd.add_flag("--no-progress", o.no_progress, "Never show the progress line")->excludes(pr);
    cmd.add_option("--from-json", o.from_json,
                   "Redraw the reports (Markdown, --svg, --json) of a saved --json file; measures nothing");
}

// The cost curve: after a workload, or alone with --cost-curve.
void add_cost_flags(CLI::App& cmd, BenchCliOptions& o) {
    auto* cc = cmd.add_flag("--cost-curve", o.cost_only,
                            "Only measure the runtime: prefill and decode speed, and the cost of one forward pass "
                            "over n new tokens");
    cmd.add_flag("--no-cost-curve", o.no_cost, "Skip the cost curve after the workload")->excludes(cc);
    cmd.add_option("--n", o.cost_n, "Pass sizes the cost table shows (comma-separated; the curve is measured up to "
                                    "the largest)")->delimiter(',')->capture_default_str();
    cmd.add_option("--prefix,--cost-prefix", o.cost_prefix, "Tokens already cached before each timed pass of the cost curve")
        ->capture_default_str();
    cmd.add_option("--cost-repeat", o.cost_repeat, "Timed passes per n of the cost curve")->capture_default_str();
    cmd.add_option("--prompt-tokens", o.prompt_tokens, "--cost-curve: prompt length of the prefill measurement")
        ->capture_default_str();
    cmd.add_option("--decode-tokens", o.decode_tokens, "--cost-curve: tokens decoded one by one after the prompt")
        ->capture_default_str();
    cmd.add_option("--long-prefix", o.long_prefix,
                   "--cost-curve: cached tokens of a second cost curve (clamped to the model's context; 0: none)")
        ->capture_default_str();
    cmd.add_flag("--long-prefill", o.long_prefill,
                 "--cost-curve: fill the long prefix by a prefill pass (minutes at 1B scale) instead of seeded K/V "
                 "values (a pass costs the same whatever the cached values)");
    cmd.add_option("--bandwidth-mib", o.bandwidth_mib,
                   "--cost-curve: buffer of the memory bandwidth measurement in MiB (0: do not measure)")
        ->capture_default_str();
    cmd.add_option("--cost-warmup", o.cost_warmup, "Untimed passes of each n before its timed ones, every round")
        ->capture_default_str();
    cmd.add_option("--project", o.project,
                   "--cost-curve: a saved --json workload report; projects its tokens per pass onto this model's cost curve");
}

} // namespace

void register_bench(CLI::App& app, Runner& run) {
    auto o = std::make_shared<BenchCliOptions>();
    CLI::App* cmd = app.add_subcommand(
        "bench", "Measure speculative against plain decoding (speedup, acceptance, lossless check)");
    add_measure_flags(*cmd, *o);
    auto* rep = cmd->add_option("--repeat", o->repeat,
                                "Timed runs per item and configuration, the median kept (with --cost-curve: timed "
                                "passes per n)")->capture_default_str();
    add_report_flags(*cmd, *o);
    add_cost_flags(*cmd, *o);
    add_concurrency_sweep_flag(*cmd, o->concurrency,
                               ": aggregate tokens/s and per-request latency, plain and speculative (first --spec, "
                               "largest --k), each request checked against its own unbatched plain decoding");
    add_batching_flags(*cmd, o->batching, /*with_budget=*/false);
    cmd->callback([o, rep, &run] {
        o->repeat_given = rep->count() > 0;
        run = [o] { return run_bench(*o); };
    });
}

} // namespace rwd::cli
