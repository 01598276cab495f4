// The measurement loop of `rewind bench`: per workload item, the baseline (plain decoding) and
// every speculative configuration, interleaved and repeated, each output checked token for token
// against the baseline's.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "rewind/device.h"
#include "rewind/kernels/simd.h"
#include "rewind/model.h"
#include "rewind/sampler.h"
#include "rewind/bench/bench_cost.h"
#include "rewind/bench/bench_report.h"
#include "rewind/bench/bench_result.h"
#include "rewind/bench/bench_workload.h"

namespace rwd::bench {

// Which k policies each (source, k) pair is measured with.
enum class KModes { Fixed, Adaptive, Both };

// Every source × branches × k × policy, in that nesting order. Adaptive k = 1 is skipped when
// Fixed k = 1 is also measured (it cannot move, so it is the same configuration). `branches`:
// the sources' continuations per node (0: each source's own; default {0}). Throws rwd::Error on
// an empty list, a baseline source, k outside [1, 255] or negative branches.
// With `cost`, each (source, branches, k) is also measured with KPolicy::Cost.
std::vector<Config> make_configs(std::span<const Source> sources, std::span<const int> ks, KModes modes,
                                 std::span<const int> branches = {}, bool cost = false);

// The SIMD level a run used, as the reports print it: "avx512", or "avx2 (capped; CPU avx512)"
// when a lower level than the CPU's best was asked for.
std::string simd_label(SimdLevel used);

struct RunnerOptions {
    std::vector<Config> configs;  // speculative configurations; the baseline is added first
    int repeat = 3;               // timed requests per item and configuration (median kept)
    int warmup = 1;               // untimed rounds of the first item under every configuration
    int n_threads = 1;            // target's and draft's contexts
    Device device{};              // where target and draft run (rewind/device.h)
    SimdLevel simd = detect_simd(); // cap on the CPU kernels' level, target and draft (ContextOptions::simd)
    SamplerOptions sampler;       // greedy by default
    int64_t max_tokens = 0;       // > 0: overrides every item's max_tokens
    bool cost_curve = true;       // measure the verification cost curve after the items
    CostCurveOptions cost;
    KvType kv_type = KvType::F32; // the target's and the draft's caches (every configuration alike)
};

struct BenchModels {
    std::shared_ptr<const Model> target;
    std::shared_ptr<const Model> draft; // null: no draft model (draft configurations refused)
};

using ProgressFn = std::function<void(const Progress&)>;

// Runs the benchmark. Items without references are not measured under "ref" (the source has
// nothing to copy from; their cells stay empty); "auto" (and "auto-first") uses references when an item has them,
// prompt lookup, and the draft model when one is loaded. "suffix" reads one SuffixCache shared by
// the whole run, holding the outputs of the items measured before (each added once, after all
// its repeats, so no repeat guesses from its own earlier output; warm-up adds nothing); its
// sources do not add to it themselves. Lossless failures are recorded in the
// result, not thrown: the report names them. Throws rwd::Error on bad options (no items,
// repeat < 1, a draft configuration without a draft model, "ref" with no item having references).
// result.setup gets threads, sampling, repeat and warm-up; the caller fills in file names.
BenchResult run_bench(const BenchModels& models, const std::vector<WorkItem>& items, const RunnerOptions& opts,
                      const ProgressFn& progress = {});

// The CPU model (/proc/cpuinfo), the kernels' SIMD level, and the hardware thread count.
MachineInfo detect_machine();

} // namespace rwd::bench
