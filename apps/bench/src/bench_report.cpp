// Markdown, JSON and SVG writers for benchmark results, and the progress line. The SVG is written
// by hand (no plotting library) so the harness has no extra dependency; it is sized in pixels and
// uses only basic elements, so browsers and rsvg render it the same.
#include "rewind/bench/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "rewind/error.h"
#include "rewind/bench/bench_cost.h"
#include "rewind/bench/bench_memory.h"

namespace rwd::bench {
namespace {

using nlohmann::json;

// printf into a std::string; the attribute lets the compiler check every format string.
[[gnu::format(printf, 1, 2)]] std::string fmt(const char* f, ...) {
    char buf[512];
    va_list args;
    va_start(args, f);
    std::vsnprintf(buf, sizeof buf, f, args);
    va_end(args);
    return buf;
}

// "1 item", "3 items".
std::string count_text(int64_t n, const char* noun) {
    return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// " (N constrained)" when any item ran under a grammar: their tokens/s include the masks and
// their tokens per pass the forced text.
std::string constrained_text(const BenchResult& r) {
    int64_t n = 0;
    for (const auto& item : r.items) n += item.constrained ? 1 : 0;
    return n > 0 ? " (" + std::to_string(n) + " constrained)" : std::string();
}

std::string basename(const std::string& path) {
    return path.empty() ? path : std::filesystem::path(path).filename().string();
}

std::string workloads_text(const SetupInfo& s) {
    std::string out;
    for (const auto& w : s.workloads) out += (out.empty() ? "" : ", ") + basename(w);
    return out.empty() ? "-" : out;
}

std::string sampling_text(const SetupInfo& s) {
    if (s.temperature <= 0) return "greedy";
    return fmt("sampled (temperature %.2f, seed %llu)", s.temperature, static_cast<unsigned long long>(s.seed));
}

std::string model_text(const SetupInfo& s) {
    std::string m = basename(s.model_path);
    if (!s.draft_path.empty()) m += " (draft " + basename(s.draft_path) + ")";
    return m;
}

std::string machine_text(const MachineInfo& m) {
    std::string s = (m.cpu_model.empty() ? std::string("unknown CPU") : m.cpu_model) + " (" +
                    (m.simd.empty() ? "?" : m.simd) + ", " + std::to_string(m.cores) + " cores";
    if (m.load_average >= 0) s += fmt(", load %.1f", m.load_average);
    return s + ")";
}

void write_table(std::ostream& out, const std::vector<ConfigSummary>& rows) {
    out << "| configuration | tokens/s | speedup | speedup p25-p75 | acceptance | tokens/pass | guesses/pass | "
           "depth/pass | time proposing | lossless |\n"
        << "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |\n";
    for (const auto& s : rows) {
        if (s.items == 0) { // e.g. "ref" on items without references: nothing was measured
            out << "| " << s.config.label() << " | n/a | - | - | - | - | - | - | - | - |\n";
            continue;
        }
        const bool base = s.config.source == Source::Baseline;
        out << "| " << s.config.label() << " | " << fmt("%.0f", s.tokens_per_s.median) << " | "
            << fmt("%.2fx", s.speedup.median) << " | "
            << (base || s.speedup.n < 2 ? std::string("-") : fmt("%.2f-%.2fx", s.speedup.p25, s.speedup.p75))
            << " | " << (s.acceptance < 0 ? std::string("-") : fmt("%.1f%%", 100.0 * s.acceptance)) << " | "
            << fmt("%.2f", s.tokens_per_pass) << " | " << (base ? std::string("-") : fmt("%.2f", s.guesses_per_pass))
            << " | " << (base ? std::string("-") : fmt("%.2f", s.depth_per_pass)) << " | "
            << (s.propose_share < 0 ? std::string("-") : fmt("%.0f%%", 100.0 * s.propose_share)) << " | "
            << (s.lossless_failures == 0 ? "✓" : "✗ " + std::to_string(s.lossless_failures)) << " |\n";
    }
}

json summary_json(const Summary& s) {
    return {{"n", s.n}, {"median", s.median}, {"p25", s.p25}, {"p75", s.p75}, {"min", s.min}, {"max", s.max}};
}

json summaries_json(const std::vector<ConfigSummary>& rows) {
    json a = json::array();
    for (const auto& s : rows)
        a.push_back({{"config", s.config.label()},
                     {"items", s.items},
                     {"tokens_per_s", summary_json(s.tokens_per_s)},
                     {"speedup", summary_json(s.speedup)},
                     {"acceptance", s.acceptance < 0 ? json(nullptr) : json(s.acceptance)},
                     {"tokens_per_pass", s.tokens_per_pass},
                     {"guesses_per_pass", s.guesses_per_pass},
                     {"depth_per_pass", s.depth_per_pass},
                     {"propose_share", s.propose_share < 0 ? json(nullptr) : json(s.propose_share)},
                     {"lossless_failures", s.lossless_failures}});
    return a;
}

std::string xml_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        default: out += c;
        }
    }
    return out;
}

// A "nice" axis: 0 .. top in steps of 1, 2 or 5 times a power of ten, about `target` ticks.
struct Axis {
    double top = 1, step = 0.2;
};
Axis nice_axis(double max_value, int target = 5) {
    if (!(max_value > 0)) max_value = 1;
    const double raw = max_value / target;
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    double step = mag;
    for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
        if (raw <= m * mag) { step = m * mag; break; }
    return {std::ceil(max_value / step - 1e-9) * step, step};
}

std::string tick_label(double v, double step) {
    if (step >= 1) return fmt("%.0f", v);
    if (step >= 0.1) return fmt("%.1f", v);
    return fmt("%.2f", v);
}

// A series: one guess source (fixed or adaptive k) over the k values measured.
struct Series {
    Source source;
    bool adaptive;
    int branches;
    bool cost;
    std::map<int, ConfigSummary> by_k;
};

