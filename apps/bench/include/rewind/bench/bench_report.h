// Writers for `rewind bench` results: a Markdown report (tables for people), JSON (every raw
// figure, for scripts), an SVG plot (speedup and tokens per pass against k), and the text of
// the progress line shown while a run is going.
#pragma once
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "rewind/bench/bench_result.h"

namespace rwd::bench {

// Heading, settings line, the reproducing command, the summary table, one table per workload kind when there are two or
// more kinds, the verification cost curve when measured, and the lossless verdict (naming the
// item, configuration and first differing position of each failure). A result without items
// (the cost curve alone) gets write_cost_markdown and its command.
void write_markdown(std::ostream& out, const BenchResult& r);

// The pass sizes the Markdown cost table shows by default: single decode, k = 1, 3, 7, 8, 15, 16
// verification passes (the JSON keeps every n measured).
inline constexpr int64_t kCostRows[] = {1, 2, 4, 8, 9, 16, 17};

// The verification cost curve as a Markdown table of the rows `show` (those measured), preceded
// by prefill/decode throughput when measured and, when the result holds no items (as from
// `rewind bench --cost-curve`), the model, threads and machine.
void write_cost_markdown(std::ostream& out, const BenchResult& r, std::span<const int64_t> show = kCostRows);

// One JSON document: setup (model files, threads, seed, ...), machine, configurations, every item
// with every repeat's raw figures, summaries (all and per kind), the cost curve and the verdict.
std::string to_json(const BenchResult& r, int indent = 2);

// Reads back what to_json wrote (reports can be redrawn or compared without measuring again).
// Throws rwd::Error naming `source` and the field when the document is not such a report.
BenchResult from_json(const std::string& text, const std::string& source = "report");

struct SvgOptions {
    int width = 980;       // pixels; panels share it
    int row_height = 330;  // pixels per row (all items, then one row per kind)
    bool per_kind = true;  // add a row per workload kind when there are two or more kinds
};
// A self-contained SVG: per row, a speedup panel and a tokens-per-pass panel against k, one line
// per guess source (dashed when adaptive), with interquartile bars on the speedup, a baseline
// line at 1, labelled axes, a legend and a title naming the model and workloads.
void write_svg(std::ostream& out, const BenchResult& r, const SvgOptions& opts = {});

// Where a long run stands.
struct Progress {
    int64_t runs_done = 0, runs_total = 0;   // timed requests
    int64_t items_done = 0, items_total = 0;
    double elapsed_seconds = 0;
    std::string current;                     // the item being measured
};
// One line, without a newline: "[#####-----] 3/24 items  0:12 elapsed  ~1:24 left  edit-3".
// The estimate comes from runs, which are finer-grained than items.
std::string format_progress(const Progress& p, int bar_width = 24);

// "1:05", "12:00:03": minutes and seconds, hours when needed.
std::string format_duration(double seconds);

} // namespace rwd::bench
