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
#include "rewind/device.h"
#include "rewind/error.h"
#include "rewind/file_io.h"
#include "rewind/model.h"
#include "rewind/bench/bench_batch.h"
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
    std::string model, draft;
    std::vector<std::string> workloads;
    std::string prompt;
    std::vector<std::string> refs;
    int64_t n_predict = 0;  // -n: tokens per item (overrides the workload's max_tokens)
    int64_t items = 0;      // first N items of each workload file
    std::vector<std::string> spec{"ngram"};
    std::vector<int> ks{2, 4, 8};
    std::vector<int> trees;     // --tree: continuations per node to measure (empty: each source's own)
    bool adaptive = false, adaptive_only = false, k_cost = false;
    int repeat = 3, warmup = 1, threads = 1;
    std::string device = "cpu";
    std::string simd;       // --simd: cap on the CPU kernels' level (empty: the CPU's best)
    float temp = 0.0f;
    uint64_t seed = 0;
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
    bool no_repack = false; // keep Q8_0, Q5_0 and K-quant weights in the file's layout (ModelOptions::repack)
    bool widen_q4 = false; // ModelOptions::widen_q4
    std::vector<int> concurrency; // --concurrency: continuous-batching mode at these levels
    int64_t prefill_chunk = 64;   // --concurrency: prompt tokens per pass
    int64_t pass_tokens = 0;      // --concurrency: pending tokens + guesses per pass (0: max_batch)
    bool cost_model = false;      // --concurrency: guesses only while they pay for their rows
    std::vector<double> pass_cost_ms; // --concurrency: the cost model's a,b in ms (empty: fitted)
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