const char* source_color(Source s) {
    switch (s) {
    case Source::Ngram: return "#1f6fb2";
    case Source::Ref: return "#d9730d";
    case Source::Draft: return "#2e8b57";
    case Source::Auto: return "#8a3ffc";
    case Source::AutoFirst: return "#c2185b";
    case Source::Suffix: return "#00897b";
    case Source::Forced: return "#6d4c41";
    case Source::Baseline: break;
    }
    return "#555555";
}

std::vector<Series> make_series(const std::vector<ConfigSummary>& rows) {
    std::vector<Series> out;
    for (const auto& s : rows) {
        if (s.config.source == Source::Baseline || s.items == 0) continue;
        auto it = std::find_if(out.begin(), out.end(), [&](const Series& x) {
            return x.source == s.config.source && x.adaptive == s.config.adaptive && x.branches == s.config.branches &&
                   x.cost == s.config.cost;
        });
        if (it == out.end())
            it = out.insert(out.end(), Series{s.config.source, s.config.adaptive, s.config.branches, s.config.cost, {}});
        it->by_k[s.config.k] = s;
    }
    return out;
}

enum class Metric { Speedup, TokensPerPass };

struct Panel {
    double x, y, w, h; // plot area
};

// The largest value a panel of `metric` must show over all rows, so every row shares one scale
// and kinds can be compared by eye.
double metric_max(const std::vector<std::vector<Series>>& rows, Metric metric) {
    double max_v = metric == Metric::Speedup ? 1.2 : 2.0;
    for (const auto& series : rows)
        for (const auto& s : series)
            for (const auto& [k, c] : s.by_k)
                max_v = std::max(max_v, metric == Metric::Speedup ? std::max(c.speedup.p75, c.speedup.median)
                                                                   : c.tokens_per_pass);
    return max_v;
}

void draw_panel(std::ostream& o, const Panel& p, const Axis& ax, const std::vector<int>& ks,
                const std::vector<Series>& series, Metric metric, const std::string& title) {
    auto ypix = [&](double v) { return p.y + p.h - v / ax.top * p.h; };
    auto xpix = [&](size_t i) {
        return ks.size() == 1 ? p.x + p.w / 2 : p.x + p.w * (0.06 + 0.88 * static_cast<double>(i) / static_cast<double>(ks.size() - 1));
    };

    o << "<text x=\"" << p.x + p.w / 2 << "\" y=\"" << p.y - 12 << "\" text-anchor=\"middle\" class=\"ptitle\">"
      << xml_escape(title) << "</text>\n";
    // Grid and y ticks.
    for (double v = 0; v <= ax.top + ax.step / 2; v += ax.step) {
        const double y = ypix(v);
        o << fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", p.x, y, p.x + p.w, y);
        o << fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" class=\"tick\">", p.x - 6, y + 4)
          << tick_label(v, ax.step) << "</text>\n";
    }
    // Baseline reference: plain decoding is 1x and 1 token per pass.
    o << fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"base\"/>\n", p.x, ypix(1), p.x + p.w, ypix(1));
    // Under the line: speculative results mostly sit above it.
    o << fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" class=\"basel\">plain decoding</text>\n",
             p.x + p.w - 4, ypix(1) + 13);
    // Axes.
    o << fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/>\n", p.x, p.y, p.x, p.y + p.h);
    o << fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/>\n", p.x, p.y + p.h, p.x + p.w, p.y + p.h);
    for (size_t i = 0; i < ks.size(); ++i) {
        const double x = xpix(i);
        o << fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/>\n", x, p.y + p.h, x, p.y + p.h + 5);
        o << fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"tick\">%d</text>\n", x, p.y + p.h + 19, ks[i]);
    }
    o << fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"label\">", p.x + p.w / 2, p.y + p.h + 38)
      << "k (tokens guessed per pass)</text>\n";
    const double ly = p.y + p.h / 2;
    o << fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"label\" transform=\"rotate(-90 %.1f %.1f)\">",
             p.x - 44, ly, p.x - 44, ly)
      << (metric == Metric::Speedup ? "speedup over plain decoding (x)" : "tokens per target pass") << "</text>\n";

    for (const auto& s : series) {
        const char* color = source_color(s.source);
        std::string points;
        for (size_t i = 0; i < ks.size(); ++i) {
            auto it = s.by_k.find(ks[i]);
            if (it == s.by_k.end()) continue;
            const double v = metric == Metric::Speedup ? it->second.speedup.median : it->second.tokens_per_pass;
            points += fmt("%.1f,%.1f ", xpix(i), ypix(v));
        }
        o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2.2\""
          << (s.adaptive ? " stroke-dasharray=\"7 4\"" : "") << " points=\"" << points << "\"/>\n";
        for (size_t i = 0; i < ks.size(); ++i) {
            auto it = s.by_k.find(ks[i]);
            if (it == s.by_k.end()) continue;
            const ConfigSummary& c = it->second;
            const double x = xpix(i);
            if (metric == Metric::Speedup && c.speedup.n >= 2)
                o << fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.2\" opacity=\"0.55\"/>\n",
                         x, ypix(c.speedup.p25), x, ypix(c.speedup.p75), color);
            const double v = metric == Metric::Speedup ? c.speedup.median : c.tokens_per_pass;
            o << fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.6\" fill=\"%s\"/>\n", x, ypix(v),
                     c.lossless_failures == 0 ? color : "#d00000");
        }
    }
}

// The KV cache type and the process's peak resident memory, when measured.
void write_resident_line(std::ostream& out, const SetupInfo& s) {
    if (s.peak_rss_bytes <= 0) return;
    out << "\nPeak resident memory: " << fmt("%.2f", static_cast<double>(s.peak_rss_bytes) / 1e9)
        << " GB (the whole process: weights, " << s.kv_type
        << " KV cache and buffers; the bandwidth probe's buffers not counted).\n";
}

} // namespace

