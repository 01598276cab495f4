// Per-configuration summaries of a benchmark run. Speedups are per-item ratios taken within one
// run (baseline and configuration interleaved), then the median over items: robust to the odd
// slow item and to machine drift between items.
#include "rewind/bench/bench_result.h"

#include <algorithm>

#include "rewind/error.h"

namespace rwd::bench {

const char* source_name(Source s) {
    switch (s) {
    case Source::Baseline: return "baseline";
    case Source::Ngram: return "ngram";
    case Source::Ref: return "ref";
    case Source::Draft: return "draft";
    case Source::Auto: return "auto";
    case Source::AutoFirst: return "auto-first";
    case Source::Suffix: return "suffix";
    case Source::Forced: return "forced";
    }
    return "?";
}

Source parse_source(std::string_view name) {
    for (Source s : {Source::Baseline, Source::Ngram, Source::Ref, Source::Draft, Source::Auto, Source::AutoFirst,
                     Source::Suffix, Source::Forced})
        if (name == source_name(s)) return s;
    throw Error("unknown guess source '" + std::string(name) + "' (choose from ngram, ref, draft, auto, auto-first, suffix, forced)");
}

std::string Config::label() const {
    if (source == Source::Baseline) return "baseline";
    std::string s = std::string(source_name(source)) + (adaptive || cost ? " k<=" : " k=") + std::to_string(k);
    if (adaptive) s += " adaptive";
    if (branches > 0) s += " tree=" + std::to_string(branches);
    if (cost) s += " cost";
    return s;
}

double Cell::median_seconds() const {
    std::vector<double> t;
    t.reserve(repeats.size());
    for (const auto& r : repeats) t.push_back(r.seconds);
    return median(t);
}

bool BenchResult::lossless() const {
    for (const auto& item : items)
        for (const auto& c : item.cells)
            if (!c.lossless()) return false;
    return true;
}

std::vector<std::string> BenchResult::kinds() const {
    std::vector<std::string> out;
    for (const auto& item : items)
        if (!item.kind.empty() && std::find(out.begin(), out.end(), item.kind) == out.end())
            out.push_back(item.kind);
    return out;
}

std::vector<LosslessFailure> lossless_failures(const BenchResult& r) {
    std::vector<LosslessFailure> out;
    for (const auto& item : r.items)
        for (size_t ci = 0; ci < item.cells.size() && ci < r.configs.size(); ++ci)
            if (!item.cells[ci].lossless())
                out.push_back({item.id, r.configs[ci].label(), item.cells[ci].first_difference,
                               item.cells[ci].failed_repeat});
    return out;
}

std::vector<ConfigSummary> summarize_configs(const BenchResult& r, std::string_view kind) {
    std::vector<ConfigSummary> out;
    for (size_t ci = 0; ci < r.configs.size(); ++ci) {
        ConfigSummary s;
        s.config = r.configs[ci];
        std::vector<double> tps, base_t, cfg_t;
        int64_t tokens = 0, passes = 0, proposed = 0, accepted = 0, depth = 0;
        double propose_s = 0, verify_s = 0;
        for (const auto& item : r.items) {
            if (!kind.empty() && item.kind != kind) continue;
            if (item.cells.size() != r.configs.size() || item.cells[0].repeats.empty())
                throw Error("benchmark item '" + item.id + "' has no baseline measurement");
            const Cell& cell = item.cells[ci];
            if (cell.repeats.empty()) continue;
            ++s.items;
            std::vector<double> rates;
            for (const auto& rep : cell.repeats) {
                if (rep.seconds > 0) rates.push_back(static_cast<double>(rep.tokens) / rep.seconds);
                tokens += rep.tokens;
                passes += rep.passes;
                proposed += rep.proposed;
                accepted += rep.accepted;
                depth += rep.depth;
                propose_s += rep.propose_seconds;
                verify_s += rep.verify_seconds;
            }
            if (!rates.empty()) tps.push_back(median(rates));
            base_t.push_back(item.cells[0].median_seconds());
            cfg_t.push_back(cell.median_seconds());
            if (!cell.lossless()) ++s.lossless_failures;
        }
        s.tokens_per_s = summarize(tps);
        if (!cfg_t.empty()) {
            const auto sp = ratios(base_t, cfg_t);
            s.speedup = summarize(sp);
        }
        if (proposed > 0) s.acceptance = static_cast<double>(accepted) / static_cast<double>(proposed);
        if (passes > 0) {
            s.tokens_per_pass = static_cast<double>(tokens) / static_cast<double>(passes);
            s.guesses_per_pass = static_cast<double>(proposed) / static_cast<double>(passes);
            s.depth_per_pass = static_cast<double>(depth) / static_cast<double>(passes);
        }
        if (propose_s + verify_s > 0) s.propose_share = propose_s / (propose_s + verify_s);
        out.push_back(s);
    }
    return out;
}

} // namespace rwd::bench