// The command that reproduces this run, with every setting spelled out (defaults included), so
// the JSON and Markdown carry it whatever the user typed.
std::string canonical_command(const BenchCliOptions& o, const std::string& model) {
    std::ostringstream c;
    c << "rewind bench -m " << arg(model);
    if (!o.draft.empty()) c << " --draft " << arg(o.draft);
    if (!o.workloads.empty()) {
        for (const auto& w : o.workloads) c << " --workload " << arg(w);
        if (o.items > 0) c << " --items " << o.items;
    } else {
        c << " -p " << arg(o.prompt);
        for (const auto& r : o.refs) c << " --ref " << arg(r);
    }
    if (o.n_predict > 0) c << " -n " << o.n_predict;
    std::vector<std::string> ks;
    for (int k : o.ks) ks.push_back(std::to_string(k));
    c << " --spec " << join(o.spec, ",") << " --k " << join(ks, ",");
    if (!o.trees.empty()) {
        std::vector<std::string> ts;
        for (int t : o.trees) ts.push_back(std::to_string(t));
        c << " --tree " << join(ts, ",");
    }
    if (o.adaptive) c << " --adaptive";
    if (o.adaptive_only) c << " --adaptive-only";
    if (o.k_cost) c << " --k-cost";
    c << " --repeat " << o.repeat << " --warmup " << o.warmup << " -t " << o.threads;
    if (o.device != "cpu") c << " --device " << o.device;
    if (!o.simd.empty()) c << " --simd " << o.simd;
    c << " --temp " << o.temp << " --seed " << o.seed;
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

// --simd as a level (the CPU's best when not given); Context refuses one this CPU lacks.
SimdLevel simd_of(const BenchCliOptions& o) { return o.simd.empty() ? detect_simd() : parse_simd(o.simd.c_str()); }

int64_t max_of(const std::vector<int64_t>& ns) {
    if (ns.empty()) throw Error("bench: --n is empty");
    int64_t m = 0;
    for (int64_t n : ns) {
        if (n < 1) throw Error("bench: --n wants positive integers, got " + std::to_string(n));
        m = std::max(m, n);
    }
    return m;
}

int run_cost_curve(const BenchCliOptions& o, const std::string& model_path) {
    const int64_t max_n = max_of(o.cost_n);
    // In this mode --repeat (when given) counts timed passes, as --cost-repeat does.
    const int repeat = o.repeat_given ? o.repeat : o.cost_repeat;
    if (o.long_prefix < 0) throw Error(ErrorCode::argument, "bench: --long-prefix must not be negative");
    if (o.bandwidth_mib < 0) throw Error(ErrorCode::argument, "bench: --bandwidth-mib must not be negative");
    if (o.cost_warmup < 0) throw Error(ErrorCode::argument, "bench: --cost-warmup must not be negative");
    auto model = Model::load(model_path, ModelOptions{.repack = !o.no_repack, .widen_q4 = o.widen_q4});
    const int64_t hp_ctx = model->hparams().n_ctx_train;
    const Device device = parse_device(o.device);
    const SimdLevel simd = simd_of(o);
    Context ctx(model, ContextOptions{.n_threads = o.threads, .max_batch = std::max<int64_t>(max_n, 256), .device = device,
                                      .simd = simd});

    rb::BenchResult r;
    r.setup.model_path = model_path;
    r.setup.threads = o.threads;
    r.setup.device = device_name(device);
    r.setup.repeat = repeat;
    std::vector<std::string> ns;
    for (int64_t n : o.cost_n) ns.push_back(std::to_string(n));
    r.setup.command_line = "rewind bench --cost-curve -m " + arg(model_path) + " -t " + std::to_string(o.threads) +
                           (device.kind == DeviceKind::Cpu ? std::string() : " --device " + device_name(device)) +
                           (o.simd.empty() ? std::string() : " --simd " + std::string(simd_name(simd))) +
                           " --n " + join(ns, ",") + " --prefix " + std::to_string(o.cost_prefix) + " --repeat " +
                           std::to_string(repeat) + " --prompt-tokens " + std::to_string(o.prompt_tokens) +
                           " --decode-tokens " + std::to_string(o.decode_tokens) + " --long-prefix " +
                           std::to_string(o.long_prefix) + (o.long_prefill ? " --long-prefill" : "") + " --bandwidth-mib " + std::to_string(o.bandwidth_mib) +
                           " --cost-warmup " + std::to_string(o.cost_warmup) +
                           (o.project.empty() ? std::string() : " --project " + arg(o.project));
    r.machine = rb::detect_machine();
    r.machine.simd = rb::simd_label(simd);

    // The machine's bandwidth first, while nothing else of ours runs.
    if (o.bandwidth_mib > 0) {
        const int64_t bytes = o.bandwidth_mib << 20;
        r.scale.bandwidth_1 = rb::measure_memory_bandwidth(1, bytes);
        if (o.threads > 1) r.scale.bandwidth_n = rb::measure_memory_bandwidth(o.threads, bytes);
    }
    r.scale.weight_bytes_per_token = rb::weight_bytes_per_token(*model);

    rb::ThroughputOptions t;
    t.prompt_tokens = o.prompt_tokens;
    t.decode_tokens = o.decode_tokens;
    t.rounds = std::max(3, repeat / 5);
    r.throughput = rb::measure_throughput(ctx, t);
    rb::CostCurveOptions c;
    c.max_n = max_n;
    c.prefix = o.cost_prefix;
    c.repeat = repeat;
    c.warmup = o.cost_warmup;
    r.cost_prefix = c.prefix;
    r.cost_curve = rb::measure_cost_curve(ctx, c);
    if (o.long_prefix > 0) {
        // Clamped so that the longest pass still fits the model's context (the report says so).
        r.scale.long_prefix_asked = o.long_prefix;
        r.scale.long_prefix = std::min(o.long_prefix, hp_ctx - max_n);
        if (r.scale.long_prefix > c.prefix) {
            c.prefix = r.scale.long_prefix;
            c.seeded_prefix = !o.long_prefill;
            r.scale.long_prefix_seeded = c.seeded_prefix;
            r.scale.long_curve = rb::measure_cost_curve(ctx, c);
        }
    }
    if (!o.project.empty()) {
        std::ifstream f(o.project, std::ios::binary);
        if (!f) throw Error(ErrorCode::io, "cannot open '" + o.project + "'");
        std::ostringstream text;
        text << f.rdbuf();
        const rb::BenchResult measured = rb::from_json(text.str(), o.project);
        r.scale.projection_source = o.project + " (" + std::filesystem::path(measured.setup.model_path).filename().string() + ")";
        r.scale.projections = rb::project_speedups(rb::summarize_configs(measured), r.cost_curve, r.scale.long_curve);
    }

    const auto& hp = model->hparams();
    std::printf("model: %s (%s, %lld layers, n_embd %lld, weights %s), SIMD %s\n\n", model_path.c_str(),
                hp.architecture.c_str(), static_cast<long long>(hp.n_layer), static_cast<long long>(hp.n_embd),
                dtype_name(model->layers.at(0).wq.type), r.machine.simd.c_str());
    if (device.kind == DeviceKind::Cuda) {
        // Decode is bound by reading the weights: bytes per token x tokens/s against the peak.
        const DeviceDescription dd = describe_device(device);
        const double gbs = double(r.scale.weight_bytes_per_token) * r.throughput.decode_tokens_per_s() / 1e9;
        std::printf("device: %s (%s), peak memory bandwidth %.0f GB/s; decode reads %.2f GB/token at %.1f tokens/s "
                    "= %.0f GB/s (%.0f%% of peak)\n\n",
                    r.setup.device.c_str(), dd.name.c_str(), dd.peak_bandwidth_gbs,
                    double(r.scale.weight_bytes_per_token) / 1e9, r.throughput.decode_tokens_per_s(), gbs,
                    dd.peak_bandwidth_gbs > 0 ? 100.0 * gbs / dd.peak_bandwidth_gbs : 0.0);
    }
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


double median_of(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// --concurrency: the workload through the batch decoder at each level, plain and speculative,
// runs interleaved (--repeat rounds, medians); every request's output is checked against its own
// plain, unbatched generate_plain output (also the single-request latency baseline).
int run_concurrency(const BenchCliOptions& o, const std::string& model_path) {
    if (o.workloads.empty()) throw Error("bench: --concurrency needs --workload FILE");
    for (int c : o.concurrency)
        if (c < 1) throw Error("bench: --concurrency wants positive integers, got " + std::to_string(c));
    if (o.repeat < 1) throw Error("bench: --repeat must be >= 1");
    if (o.spec.size() != 1) throw Error("bench: --concurrency measures one --spec source, got " + std::to_string(o.spec.size()));
    if (o.ks.empty()) throw Error("bench: --k is empty");
    if (!o.pass_cost_ms.empty() &&
        (o.pass_cost_ms.size() != 2 || !(o.pass_cost_ms[0] > 0) || !(o.pass_cost_ms[1] > 0) ||
         std::isinf(o.pass_cost_ms[0]) || std::isinf(o.pass_cost_ms[1])))
        throw Error("bench: --pass-cost wants two positive numbers, FIXED_MS,PER_ROW_MS");
    std::vector<rb::WorkItem> items;
    for (const auto& w : o.workloads) {
        auto part = rb::take_first(rb::load_workload(w), o.items);
        items.insert(items.end(), part.begin(), part.end());
    }
    const ModelOptions mo{.repack = !o.no_repack, .widen_q4 = o.widen_q4};
    auto model = Model::load(model_path, mo);
    Context ctx(model, ContextOptions{.n_threads = o.threads, .device = parse_device(o.device), .simd = simd_of(o)});
    SamplerOptions so;
    so.temperature = o.temp;
    so.seed = o.seed;

    // Baseline: each request alone, plain decoding.
    std::vector<std::vector<TokenId>> want(items.size());
    std::vector<double> solo_latency;
    int64_t solo_tokens = 0;
    double solo_seconds = 0;
    for (size_t i = 0; i < items.size(); ++i) {
        KvCache cache(*model);
        GenerateOptions g;
        g.max_tokens = o.n_predict > 0 ? o.n_predict : items[i].max_tokens;
        g.sampler = so;
        const auto r = generate_plain(ctx, cache, model->tokenizer().encode(items[i].prompt), g);
        want[i] = r.tokens;
        solo_latency.push_back(r.prompt_seconds + r.generate_seconds);
        solo_tokens += static_cast<int64_t>(r.tokens.size());
        solo_seconds += r.prompt_seconds + r.generate_seconds;
    }
    const double solo_tps = solo_seconds > 0 ? static_cast<double>(solo_tokens) / solo_seconds : 0.0;
    const double solo_p50 = median_of(solo_latency);

    rb::BatchRunOptions plain;
    plain.sampler = so;
    plain.max_tokens = o.n_predict;
    plain.prefill_chunk = o.prefill_chunk;
    plain.pass_tokens = o.pass_tokens;
    plain.cost_model = o.cost_model;
    if (!o.pass_cost_ms.empty()) {
        plain.pass_fixed_seconds = o.pass_cost_ms[0] * 1e-3;
        plain.pass_row_seconds = o.pass_cost_ms[1] * 1e-3;
    }
    if (!o.draft.empty()) plain.draft = Model::load(o.draft, mo);
    rb::BatchRunOptions spec = plain;
    spec.spec = o.spec.front();
    spec.k = o.ks.back();
    spec.adaptive = o.adaptive || o.adaptive_only;
    if (o.trees.size() > 1) throw Error("bench: --concurrency measures one --tree value, got " + std::to_string(o.trees.size()));
    spec.branches = o.trees.empty() ? 0 : o.trees.front();

    int64_t mismatches = 0;
    auto check = [&](const rb::BatchRun& run, const char* what, int c) {
        for (const rb::BatchRunItem& it : run.items) {
            if (!it.result.failed && it.result.tokens == want[it.index]) continue;
            ++mismatches;
            std::fprintf(stderr, "rewind bench: LOSSLESS CHECK FAILED: item %s, %s at concurrency %d%s%s\n",
                         items[it.index].id.c_str(), what, c, it.result.failed ? ": " : "",
                         it.result.error.c_str());
        }
    };
    struct Row {
        int c;
        std::vector<double> plain_tps, spec_tps, plain_lat, spec_lat, plain_dtps, spec_dtps, plain_stps, spec_stps;
        double spec_tokens_per_pass = 0;
        int64_t spec_rows = 0, spec_emitted = 0, full_passes = 0; // decoding passes with all c requests
    };
    std::vector<Row> rows;
    double c1_plain = 0, c1_plain_decode = 0, c1_plain_steady = 0;
    for (int c : o.concurrency) {
        Row row{c, {}, {}, {}, {}, {}, {}, {}, {}};
        plain.concurrency = spec.concurrency = c;
        int64_t emitted = 0, passes_of = 0;
        for (int rep = 0; rep < o.repeat; ++rep) {
            const rb::BatchRun p = rb::run_batched(ctx, items, plain);
            const rb::BatchRun s = rb::run_batched(ctx, items, spec);
            check(p, "plain batching", c);
            check(s, "speculative batching", c);
            row.plain_tps.push_back(p.tokens_per_second());
            row.spec_tps.push_back(s.tokens_per_second());
            row.plain_dtps.push_back(p.decode_tokens_per_second());
            row.spec_dtps.push_back(s.decode_tokens_per_second());
            const auto at = static_cast<size_t>(c);
            row.plain_stps.push_back(p.decode_tokens_per_second_at(at));
            row.spec_stps.push_back(s.decode_tokens_per_second_at(at));
            if (at < s.decode_levels.size()) {
                row.spec_rows += s.decode_levels[at].rows;
                row.spec_emitted += s.decode_levels[at].tokens;
                row.full_passes += s.decode_levels[at].passes;
            }
            for (const auto& it : p.items) row.plain_lat.push_back(it.result.latency_seconds);
            for (const auto& it : s.items) {
                row.spec_lat.push_back(it.result.latency_seconds);
                emitted += it.result.stats.emitted;
                passes_of += it.result.stats.passes;
            }
        }
        row.spec_tokens_per_pass = passes_of ? static_cast<double>(emitted) / static_cast<double>(passes_of) : 0.0;
        if (c == 1) {
            c1_plain = median_of(row.plain_tps);
            c1_plain_decode = median_of(row.plain_dtps);
            c1_plain_steady = median_of(row.plain_stps);
        }
        rows.push_back(std::move(row));
    }

    std::printf("model: %s, %zu requests, %d threads, %s, repeat %d (medians), prefill chunk %lld, pass tokens %lld%s\n",
                model_path.c_str(), items.size(), o.threads, o.temp > 0 ? "sampled" : "greedy", o.repeat,
                static_cast<long long>(o.prefill_chunk), static_cast<long long>(o.pass_tokens),
                o.cost_model ? ", cost model" : "");
    std::printf("single requests, unbatched plain decoding: %.1f tokens/s, p50 latency %.3f s\n\n", solo_tps, solo_p50);
    std::printf("| concurrency | plain tok/s | vs 1 request | %s k=%d tok/s | spec / plain | tokens per request-pass | "
                "p50 latency plain (s) | p50 latency spec (s) | p50 plain / single | decode plain tok/s | decode vs 1 | "
                "decode spec / plain | all-c decode plain tok/s | all-c vs 1 | all-c spec / plain | all-c spec rows, "
                "tokens per pass |\n",
                spec.spec.c_str(), spec.k);
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Row& r : rows) {
        const double pt = median_of(r.plain_tps), st = median_of(r.spec_tps);
        const double base = c1_plain > 0 ? c1_plain : solo_tps;
        const double pd = median_of(r.plain_dtps), sd = median_of(r.spec_dtps);
        const double ps = median_of(r.plain_stps), ss = median_of(r.spec_stps);
        const double fp = r.full_passes > 0 ? static_cast<double>(r.full_passes) : 1.0;
        std::printf("| %d | %.1f | %.2fx | %.1f | %.2fx | %.2f | %.3f | %.3f | %.2fx | %.1f | %.2fx | %.2fx | %.1f | %.2fx | "
                    "%.2fx | %.1f, %.1f |\n",
                    r.c, pt,
                    base > 0 ? pt / base : 0.0, st, pt > 0 ? st / pt : 0.0, r.spec_tokens_per_pass,
                    median_of(r.plain_lat), median_of(r.spec_lat),
                    solo_p50 > 0 ? median_of(r.plain_lat) / solo_p50 : 0.0, pd,
                    c1_plain_decode > 0 ? pd / c1_plain_decode : 0.0, pd > 0 ? sd / pd : 0.0, ps,
                    c1_plain_steady > 0 ? ps / c1_plain_steady : 0.0, ps > 0 ? ss / ps : 0.0,
                    static_cast<double>(r.spec_rows) / fp, static_cast<double>(r.spec_emitted) / fp);
    }
    std::printf("\n\"tok/s\": all generated tokens over the wall time, prompts included; \"decode\": the passes that "
                "carried no prompt chunk only (tokens they emitted over their time); \"all-c\": the decoding passes that "
                "carried all c requests (the steady state, without ramp-up and tail; 0 if none).\n");
    std::printf("\"vs 1 request\": against concurrency 1 of this run when measured, else unbatched plain decoding. "
                "Lossless: %s.\n",
                mismatches ? "FAILED" : "every request equals its own unbatched plain decoding");
    return mismatches ? 2 : 0;
}

int run_bench(const BenchCliOptions& o) {
    const std::string model_path = o.model.empty() ? default_model_path() : o.model;
    if (!o.concurrency.empty()) return run_concurrency(o, model_path);
    if (o.cost_only) return run_cost_curve(o, model_path);
    if (!o.from_json.empty()) {
        return emit_reports(rb::from_json(read_file_limited(o.from_json, kMaxWorkloadFileBytes, "bench JSON file"),
                                          o.from_json), o);
    }

    std::vector<rb::WorkItem> items;
    std::vector<std::string> sources_used;
    if (!o.workloads.empty()) {
        for (const auto& w : o.workloads) {
            auto part = rb::take_first(rb::load_workload(w), o.items);
            items.insert(items.end(), part.begin(), part.end());
        }
    } else {
        if (o.prompt.empty()) throw Error("bench: give --workload FILE or -p PROMPT");
        rb::WorkItem item;
        item.id = "prompt";
        item.workload = "prompt";
        item.prompt = o.prompt;
        for (const auto& r : o.refs) item.references.push_back(speculate::read_text_file(r));
        item.max_tokens = o.n_predict > 0 ? o.n_predict : 128;
        items.push_back(std::move(item));
    }

    std::vector<rb::Source> sources;
    for (const auto& s : o.spec) sources.push_back(rb::parse_source(s));
    const rb::KModes modes = o.adaptive_only ? rb::KModes::Adaptive : o.adaptive ? rb::KModes::Both : rb::KModes::Fixed;

    rb::RunnerOptions ro;
    ro.configs = rb::make_configs(sources, o.ks, modes, o.trees, o.k_cost);
    ro.repeat = o.repeat;
    ro.warmup = o.warmup;
    ro.n_threads = o.threads;
    ro.device = parse_device(o.device);
    ro.simd = simd_of(o);
    ro.sampler.temperature = o.temp;
    ro.sampler.seed = o.seed;
    ro.max_tokens = o.n_predict;
    ro.cost_curve = !o.no_cost;
    ro.cost.prefix = o.cost_prefix;
    ro.cost.max_n = std::max<int64_t>(max_of(o.cost_n), 17);
    ro.cost.repeat = o.cost_repeat;
    ro.cost.warmup = o.cost_warmup;

    rb::BenchModels models;
    const ModelOptions mo{.repack = !o.no_repack, .widen_q4 = o.widen_q4};
    models.target = Model::load(model_path, mo);
    if (!o.draft.empty()) models.draft = Model::load(o.draft, mo);

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
    r.setup.draft_path = o.draft;
    r.setup.workloads = o.workloads.empty() ? std::vector<std::string>{"prompt"} : o.workloads;
    r.setup.items_per_workload = o.items;
    r.setup.command_line = canonical_command(o, model_path);

    return emit_reports(r, o);
}

} // namespace

void register_bench(CLI::App& app, Runner& run) {
    auto o = std::make_shared<BenchCliOptions>();
    CLI::App* cmd = app.add_subcommand(
        "bench", "Measure speculative against plain decoding (speedup, acceptance, lossless check)");
    cmd->add_option("-m,--model", o->model, "Target GGUF model; default: the bundled model");
    cmd->add_option("--draft", o->draft, "Draft GGUF model for the 'draft' (and 'auto') guess source");
    auto* wl = cmd->add_option("--workload", o->workloads,
                               "JSON-lines workload file {id, kind?, prompt, references?, max_tokens}, at most 64 MiB; repeatable");
    auto* p = cmd->add_option("-p,--prompt", o->prompt, "A single prompt instead of a workload");
    cmd->add_option("--ref", o->refs, "Reference document file for -p (repeatable, at most 16 MiB each)")->needs(p);
    wl->excludes(p);
    cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate per item (default: the workload's max_tokens; 128 for -p)");
    cmd->add_option("--items,--limit", o->items, "Take only the first N items of each workload file");
    cmd->add_option("--spec", o->spec, "Guess sources to measure: ngram, ref, draft, auto, auto-first (auto with its old "
                                       "first-answer-wins policy), suffix (its cache of earlier items' outputs grows "
                                       "item by item) (comma-separated)")
        ->delimiter(',')->capture_default_str();
    cmd->add_option("-k,--k", o->ks, "Guesses per pass to measure (comma-separated)")->delimiter(',')->capture_default_str();
    cmd->add_option("--tree", o->trees,
                    "Continuations per node of the ngram, ref and suffix sources to measure, e.g. 1,4 (1: chains; "
                    "more: token trees verified in one pass; default: each source's own) (comma-separated)")
        ->delimiter(',');
    auto* ad = cmd->add_flag("--adaptive", o->adaptive, "Also measure adaptive k (k the ceiling) next to fixed k");
    cmd->add_flag("--adaptive-only", o->adaptive_only, "Measure adaptive k only")->excludes(ad);
    cmd->add_flag("--k-cost", o->k_cost,
                  "Also measure the cost policy: the guesses (chain or tree) that pay for their rows, at most k");
    auto* rep = cmd->add_option("--repeat", o->repeat,
                                "Timed runs per item and configuration, the median kept (with --cost-curve: timed "
                                "passes per n)")->capture_default_str();
    cmd->add_option("--warmup", o->warmup, "Untimed warm-up rounds")->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "Threads of the target and draft contexts")->capture_default_str();
    cmd->add_option("--device", o->device, "Where target and draft run: cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_option("--simd", o->simd,
                    "Cap the CPU kernels at this SIMD level: scalar, avx2 (plain AVX2, no VNNI), avx-vnni or avx512 "
                    "(default: the best this CPU has; a level it lacks is an error). Quantized models give the same "
                    "bits at every level");
    cmd->add_option("--temp", o->temp, "Sampling temperature (0 or below: greedy, as in llama.cpp)")->capture_default_str();
    cmd->add_option("--seed", o->seed, "Sampling seed")->capture_default_str();
    cmd->add_option("--json", o->json_path, "Write every raw figure, the machine and settings as JSON");
    cmd->add_option("--svg", o->svg_path, "Write a plot of speedup and tokens per pass against k");
    cmd->add_option("--markdown", o->markdown_path, "Also write the Markdown report to this file");
    auto* pr = cmd->add_flag("--progress", o->progress, "Show the progress line even when stderr is not a terminal");
    cmd->add_flag("--no-progress", o->no_progress, "Never show the progress line")->excludes(pr);
    auto* cc = cmd->add_flag("--cost-curve", o->cost_only,
                             "Only measure the runtime: prefill and decode speed, and the cost of one forward pass "
                             "over n new tokens");
    cmd->add_flag("--no-cost-curve", o->no_cost, "Skip the cost curve after the workload")->excludes(cc);
    cmd->add_flag("--no-repack", o->no_repack, "Keep Q8_0, Q5_0, Q5_1 and K-quant weights in the file's layout (no repacking at load)");
    cmd->add_flag("--widen-q4", o->widen_q4,
                  "Widen Q4_0 and Q4_1 weights to the packed Q8_0 layout at load: the same outputs, faster products, +89 % / +80 % of their memory");
    cmd->add_option("--n", o->cost_n, "Pass sizes the cost table shows (comma-separated; the curve is measured up to "
                                      "the largest)")->delimiter(',')->capture_default_str();
    cmd->add_option("--prefix,--cost-prefix", o->cost_prefix, "Tokens already cached before each timed pass of the cost curve")
        ->capture_default_str();
    cmd->add_option("--cost-repeat", o->cost_repeat, "Timed passes per n of the cost curve")->capture_default_str();
    cmd->add_option("--prompt-tokens", o->prompt_tokens, "--cost-curve: prompt length of the prefill measurement")
        ->capture_default_str();
    cmd->add_option("--decode-tokens", o->decode_tokens, "--cost-curve: tokens decoded one by one after the prompt")
        ->capture_default_str();
    cmd->add_option("--long-prefix", o->long_prefix,
                    "--cost-curve: cached tokens of a second cost curve (clamped to the model's context; 0: none)")
        ->capture_default_str();
    cmd->add_flag("--long-prefill", o->long_prefill,
                  "--cost-curve: fill the long prefix by a prefill pass (minutes at 1B scale) instead of seeded K/V "
                  "values (a pass costs the same whatever the cached values)");
    cmd->add_option("--bandwidth-mib", o->bandwidth_mib,
                    "--cost-curve: buffer of the memory bandwidth measurement in MiB (0: do not measure)")
        ->capture_default_str();
    cmd->add_option("--cost-warmup", o->cost_warmup, "Untimed passes of each n before its timed ones, every round")
        ->capture_default_str();
    cmd->add_option("--project", o->project,
                    "--cost-curve: a saved --json workload report; projects its tokens per pass onto this model's cost curve");
    cmd->add_option("--concurrency", o->concurrency,
                    "Continuous batching at these numbers of concurrent requests (comma-separated): aggregate "
                    "tokens/s and per-request latency, plain and speculative (first --spec, largest --k), each "
                    "request checked against its own unbatched plain decoding")
        ->delimiter(',');
    cmd->add_option("--prefill-chunk", o->prefill_chunk, "--concurrency: prompt tokens per pass, run inside the decode passes")
        ->capture_default_str();
    cmd->add_option("--pass-tokens", o->pass_tokens,
                    "--concurrency: pending tokens + guesses per pass (guesses least likely to stand dropped first); "
                    "0 = no limit")
        ->capture_default_str();
    cmd->add_flag("--cost-model", o->cost_model,
                  "--concurrency: verify a guess only while its chance to stand pays for its row (pass time fitted "
                  "as a + b * rows)");
    cmd->add_option("--pass-cost", o->pass_cost_ms,
                    "--concurrency --cost-model: the pass time a + b * rows as FIXED_MS,PER_ROW_MS (e.g. from "
                    "--cost-curve) instead of fitting it to the run's own passes")
        ->delimiter(',');
    cmd->add_option("--from-json", o->from_json, "Redraw the reports (Markdown, --svg, --json) of a saved --json file; measures nothing");
    cmd->callback([o, rep, &run] {
        o->repeat_given = rep->count() > 0;
        run = [o] { return run_bench(*o); };
    });
}

} // namespace rwd::cli