void write_markdown(std::ostream& out, const BenchResult& r) {
    const SetupInfo& s = r.setup;
    if (r.items.empty()) { // a `--cost-curve` result: there is no workload table to show
        write_cost_markdown(out, r);
        if (!s.command_line.empty()) out << "\n`" << s.command_line << "`\n";
        return;
    }
    out << "## rewind bench: " << model_text(s) << " on " << workloads_text(s) << "\n\n";
    out << sampling_text(s) << " · " << s.threads << (s.threads == 1 ? " thread" : " threads")
        << (s.device == "cpu" ? std::string() : " · " + s.device) << " · "
        << count_text(static_cast<int64_t>(r.items.size()), "item") << constrained_text(r) << " × "
        << count_text(s.repeat, "repeat") << " (median), " << s.warmup << " warm-up · " << machine_text(r.machine) << "\n\n";
    if (!s.command_line.empty()) out << "`" << s.command_line << "`\n\n";

    write_table(out, summarize_configs(r));
    write_resident_line(out, s);
    out << "\nTimes cover the whole request (prompt and generation). tokens/s: median over items of "
           "generated tokens per second; speedup: median over items of (baseline time / configuration "
           "time), both measured on the same item in the same run, p25-p75 their spread; acceptance: "
           "accepted / proposed guesses; tokens/pass: generated tokens / target forward passes; time "
           "proposing: the guess source's share of proposing plus verifying.\n";

    const auto kinds = r.kinds();
    if (kinds.size() >= 2) {
        for (const auto& k : kinds) {
            const auto rows = summarize_configs(r, k);
            const int64_t n = rows.empty() ? 0 : rows[0].items;
            out << "\n### " << k << " (" << n << (n == 1 ? " item" : " items") << ")\n\n";
            write_table(out, rows);
        }
    }

    if (!r.cost_curve.empty()) {
        out << "\n";
        write_cost_markdown(out, r);
    }

    const auto fails = lossless_failures(r);
    if (fails.empty()) {
        out << "\nLossless: ✓ every speculative output matched the baseline token for token.\n";
    } else {
        out << "\nLossless: ✗ " << fails.size() << " mismatch" << (fails.size() == 1 ? "" : "es") << "\n\n";
        for (const auto& f : fails)
            out << "- item " << f.item << ", " << f.config << ": first difference at generated token "
                << f.position << " (repeat " << f.repeat << ")\n";
    }
}

