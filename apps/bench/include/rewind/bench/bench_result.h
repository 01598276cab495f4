// What one `rewind bench` run measured: the configurations, every raw timing per item and
// repeat, the machine and settings needed to reproduce it, and the per-configuration summaries
// that the Markdown, JSON and SVG reports are drawn from.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/bench/bench_stats.h"

namespace rwd::bench {

// Where guesses come from. Baseline is plain one-token-per-pass decoding (generate_plain). The
// others are built by speculate::make_guess_source from their names; AutoFirst is "auto" with
// the first-answer-wins policy it had before, kept to measure what "longest" changes. Suffix's
// sources share one cache of earlier items' outputs (bench_runner.h).
enum class Source { Baseline, Ngram, Ref, Draft, Auto, AutoFirst, Suffix, Forced };
const char* source_name(Source s);
// "ngram", "ref", "draft", "auto", "auto-first", "suffix", "forced" (and "baseline"); throws rwd::Error
// naming the choices.
Source parse_source(std::string_view name);

struct Config {
    Source source = Source::Baseline;
    int k = 0;             // tokens guessed per pass (the cap when adaptive)
    bool adaptive = false; // the decoder may shrink/grow k with the acceptance it sees
    int branches = 0;      // the source's continuations per node (SourceSpec::branches; 0: its own)
    bool cost = false;     // KPolicy::Cost: the guesses that pay for their rows, at most k
    std::string label() const; // "baseline", "ngram k=4", "draft k<=8 adaptive", "ngram k<=8 tree=4 cost"
    bool operator==(const Config&) const = default;
};

// One timed request: prompt processing plus generation, each configuration paying for its own
// set-up (draft prefill, reference indexing), since that is what a user waits for.
struct RunSample {
    double seconds = 0;        // wall clock of the whole request
    double prompt_seconds = 0; // the part spent on the prompt, as the engine reports it
    int64_t tokens = 0;        // generated tokens
    int64_t passes = 0;        // target forward passes during generation (baseline: one per token)
    int64_t proposed = 0;      // guessed tokens sent to verification
    int64_t accepted = 0;      // guessed tokens the target agreed with
    double propose_seconds = 0, verify_seconds = 0;
    int64_t depth = 0;         // over passes: the depth of the verified guesses (a chain's length)
};

// One item under one configuration.
struct Cell {
    std::vector<RunSample> repeats;
    // Lossless check against the baseline's first repeat of the same item: the first differing
    // position and the repeat it happened in; -1 when every repeat matched.
    int64_t first_difference = -1;
    int64_t failed_repeat = -1;
    std::vector<TokenId> output; // ids of the first repeat (kept for the failure message)
    bool lossless() const { return first_difference < 0; }
    double median_seconds() const;
};

struct ItemResult {
    std::string id, kind, workload;
    int64_t prompt_tokens = 0, max_tokens = 0;
    bool constrained = false; // decoded under the item's grammar (json_schema, grammar or regex)
    std::vector<Cell> cells; // aligned with BenchResult::configs
};

struct MachineInfo {
    std::string cpu_model; // /proc/cpuinfo "model name"
    std::string simd;      // the kernels' level: scalar, avx2, avx-vnni, avx512 (bench_runner.h: simd_label)
    int cores = 0;         // hardware threads the OS reports
    // The 1-minute load average when the run started (/proc/loadavg; -1 if unknown): a load well
    // above the thread count means other work shared the cores and the timings are noisy.
    double load_average = -1;
};

struct SetupInfo {
    std::string model_path, draft_path;  // draft_path empty when no draft model
    std::vector<std::string> workloads;  // workload files, or "prompt" for -p
    int threads = 1;
    std::string device = "cpu";          // where the target (and draft) ran: "cpu" or "cuda:N"
    double temperature = 0;              // 0: greedy
    uint64_t seed = 0;
    int repeat = 1, warmup = 1;
    int64_t items_per_workload = 0;      // 0: all
    int64_t max_tokens = 0;              // 0: each item's own
    std::string command_line;            // as typed, for reproduction
    std::string kv_type = "f32";         // the KV cache's storage type, target and draft: "f32" or "f16"
    // The process's peak resident memory (bench_memory.h: peak_resident_bytes), model load
    // included, the bandwidth probe's buffers not; 0: not measured.
    int64_t peak_rss_bytes = 0;
};

// Median cost of one target forward pass over n new tokens after `prefix` cached ones.
struct CostPoint {
    int64_t n = 0;
    double seconds = 0;
    std::vector<double> samples;
    double experts_per_layer = 0; // mixture-of-experts models: distinct experts a pass read per layer (else 0)
};

// Plain forward-pass throughput: one pass over a whole prompt, then single-token decode passes.
struct Throughput {
    int64_t prompt_tokens = 0, decode_tokens = 0; // 0: not measured
    double prefill_seconds = 0;                   // median, one pass over the prompt
    // decode_tokens x the median time from one generated token to the next (every round's
    // intervals pooled): like the cost curve's medians, a pass that another process preempted
    // does not count, so this is what the 1-token pass predicts.
    double decode_seconds = 0;
    // decode_tokens x (the whole decode loop's wall time / its passes), median over rounds: what
    // `rewind generate` delivered on this machine at that moment, preemption included.
    double decode_wall_seconds = 0;
    double decode_tokens_per_s() const { return decode_seconds > 0 ? double(decode_tokens) / decode_seconds : 0; }
};

// The machine's memory bandwidth as rewind measures it (rwd::bench::measure_memory_bandwidth).
struct MemoryBandwidth {
    int threads = 0;      // 0: not measured
    int64_t bytes = 0;    // buffer size
    double read_gbps = 0; // best of the repeats: bytes read per second / 1e9
    double copy_gbps = 0; // memcpy: bytes read + written per second / 1e9
};

// What speculation would gain on this model: a configuration's tokens per pass, measured on a
// workload (any model), divided by what a pass of k+1 tokens costs here relative to one token.
struct Projection {
    Config config;
    double tokens_per_pass = 0; // measured (generated tokens / target passes)
    double cost_ratio = 0;      // cost of a (k+1)-token pass / cost of a 1-token pass, on this model
                                // (cost policy: of a pass of its mean rows, rounded up)
    double speedup = 0;         // tokens_per_pass / cost_ratio (guessing and sampling taken as free)
    double cost_ratio_long = 0; // the same with the long cached prefix (0: not measured)
    double speedup_long = 0;
};

// The model at scale (`rewind bench --cost-curve`): a second cost curve after a long cached
// prefix, the weight bytes a decode pass reads, the machine's bandwidth and what decode reaches
// of it, and projected speedups.
struct ScaleInfo {
    int64_t long_prefix_asked = 0;     // --long-prefix (0: no second curve)
    int64_t long_prefix = 0;           // what ran: asked, clamped to the model's context minus max n
    bool long_prefix_seeded = false;   // the long prefix held seeded K/V values (no prefill pass)
    std::vector<CostPoint> long_curve;
    int64_t weight_bytes_per_token = 0;
    int64_t moe_dense_bytes = 0;       // mixture of experts: bytes every pass reads besides experts (else 0)
    double moe_expert_bytes = 0;       // and the mean bytes of one expert read
    int64_t moe_layers = 0;            // and its layers (the experts a pass reads: per layer x layers)
    MemoryBandwidth bandwidth_1;       // one thread
    MemoryBandwidth bandwidth_n;       // the run's thread count (not measured again when 1)
    std::vector<Projection> projections;
    std::string projection_source;     // the saved report the tokens per pass came from
    // Prefill tokens/s of a kFloorPromptTokens-token prompt: the arithmetic rate a pass's floor
    // (dense_pass_floor) divides its tokens by; 0 when not measured (the model's context is shorter).
    double floor_prefill_tokens_per_s = 0;
};

struct BenchResult {
    SetupInfo setup;
    MachineInfo machine;
    std::vector<Config> configs; // configs[0] is the baseline
    std::vector<ItemResult> items;
    int64_t cost_prefix = 0;
    std::vector<CostPoint> cost_curve; // empty when not measured
    Throughput throughput;             // measured by `rewind bench --cost-curve`
    ScaleInfo scale;                   // measured by `rewind bench --cost-curve`
    bool lossless() const;
    std::vector<std::string> kinds() const; // distinct non-empty kinds, in first-seen order
};

// One row of the report.
struct ConfigSummary {
    Config config;
    int64_t items = 0;
    Summary tokens_per_s;       // per item: median over repeats of tokens / seconds
    Summary speedup;            // per item: baseline median seconds / this median seconds
    double acceptance = -1;     // accepted / proposed over all items and repeats; -1 if none proposed
    double tokens_per_pass = 0; // generated tokens / target passes over all items and repeats
    double guesses_per_pass = 0; // guesses verified / target passes (a tree's nodes)
    double depth_per_pass = 0;   // depth of the verified guesses / target passes
    double propose_share = -1;  // propose time / (propose + verify); -1 if not reported
    int64_t lossless_failures = 0;
};

// A run whose output differed from the baseline's.
struct LosslessFailure {
    std::string item, config;
    int64_t position = -1, repeat = -1;
};
std::vector<LosslessFailure> lossless_failures(const BenchResult& r);

// Summaries for every configuration over the items of `kind` ("" = all items). Throws
// rwd::Error if an item has no baseline measurement.
std::vector<ConfigSummary> summarize_configs(const BenchResult& r, std::string_view kind = {});

} // namespace rwd::bench
