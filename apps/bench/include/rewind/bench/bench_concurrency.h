// The concurrency sweep of `rewind bench --concurrency`: a workload through the batch decoder at
// each level, plain and speculative runs interleaved (medians of the repeats), every request
// checked against its own unbatched plain decoding (also the single-request latency baseline);
// and its Markdown report.
#pragma once
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "rewind/bench/bench_batch.h"
#include "rewind/bench/bench_workload.h"
#include "rewind/context.h"

namespace rwd::bench {

struct ConcurrencyOptions {
    std::vector<int> levels;   // concurrency levels, each >= 1, in the order measured
    int repeat = 3;            // >= 1: rounds of (plain, speculative) runs per level
    BatchRunOptions plain;     // the plain runs (concurrency set per level); sampler and max_tokens
                               // also give the unbatched baseline
    BatchRunOptions spec;      // the speculative runs: as `plain`, with a guess source
};

// One level's medians over the repeats.
struct ConcurrencyRow {
    int concurrency = 0;
    double plain_tps = 0, spec_tps = 0;           // all generated tokens over the wall time
    double plain_latency = 0, spec_latency = 0;   // p50 of the requests' latencies, seconds
    double plain_decode_tps = 0, spec_decode_tps = 0; // passes without a prompt chunk
    double plain_steady_tps = 0, spec_steady_tps = 0; // decoding passes that carried all requests
    double spec_tokens_per_pass = 0;              // tokens per request-pass of the speculative runs
    double spec_rows_per_full_pass = 0, spec_tokens_per_full_pass = 0; // decoding passes with all requests
};

// A request whose batched output differed from its unbatched plain decoding (or that failed).
struct ConcurrencyMismatch {
    std::string item;
    std::string what; // "plain batching" or "speculative batching"
    int concurrency = 0;
    std::string error; // the request's error when it failed
};

struct ConcurrencySweep {
    size_t requests = 0;
    double solo_tps = 0;          // unbatched plain decoding, one request at a time
    double solo_latency_p50 = 0;
    std::vector<ConcurrencyRow> rows;
    std::vector<ConcurrencyMismatch> mismatches; // empty: lossless
};

// Throws rwd::Error (argument) on an empty workload or level list, a level < 1 or repeat < 1,
// and what run_batched throws; a request's failure is a mismatch, not an exception.
ConcurrencySweep run_concurrency_sweep(Context& ctx, const std::vector<WorkItem>& items, const ConcurrencyOptions& o);

// The sweep's table (16 columns), with `heading` (the model and settings) above it and the
// legend and the lossless verdict below.
void write_concurrency_markdown(std::ostream& out, const ConcurrencySweep& s, const ConcurrencyOptions& o,
                                const std::string& heading);

} // namespace rwd::bench