namespace {

// Prefill and decode speed (of generate_plain, the loop `rewind generate` runs).
void write_throughput_line(std::ostream& out, const Throughput& t) {
    if (t.prompt_tokens > 0 && t.prefill_seconds > 0 && t.decode_seconds > 0)
        out << "prefill: " << t.prompt_tokens << " tokens in " << fmt("%.2f", 1e3 * t.prefill_seconds) << " ms = "
            << fmt("%.0f", static_cast<double>(t.prompt_tokens) / t.prefill_seconds) << " tokens/s · decode: "
            << fmt("%.1f", t.decode_tokens_per_s()) << " tokens/s ("
            << fmt("%.3f", 1e3 * t.decode_seconds / static_cast<double>(t.decode_tokens))
            << " ms/token: the median interval between generated tokens of generate_plain, the loop `rewind "
               "generate` runs, at "
            << t.prompt_tokens << ".." << t.prompt_tokens + t.decode_tokens << " cached"
            << (t.decode_wall_seconds > 0
                    ? "; whole runs by the wall clock, other processes' preemption included: " +
                          fmt("%.3f", 1e3 * t.decode_wall_seconds / static_cast<double>(t.decode_tokens)) + " ms/token"
                    : std::string())
            << ")\n\n";
}

// The pass cost at each n shown (all when `show` is empty), and at the long prefix when measured.
void write_cost_table(std::ostream& out, const BenchResult& r, std::span<const int64_t> show) {
    const ScaleInfo& sc = r.scale;
    const bool two = !sc.long_curve.empty();
    // Mixture-of-experts models: the distinct experts each pass read, per layer (the bytes it streams).
    const bool moe = std::any_of(r.cost_curve.begin(), r.cost_curve.end(), [](const CostPoint& p) { return p.experts_per_layer > 0; });
    // The dense floor of each pass (dense_pass_floor), when the prefill rate it needs was measured.
    const bool floor = sc.floor_prefill_tokens_per_s > 0;
    out << "| n | ms per pass | ÷ 1-token pass | ms per token |" << (floor ? " floor, ms | ÷ floor |" : "")
        << (moe ? " experts read per layer |" : "");
    if (two) out << " ms per pass, " << sc.long_prefix << " cached | ÷ 1-token pass |";
    out << "\n| ---: | ---: | ---: | ---: |" << (floor ? " ---: | ---: |" : "") << (moe ? " ---: |" : "")
        << (two ? " ---: | ---: |" : "") << "\n";
    const double one = r.cost_curve.empty() ? 0 : r.cost_curve.front().seconds;
    for (const auto& c : r.cost_curve) {
        if (!show.empty() && std::find(show.begin(), show.end(), c.n) == show.end()) continue;
        out << "| " << c.n << " | " << fmt("%.3f", 1e3 * c.seconds) << " | "
            << (one > 0 ? fmt("%.2fx", c.seconds / one) : std::string("-")) << " | "
            << fmt("%.3f", 1e3 * c.seconds / static_cast<double>(c.n)) << " |";
        if (floor) {
            const double f = dense_pass_floor(one, c.n, sc.floor_prefill_tokens_per_s);
            out << " " << (f > 0 ? fmt("%.3f", 1e3 * f) : std::string("-")) << " | "
                << (f > 0 ? fmt("%.2fx", c.seconds / f) : std::string("-")) << " |";
        }
        if (moe) out << " " << fmt("%.1f", c.experts_per_layer) << " |";
        if (two) {
            const auto it = std::find_if(sc.long_curve.begin(), sc.long_curve.end(),
                                         [&](const CostPoint& p) { return p.n == c.n; });
            const double ratio = cost_ratio(sc.long_curve, c.n);
            out << " " << (it == sc.long_curve.end() ? std::string("-") : fmt("%.3f", 1e3 * it->seconds)) << " | "
                << (ratio > 0 ? fmt("%.2fx", ratio) : std::string("-")) << " |";
        }
        out << "\n";
    }
    if (floor)
        out << "\nfloor: max(the 1-token pass, n tokens at the prefill rate of a " << kFloorPromptTokens
            << "-token prompt, " << fmt("%.1f", sc.floor_prefill_tokens_per_s)
            << " tokens/s): a pass reads every weight once and does its tokens' arithmetic.\n";
    if (sc.long_prefix_asked > 0 && sc.long_prefix != sc.long_prefix_asked)
        out << "\n" << sc.long_prefix_asked << " cached tokens asked; clamped to " << sc.long_prefix
            << " so that the longest pass fits the model's context.\n";
    if (two && sc.long_prefix_seeded)
        out << "\nThe " << sc.long_prefix << " cached tokens are seeded K/V values, not a prefill (a pass costs the same "
            << "whatever the cached values; --long-prefill runs the prefill).\n";
}

// The weights a decode pass reads against the machine's read bandwidth.
void write_memory_line(std::ostream& out, const ScaleInfo& sc, const Throughput& t) {
    if (sc.weight_bytes_per_token <= 0) return;
    out << "\nMemory: a decode pass reads " << fmt("%.3f", static_cast<double>(sc.weight_bytes_per_token) / 1e9)
        << " GB of weights";
    const MemoryBandwidth& b1 = sc.bandwidth_1;
    const MemoryBandwidth& bn = sc.bandwidth_n.threads > 0 ? sc.bandwidth_n : sc.bandwidth_1;
    if (b1.threads > 0) {
        out << " · the machine reads " << fmt("%.1f", b1.read_gbps) << " GB/s on 1 thread (copy "
            << fmt("%.1f", b1.copy_gbps) << ")";
        if (sc.bandwidth_n.threads > 1)
            out << ", " << fmt("%.1f", bn.read_gbps) << " GB/s on " << bn.threads << " (copy "
                << fmt("%.1f", bn.copy_gbps) << ")";
        const double dec = t.decode_tokens_per_s();
        const double frac = bandwidth_fraction(sc.weight_bytes_per_token, dec, bn.read_gbps);
        if (frac > 0)
            out << " · decode at " << fmt("%.1f", dec) << " tokens/s reads "
                << fmt("%.1f", static_cast<double>(sc.weight_bytes_per_token) * dec / 1e9) << " GB/s = "
                << fmt("%.0f%%", 100.0 * frac) << " of the " << bn.threads << "-thread read bandwidth"
                << (frac > 1 ? " (above 100%: the weights are served from the CPU caches, not memory)" : "");
    }
    out << ".\n";
}

// Mixture of experts: each measured pass against its floor (moe_pass_floor_seconds), n = 2 up,
// from the distinct experts it read, the read bandwidth and the prefill rate measured here.
void write_moe_floor_table(std::ostream& out, const BenchResult& r) {
    const ScaleInfo& sc = r.scale;
    const Throughput& t = r.throughput;
    const MemoryBandwidth& bn = sc.bandwidth_n.threads > 0 ? sc.bandwidth_n : sc.bandwidth_1;
    if (sc.moe_expert_bytes <= 0 || bn.read_gbps <= 0 || t.prefill_seconds <= 0) return;
    const double prefill = static_cast<double>(t.prompt_tokens) / t.prefill_seconds;
    const int64_t n_layer = sc.moe_layers > 0 ? sc.moe_layers : 1;
    out << "\nMixture of experts: a pass's floor is max(the bytes it must read ÷ " << fmt("%.1f", bn.read_gbps)
        << " GB/s, its tokens ÷ the prefill rate of " << fmt("%.0f", prefill) << " tokens/s), the bytes being "
        << fmt("%.3f", static_cast<double>(sc.moe_dense_bytes) / 1e9)
        << " GB read by every pass (attention, router, norms, head) plus each distinct expert it read once ("
        << fmt("%.2f", sc.moe_expert_bytes / 1e6) << " MB each on average).\n\n";
    out << "| n | distinct experts per pass | GB read | floor ms | ms per pass | ÷ floor |\n"
        << "| ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const CostPoint& c : r.cost_curve) {
        if (c.n < 2 || c.experts_per_layer <= 0) continue;
        const double experts = c.experts_per_layer * static_cast<double>(n_layer);
        const double floor = moe_pass_floor_seconds(c.n, experts, static_cast<double>(sc.moe_dense_bytes),
                                                    sc.moe_expert_bytes, bn.read_gbps, prefill);
        const double bytes = static_cast<double>(sc.moe_dense_bytes) + experts * sc.moe_expert_bytes;
        out << "| " << c.n << " | " << fmt("%.0f", experts) << " | " << fmt("%.3f", bytes / 1e9) << " | "
            << fmt("%.3f", 1e3 * floor) << " | " << fmt("%.3f", 1e3 * c.seconds) << " | "
            << (floor > 0 ? fmt("%.2fx", c.seconds / floor) : std::string("-")) << " |\n";
    }
}

// A saved workload report's tokens per pass projected onto this cost curve.
void write_projections(std::ostream& out, const ScaleInfo& sc) {
    const bool two = !sc.long_curve.empty();
    if (sc.projections.empty()) return;
    out << "\n### Projected speedup on this model: tokens per pass measured on a workload ÷ the cost of "
           "a (k+1)-token pass\n\n";
    if (!sc.projection_source.empty()) out << "tokens per pass from " << sc.projection_source << "\n\n";
    out << "| configuration | tokens/pass | (k+1)-pass ÷ 1-token pass | projected speedup |";
    if (two) out << " ÷, " << sc.long_prefix << " cached | projected |";
    out << "\n| --- | ---: | ---: | ---: |" << (two ? " ---: | ---: |" : "") << "\n";
    for (const Projection& p : sc.projections) {
        out << "| " << p.config.label() << " | " << fmt("%.2f", p.tokens_per_pass) << " | "
            << (p.cost_ratio > 0 ? fmt("%.2fx", p.cost_ratio) : std::string("-")) << " | "
            << (p.speedup > 0 ? fmt("%.2fx", p.speedup) : std::string("-")) << " |";
        if (two)
            out << " " << (p.cost_ratio_long > 0 ? fmt("%.2fx", p.cost_ratio_long) : std::string("-")) << " | "
                << (p.speedup_long > 0 ? fmt("%.2fx", p.speedup_long) : std::string("-")) << " |";
        out << "\n";
    }
    out << "\nProjection = tokens per pass ÷ pass-cost ratio, counting every pass as k+1 tokens (under "
           "the cost policy: its mean rows, rounded up) and guessing as free.\n";
}

} // namespace

void write_cost_markdown(std::ostream& out, const BenchResult& r, std::span<const int64_t> show) {
    const ScaleInfo& sc = r.scale;
    const bool two = !sc.long_curve.empty();
    out << "### Verification cost: one target forward pass over n new tokens (" << r.cost_prefix;
    if (two) out << " and " << sc.long_prefix;
    out << " tokens cached)\n\n";
    if (r.items.empty()) // the cost curve alone: say what it ran on here
        out << basename(r.setup.model_path) << " · " << r.setup.threads
            << (r.setup.threads == 1 ? " thread" : " threads")
            << (r.setup.device == "cpu" ? std::string() : " · " + r.setup.device) << " · " << machine_text(r.machine) << "\n\n";
    write_throughput_line(out, r.throughput);
    write_cost_table(out, r, show);
    write_memory_line(out, sc, r.throughput);
    write_resident_line(out, r.setup);
    write_moe_floor_table(out, r);
    write_projections(out, sc);
}

namespace {

json setup_json(const SetupInfo& s) {
    return {{"model", s.model_path},
            {"model_file", basename(s.model_path)},
            {"draft", s.draft_path.empty() ? json(nullptr) : json(s.draft_path)},
            {"draft_file", s.draft_path.empty() ? json(nullptr) : json(basename(s.draft_path))},
            {"workloads", s.workloads},
            {"threads", s.threads},
            {"device", s.device},
            {"temperature", s.temperature},
            {"greedy", s.temperature <= 0},
            {"seed", s.seed},
            {"repeat", s.repeat},
            {"warmup", s.warmup},
            {"items_per_workload", s.items_per_workload},
            {"max_tokens_override", s.max_tokens},
            {"command_line", s.command_line},
            {"kv_type", s.kv_type},
            {"peak_rss_bytes", s.peak_rss_bytes}};
}

json configs_json(const std::vector<Config>& configs) {
    json a = json::array();
    for (const auto& c : configs)
        a.push_back({{"label", c.label()}, {"source", source_name(c.source)}, {"k", c.k}, {"adaptive", c.adaptive},
                     {"branches", c.branches}, {"cost", c.cost}});
    return a;
}

// One item's runs: per configuration, every repeat's figures and the lossless verdict.
json item_runs_json(const ItemResult& item, const std::vector<Config>& configs) {
    json runs = json::array();
    for (size_t ci = 0; ci < item.cells.size() && ci < configs.size(); ++ci) {
        const Cell& cell = item.cells[ci];
        json reps = json::array();
        for (const auto& rep : cell.repeats)
            reps.push_back({{"seconds", rep.seconds},
                            {"prompt_seconds", rep.prompt_seconds},
                            {"tokens", rep.tokens},
                            {"passes", rep.passes},
                            {"proposed", rep.proposed},
                            {"accepted", rep.accepted},
                            {"depth", rep.depth},
                            {"propose_seconds", rep.propose_seconds},
                            {"verify_seconds", rep.verify_seconds}});
        json run = {{"config", configs[ci].label()}, {"lossless", cell.lossless()}, {"repeats", reps}};
        if (!cell.lossless()) {
            run["first_difference"] = cell.first_difference;
            run["failed_repeat"] = cell.failed_repeat;
        }
        runs.push_back(run);
    }
    return runs;
}

json items_json(const BenchResult& r) {
    json items = json::array();
    for (const auto& item : r.items)
        items.push_back({{"id", item.id},
                         {"kind", item.kind},
                         {"workload", item.workload},
                         {"prompt_tokens", item.prompt_tokens},
                         {"max_tokens", item.max_tokens},
                         {"constrained", item.constrained},
                         {"runs", item_runs_json(item, r.configs)}});
    return items;
}

json curve_json(const std::vector<CostPoint>& curve) {
    json a = json::array();
    for (const auto& c : curve)
        a.push_back({{"n", c.n}, {"seconds", c.seconds}, {"samples", c.samples}, {"experts_per_layer", c.experts_per_layer}});
    return a;
}

json bandwidth_json(const MemoryBandwidth& b) {
    return b.threads > 0 ? json{{"threads", b.threads}, {"bytes", b.bytes}, {"read_gbps", b.read_gbps},
                                {"copy_gbps", b.copy_gbps}}
                         : json(nullptr);
}

json scale_json(const BenchResult& r) {
    const ScaleInfo& sc = r.scale;
    json proj = json::array();
    for (const Projection& p : sc.projections)
        proj.push_back({{"config", p.config.label()}, {"source", source_name(p.config.source)}, {"k", p.config.k},
                        {"adaptive", p.config.adaptive}, {"tokens_per_pass", p.tokens_per_pass},
                        {"cost_ratio", p.cost_ratio}, {"speedup", p.speedup},
                        {"cost_ratio_long", p.cost_ratio_long}, {"speedup_long", p.speedup_long}});
    const MemoryBandwidth& bn = sc.bandwidth_n.threads > 0 ? sc.bandwidth_n : sc.bandwidth_1;
    return {{"long_prefix_asked", sc.long_prefix_asked},
            {"long_prefix_tokens", sc.long_prefix},
            {"long_prefix_seeded", sc.long_prefix_seeded},
            {"long_cost_curve", curve_json(sc.long_curve)},
            {"weight_bytes_per_token", sc.weight_bytes_per_token},
            {"moe_dense_bytes", sc.moe_dense_bytes},
            {"moe_expert_bytes", sc.moe_expert_bytes},
            {"moe_layers", sc.moe_layers},
            {"bandwidth_1_thread", bandwidth_json(sc.bandwidth_1)},
            {"bandwidth_n_threads", bandwidth_json(sc.bandwidth_n)},
            {"decode_tokens_per_s", r.throughput.decode_tokens_per_s()},
            {"decode_bandwidth_fraction",
             bandwidth_fraction(sc.weight_bytes_per_token, r.throughput.decode_tokens_per_s(), bn.read_gbps)},
            {"floor_prefill_tokens_per_s", sc.floor_prefill_tokens_per_s},
            {"projection_source", sc.projection_source},
            {"projections", proj}};
}

json throughput_json(const Throughput& t) {
    return t.prompt_tokens > 0 ? json{{"prompt_tokens", t.prompt_tokens},
                                      {"decode_tokens", t.decode_tokens},
                                      {"prefill_seconds", t.prefill_seconds},
                                      {"decode_seconds", t.decode_seconds},
                                      {"decode_wall_seconds", t.decode_wall_seconds}}
                               : json(nullptr);
}

} // namespace

std::string to_json(const BenchResult& r, int indent) {
    json j;
    j["format"] = "rewind-bench/1";
    j["setup"] = setup_json(r.setup);
    j["machine"] = {{"cpu_model", r.machine.cpu_model},
                    {"simd", r.machine.simd},
                    {"cores", r.machine.cores},
                    {"load_average", r.machine.load_average < 0 ? json(nullptr) : json(r.machine.load_average)}};
    j["configs"] = configs_json(r.configs);
    j["items"] = items_json(r);
    json summary = {{"all", summaries_json(summarize_configs(r))}};
    json by_kind = json::object();
    for (const auto& k : r.kinds()) by_kind[k] = summaries_json(summarize_configs(r, k));
    summary["by_kind"] = by_kind;
    j["summary"] = summary;
    j["cost_curve"] = {{"prefix_tokens", r.cost_prefix}, {"points", curve_json(r.cost_curve)}};
    j["scale"] = scale_json(r);
    j["throughput"] = throughput_json(r.throughput);
    json fails = json::array();
    for (const auto& f : lossless_failures(r))
        fails.push_back({{"item", f.item}, {"config", f.config}, {"first_difference", f.position}, {"repeat", f.repeat}});
    j["lossless"] = fails.empty();
    j["lossless_failures"] = fails;
    return j.dump(indent);
}

namespace {

SetupInfo setup_from_json(const json& s) {
    SetupInfo setup;
    setup.model_path = s.at("model").get<std::string>();
    setup.draft_path = s.at("draft").is_null() ? "" : s.at("draft").get<std::string>();
    setup.workloads = s.at("workloads").get<std::vector<std::string>>();
    setup.threads = s.at("threads").get<int>();
    setup.device = s.value("device", std::string("cpu")); // absent from reports without a device
    setup.temperature = s.at("temperature").get<double>();
    setup.seed = s.at("seed").get<uint64_t>();
    setup.repeat = s.at("repeat").get<int>();
    setup.warmup = s.at("warmup").get<int>();
    setup.items_per_workload = s.at("items_per_workload").get<int64_t>();
    setup.max_tokens = s.at("max_tokens_override").get<int64_t>();
    setup.command_line = s.at("command_line").get<std::string>();
    setup.kv_type = s.value("kv_type", std::string("f32"));     // absent from reports before F16 caches were the default
    setup.peak_rss_bytes = s.value("peak_rss_bytes", int64_t{0}); // absent from reports without it
    return setup;
}

Cell cell_from_json(const json& run) {
    Cell cell;
    for (const auto& rep : run.at("repeats"))
        cell.repeats.push_back({rep.at("seconds").get<double>(), rep.at("prompt_seconds").get<double>(),
                                rep.at("tokens").get<int64_t>(), rep.at("passes").get<int64_t>(),
                                rep.at("proposed").get<int64_t>(), rep.at("accepted").get<int64_t>(),
                                rep.at("propose_seconds").get<double>(), rep.at("verify_seconds").get<double>(),
                                rep.value("depth", int64_t{0})});
    if (!run.at("lossless").get<bool>()) {
        cell.first_difference = run.at("first_difference").get<int64_t>();
        cell.failed_repeat = run.at("failed_repeat").get<int64_t>();
    }
    return cell;
}

// Throws rwd::Error (format) unless the item has one run per configuration.
ItemResult item_from_json(const json& it, size_t n_configs, const std::string& source) {
    ItemResult ir;
    ir.id = it.at("id").get<std::string>();
    ir.kind = it.at("kind").get<std::string>();
    ir.workload = it.at("workload").get<std::string>();
    ir.prompt_tokens = it.at("prompt_tokens").get<int64_t>();
    ir.max_tokens = it.at("max_tokens").get<int64_t>();
    ir.constrained = it.value("constrained", false); // absent in reports from before constraints
    const json& runs = it.at("runs");
    if (runs.size() != n_configs)
        throw Error(ErrorCode::format, source + ": item '" + ir.id + "' has " + std::to_string(runs.size()) + " runs for " +
                    std::to_string(n_configs) + " configurations");
    for (const auto& run : runs) ir.cells.push_back(cell_from_json(run));
    return ir;
}

std::vector<CostPoint> curve_from_json(const json& points) {
    std::vector<CostPoint> curve;
    for (const auto& c : points)
        curve.push_back({c.at("n").get<int64_t>(), c.at("seconds").get<double>(), c.at("samples").get<std::vector<double>>()});
    return curve;
}

MemoryBandwidth bandwidth_from_json(const json& b) {
    return b.is_null() ? MemoryBandwidth{}
                       : MemoryBandwidth{b.at("threads").get<int>(), b.at("bytes").get<int64_t>(),
                                         b.at("read_gbps").get<double>(), b.at("copy_gbps").get<double>()};
}

ScaleInfo scale_from_json(const json& j) {
    ScaleInfo sc;
    sc.long_prefix_asked = j.at("long_prefix_asked").get<int64_t>();
    sc.long_prefix = j.at("long_prefix_tokens").get<int64_t>();
    sc.long_prefix_seeded = j.value("long_prefix_seeded", false);
    sc.long_curve = curve_from_json(j.at("long_cost_curve"));
    sc.weight_bytes_per_token = j.at("weight_bytes_per_token").get<int64_t>();
    sc.moe_dense_bytes = j.value("moe_dense_bytes", int64_t{0});
    sc.moe_expert_bytes = j.value("moe_expert_bytes", 0.0);
    sc.moe_layers = j.value("moe_layers", int64_t{0});
    sc.bandwidth_1 = bandwidth_from_json(j.at("bandwidth_1_thread"));
    sc.bandwidth_n = bandwidth_from_json(j.at("bandwidth_n_threads"));
    sc.floor_prefill_tokens_per_s = j.value("floor_prefill_tokens_per_s", 0.0);
    sc.projection_source = j.at("projection_source").get<std::string>();
    for (const auto& p : j.at("projections"))
        sc.projections.push_back({{parse_source(p.at("source").get<std::string>()), p.at("k").get<int>(),
                                   p.at("adaptive").get<bool>()},
                                  p.at("tokens_per_pass").get<double>(), p.at("cost_ratio").get<double>(),
                                  p.at("speedup").get<double>(), p.at("cost_ratio_long").get<double>(),
                                  p.at("speedup_long").get<double>()});
    return sc;
}

} // namespace

BenchResult from_json(const std::string& text, const std::string& source) {
    BenchResult r;
    try {
        const json j = json::parse(text);
        if (j.value("format", "") != "rewind-bench/1")
            throw Error(ErrorCode::format, source + ": not a rewind bench report (\"format\" is not \"rewind-bench/1\")");
        r.setup = setup_from_json(j.at("setup"));
        const json& m = j.at("machine");
        r.machine = {m.at("cpu_model").get<std::string>(), m.at("simd").get<std::string>(), m.at("cores").get<int>(),
                     m.value("load_average", json(nullptr)).is_null() ? -1.0 : m.at("load_average").get<double>()};
        for (const auto& c : j.at("configs"))
            r.configs.push_back({parse_source(c.at("source").get<std::string>()), c.at("k").get<int>(),
                                 c.at("adaptive").get<bool>(), c.value("branches", 0), c.value("cost", false)});
        for (const auto& it : j.at("items")) r.items.push_back(item_from_json(it, r.configs.size(), source));
        const json& cost = j.at("cost_curve");
        r.cost_prefix = cost.at("prefix_tokens").get<int64_t>();
        r.cost_curve = curve_from_json(cost.at("points"));
        if (const auto it = j.find("throughput"); it != j.end() && !it->is_null())
            r.throughput = {it->at("prompt_tokens").get<int64_t>(), it->at("decode_tokens").get<int64_t>(),
                            it->at("prefill_seconds").get<double>(), it->at("decode_seconds").get<double>(),
                            it->value("decode_wall_seconds", 0.0)}; // absent from reports without it
        if (const auto it = j.find("scale"); it != j.end() && !it->is_null()) r.scale = scale_from_json(*it);
    } catch (const json::exception& e) {
        throw Error(ErrorCode::format, source + ": malformed rewind bench report (" + e.what() + ")");
    }
    return r;
}

namespace {

// One row of panels: all items, or one kind of them.
struct SvgRow {
    std::string name, kind;
    int64_t items = 0;
    std::vector<Series> series;
};

std::vector<SvgRow> svg_rows(const BenchResult& r, const SvgOptions& opts) {
    std::vector<SvgRow> rows{{"all items", "", 0, {}}};
    const auto kinds = r.kinds();
    if (opts.per_kind && kinds.size() >= 2)
        for (const auto& k : kinds) rows.push_back({"kind: " + k, k, 0, {}});
    for (auto& row : rows) {
        const auto summaries = summarize_configs(r, row.kind);
        row.items = summaries.empty() ? 0 : summaries[0].items;
        row.series = make_series(summaries);
    }
    return rows;
}

// Every k measured by any configuration, in order, shared by all panels.
std::vector<int> measured_ks(const BenchResult& r) {
    std::vector<int> ks;
    for (const auto& c : r.configs)
        if (c.source != Source::Baseline && std::find(ks.begin(), ks.end(), c.k) == ks.end()) ks.push_back(c.k);
    std::sort(ks.begin(), ks.end());
    return ks;
}

struct LegendEntry {
    std::string name;
    const char* color; // null: the plain-decoding baseline
    bool dashed;
    double x, y;
};

// The legend's entries laid out from x = left, wrapping onto more lines before `right`; returns
// them and sets `lines` (so the height is known before drawing).
std::vector<LegendEntry> layout_legend(const std::vector<Series>& series, double left, double right, double line_h,
                                       int& lines) {
    std::vector<LegendEntry> legend;
    for (const auto& se : series)
        legend.push_back({std::string(source_name(se.source)) + (se.adaptive ? " (adaptive k)" : "") +
                              (se.branches > 0 ? " tree=" + std::to_string(se.branches) : std::string()) +
                              (se.cost ? " (cost k)" : ""),
                          source_color(se.source), se.adaptive, 0, 0});
    legend.push_back({"plain decoding (baseline)", nullptr, true, 0, 0});
    double lx = left, line_no = 0;
    for (auto& e : legend) {
        const double w = 34 + 7.2 * static_cast<double>(e.name.size()) + 26; // ~7.2 px per glyph
        if (lx + w > right && lx > left) {
            lx = left;
            line_no += 1;
        }
        e.x = lx;
        e.y = line_no * line_h;
        lx += w;
    }
    lines = static_cast<int>(line_no) + 1;
    return legend;
}

void write_svg_start(std::ostream& o, double W, double H) {
    o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
             "font-family=\"Helvetica, Arial, sans-serif\">\n", W, H, W, H)
      << "<style>\n"
         ".title{font-size:19px;font-weight:bold;fill:#222}\n"
         ".sub{font-size:12.5px;fill:#555}\n"
         ".ptitle{font-size:14px;font-weight:bold;fill:#333}\n"
         ".row{font-size:14px;font-weight:bold;fill:#666}\n"
         ".tick{font-size:11.5px;fill:#444}\n"
         ".label{font-size:12.5px;fill:#333}\n"
         ".legend{font-size:12.5px;fill:#333}\n"
         ".grid{stroke:#e3e3e3;stroke-width:1}\n"
         ".axis{stroke:#333;stroke-width:1.2}\n"
         ".base{stroke:#999;stroke-width:1.4;stroke-dasharray:4 4}\n"
         ".basel{font-size:10.5px;fill:#888}\n"
         "</style>\n"
      << fmt("<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, H);
}

// The centred header lines: model, workloads and settings, machine, how to read the plot.
void write_svg_header(std::ostream& o, const BenchResult& r, double W) {
    const SetupInfo& s = r.setup;
    // One too long for the width is squeezed rather than clipped.
    auto header = [&](double y, const char* cls, double glyph_w, const std::string& text) {
        const double est = glyph_w * static_cast<double>(text.size());
        o << fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"%s\"", W / 2, y, cls);
        if (est > W - 32) o << fmt(" textLength=\"%.0f\" lengthAdjust=\"spacingAndGlyphs\"", W - 32);
        o << ">" << xml_escape(text) << "</text>\n";
    };
    header(30, "title", 10.8, "rewind bench: " + model_text(s));
    header(52, "sub", 6.6,
           "workloads: " + workloads_text(s) + " · " + count_text(static_cast<int64_t>(r.items.size()), "item") +
               " × " + count_text(s.repeat, "repeat") + " · " + sampling_text(s) + " · " +
               std::to_string(s.threads) + (s.threads == 1 ? " thread" : " threads"));
    header(70, "sub", 6.6, machine_text(r.machine) + " · lossless " + (r.lossless() ? "✓" : "✗"));
    header(88, "sub", 6.6, "points: median over items; bars: interquartile range of the per-item speedups");
}

void write_legend(std::ostream& o, const std::vector<LegendEntry>& legend, double top) {
    for (const auto& e : legend) {
        const double y = top + e.y;
        if (e.color) {
            o << fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"%s/>\n",
                     e.x, y, e.x + 28, y, e.color, e.dashed ? " stroke-dasharray=\"7 4\"" : "");
            o << fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.6\" fill=\"%s\"/>\n", e.x + 14, y, e.color);
        } else {
            o << fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"base\"/>\n", e.x, y, e.x + 28, y);
        }
        o << fmt("<text x=\"%.1f\" y=\"%.1f\" class=\"legend\">", e.x + 34, y + 4) << xml_escape(e.name) << "</text>\n";
    }
}

} // namespace

void write_svg(std::ostream& o, const BenchResult& r, const SvgOptions& opts) {
    const std::vector<SvgRow> rows = svg_rows(r, opts);
    std::vector<std::vector<Series>> all_series;
    for (const auto& row : rows) all_series.push_back(row.series);
    const Axis speed_ax = nice_axis(metric_max(all_series, Metric::Speedup) * 1.05);
    const Axis pass_ax = nice_axis(metric_max(all_series, Metric::TokensPerPass) * 1.05);
    const std::vector<int> ks = measured_ks(r);

    const double W = opts.width, margin_l = 80, gap = 96, margin_r = 24;
    const double legend_line = 22;
    int legend_lines = 0;
    const std::vector<LegendEntry> legend =
        layout_legend(rows[0].series, margin_l, W - margin_r, legend_line, legend_lines);
    const double top = 104, legend_h = 24 + legend_lines * legend_line;
    const double H = top + opts.row_height * static_cast<double>(rows.size()) + legend_h;
    write_svg_start(o, W, H);
    write_svg_header(o, r, W);

    const double pw = (W - margin_l - gap - margin_r) / 2;
    for (size_t ri = 0; ri < rows.size(); ++ri) {
        const double y0 = top + opts.row_height * static_cast<double>(ri);
        if (rows.size() > 1)
            o << fmt("<text x=\"12\" y=\"%.1f\" class=\"row\">", y0 + 14) << xml_escape(rows[ri].name) << " ("
              << rows[ri].items << (rows[ri].items == 1 ? " item" : " items") << ")</text>\n";
        const double ph = opts.row_height - 110;
        draw_panel(o, {margin_l, y0 + 48, pw, ph}, speed_ax, ks, rows[ri].series, Metric::Speedup,
                   "Speedup over plain decoding");
        draw_panel(o, {margin_l + pw + gap, y0 + 48, pw, ph}, pass_ax, ks, rows[ri].series, Metric::TokensPerPass,
                   "Tokens per target forward pass");
    }
    write_legend(o, legend, top + opts.row_height * static_cast<double>(rows.size()) + 12);
    o << "</svg>\n";
}

std::string format_duration(double seconds) {
    if (!(seconds >= 0)) seconds = 0;
    const auto total = static_cast<long long>(std::llround(seconds));
    const long long h = total / 3600, m = (total / 60) % 60, sec = total % 60;
    if (h > 0) return fmt("%lld:%02lld:%02lld", h, m, sec);
    return fmt("%lld:%02lld", m, sec);
}

std::string format_progress(const Progress& p, int bar_width) {
    const double frac = p.runs_total > 0 ? std::clamp(static_cast<double>(p.runs_done) / static_cast<double>(p.runs_total), 0.0, 1.0) : 0.0;
    const int width = std::max(0, bar_width);
    const int filled = static_cast<int>(std::lround(frac * width));
    // Built by appending: GCC 12 warns falsely (-Wrestrict) on "[" + std::string(...).
    std::string line = "[";
    line.append(static_cast<size_t>(filled), '#');
    line.append(static_cast<size_t>(width - filled), '-');
    line += "] ";
    line += std::to_string(p.items_done) + "/" + std::to_string(p.items_total) + " items  " +
            format_duration(p.elapsed_seconds) + " elapsed";
    if (p.runs_done > 0 && p.runs_done < p.runs_total)
        line += "  ~" + format_duration(p.elapsed_seconds / static_cast<double>(p.runs_done) *
                                        static_cast<double>(p.runs_total - p.runs_done)) + " left";
    if (!p.current.empty()) line += "  " + p.current;
    return line;
}

} // namespace rwd::bench
