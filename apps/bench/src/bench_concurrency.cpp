// run_concurrency_sweep: the unbatched baseline, then per level the interleaved plain and
// speculative batched runs, each request compared with its baseline; and the sweep's table.
#include "rewind/bench/bench_concurrency.h"

#include <cstdarg>
#include <cstdio>

#include "rewind/bench/bench_stats.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/kv_cache.h"
#include "rewind/speculate/grammar_constraint.h"

namespace rwd::bench {
namespace {

// The unbatched plain decoding of every request, under its own grammar when it has one: its
// tokens (what every batched run must give) and the single-request throughput and latency.
struct Baseline {
    std::vector<std::vector<TokenId>> tokens; // [request]
    double tokens_per_second = 0;
    double latency_p50 = 0;
};

Baseline measure_baseline(Context& ctx, const std::vector<WorkItem>& items, const BatchRunOptions& plain) {
    Baseline b;
    std::vector<double> latency;
    int64_t tokens = 0;
    double seconds = 0;
    const Model& model = ctx.model();
    grammar::GrammarCache grammars; // each distinct item grammar compiled once, as run_batched does
    for (const WorkItem& item : items) {
        KvCache cache(model);
        GenerateOptions g;
        g.max_tokens = plain.max_tokens > 0 ? plain.max_tokens : item.max_tokens;
        g.sampler = plain.sampler;
        const std::unique_ptr<TokenConstraint> constraint =
            item.grammar.empty() ? nullptr : make_grammar_constraint(item.grammar, model.tokenizer(), &grammars);
        const auto r = generate_plain(ctx, cache, model.tokenizer().encode(item.prompt), g, {}, constraint.get());
        b.tokens.push_back(r.tokens);
        latency.push_back(r.prompt_seconds + r.generate_seconds);
        tokens += static_cast<int64_t>(r.tokens.size());
        seconds += r.prompt_seconds + r.generate_seconds;
    }
    b.tokens_per_second = seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0;
    b.latency_p50 = median(latency);
    return b;
}

// One level's figures over the repeats, before the medians are taken.
struct LevelSamples {
    std::vector<double> plain_tps, spec_tps, plain_lat, spec_lat, plain_dtps, spec_dtps, plain_stps, spec_stps;
    int64_t spec_rows = 0, spec_emitted = 0, full_passes = 0; // decoding passes with all requests
    int64_t emitted = 0, passes = 0;                         // the speculative requests' own
};

void add_run(LevelSamples& l, const BatchRun& p, const BatchRun& s, int c) {
    l.plain_tps.push_back(p.tokens_per_second());
    l.spec_tps.push_back(s.tokens_per_second());
    l.plain_dtps.push_back(p.decode_tokens_per_second());
    l.spec_dtps.push_back(s.decode_tokens_per_second());
    const auto at = static_cast<size_t>(c);
    l.plain_stps.push_back(p.decode_tokens_per_second_at(at));
    l.spec_stps.push_back(s.decode_tokens_per_second_at(at));
    if (at < s.decode_levels.size()) {
        l.spec_rows += s.decode_levels[at].rows;
        l.spec_emitted += s.decode_levels[at].tokens;
        l.full_passes += s.decode_levels[at].passes;
    }
    for (const auto& it : p.items) l.plain_lat.push_back(it.result.latency_seconds);
    for (const auto& it : s.items) {
        l.spec_lat.push_back(it.result.latency_seconds);
        l.emitted += it.result.stats.emitted;
        l.passes += it.result.stats.passes;
    }
}

ConcurrencyRow row_of(const LevelSamples& l, int c) {
    ConcurrencyRow r;
    r.concurrency = c;
    r.plain_tps = median(l.plain_tps);
    r.spec_tps = median(l.spec_tps);
    r.plain_latency = median(l.plain_lat);
    r.spec_latency = median(l.spec_lat);
    r.plain_decode_tps = median(l.plain_dtps);
    r.spec_decode_tps = median(l.spec_dtps);
    r.plain_steady_tps = median(l.plain_stps);
    r.spec_steady_tps = median(l.spec_stps);
    r.spec_tokens_per_pass = l.passes ? static_cast<double>(l.emitted) / static_cast<double>(l.passes) : 0.0;
    const double fp = l.full_passes > 0 ? static_cast<double>(l.full_passes) : 1.0;
    r.spec_rows_per_full_pass = static_cast<double>(l.spec_rows) / fp;
    r.spec_tokens_per_full_pass = static_cast<double>(l.spec_emitted) / fp;
    return r;
}

void check_options(const std::vector<WorkItem>& items, const ConcurrencyOptions& o) {
    if (items.empty()) throw Error("bench: --concurrency needs a workload with at least one item");
    if (o.levels.empty()) throw Error("bench: --concurrency needs at least one level");
    for (int c : o.levels)
        if (c < 1) throw Error("bench: --concurrency wants positive integers, got " + std::to_string(c));
    if (o.repeat < 1) throw Error("bench: --repeat must be >= 1");
}

// printf into a string (the table's cells keep the CLI's fixed formats).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
    va_list a;
    va_start(a, fmt);
    va_list b;
    va_copy(b, a);
    const int n = std::vsnprintf(nullptr, 0, fmt, a);
    va_end(a);
    std::string s(static_cast<size_t>(n > 0 ? n : 0) + 1, '\0');
    std::vsnprintf(s.data(), s.size(), fmt, b);
    va_end(b);
    s.pop_back();
    return s;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

} // namespace

ConcurrencySweep run_concurrency_sweep(Context& ctx, const std::vector<WorkItem>& items, const ConcurrencyOptions& o) {
    check_options(items, o);
    const Baseline base = measure_baseline(ctx, items, o.plain);
    ConcurrencySweep sweep;
    sweep.requests = items.size();
    sweep.solo_tps = base.tokens_per_second;
    sweep.solo_latency_p50 = base.latency_p50;
    auto check = [&](const BatchRun& run, const char* what, int c) {
        for (const BatchRunItem& it : run.items) {
            if (!it.result.failed && it.result.tokens == base.tokens[it.index]) continue;
            sweep.mismatches.push_back(ConcurrencyMismatch{.item = items[it.index].id, .what = what, .concurrency = c,
                                                           .error = it.result.failed ? it.result.error : ""});
        }
    };
    BatchRunOptions plain = o.plain, spec = o.spec;
    for (int c : o.levels) {
        plain.concurrency = spec.concurrency = c;
        LevelSamples l;
        for (int rep = 0; rep < o.repeat; ++rep) {
            const BatchRun p = run_batched(ctx, items, plain);
            const BatchRun s = run_batched(ctx, items, spec);
            check(p, "plain batching", c);
            check(s, "speculative batching", c);
            add_run(l, p, s, c);
        }
        sweep.rows.push_back(row_of(l, c));
    }
    return sweep;
}

void write_concurrency_markdown(std::ostream& out, const ConcurrencySweep& s, const ConcurrencyOptions& o,
                                const std::string& heading) {
    out << heading;
    out << format("single requests, unbatched plain decoding: %.1f tokens/s, p50 latency %.3f s\n\n", s.solo_tps,
                  s.solo_latency_p50);
    out << format("| concurrency | plain tok/s | vs 1 request | %s k=%d tok/s | spec / plain | tokens per request-pass | "
                  "p50 latency plain (s) | p50 latency spec (s) | p50 plain / single | decode plain tok/s | decode vs 1 | "
                  "decode spec / plain | all-c decode plain tok/s | all-c vs 1 | all-c spec / plain | all-c spec rows, "
                  "tokens per pass |\n",
                  o.spec.spec.c_str(), o.spec.k);
    out << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    // "vs 1": against concurrency 1 of this run when it was measured.
    ConcurrencyRow c1;
    for (const ConcurrencyRow& r : s.rows)
        if (r.concurrency == 1) c1 = r;
    const double base = c1.plain_tps > 0 ? c1.plain_tps : s.solo_tps;
    for (const ConcurrencyRow& r : s.rows) {
        out << format("| %d | %.1f | %.2fx | %.1f | %.2fx | %.2f | %.3f | %.3f | %.2fx | %.1f | %.2fx | %.2fx | %.1f | "
                      "%.2fx | %.2fx | %.1f, %.1f |\n",
                      r.concurrency, r.plain_tps, ratio(r.plain_tps, base), r.spec_tps, ratio(r.spec_tps, r.plain_tps),
                      r.spec_tokens_per_pass, r.plain_latency, r.spec_latency,
                      ratio(r.plain_latency, s.solo_latency_p50), r.plain_decode_tps,
                      ratio(r.plain_decode_tps, c1.plain_decode_tps), ratio(r.spec_decode_tps, r.plain_decode_tps),
                      r.plain_steady_tps, ratio(r.plain_steady_tps, c1.plain_steady_tps),
                      ratio(r.spec_steady_tps, r.plain_steady_tps), r.spec_rows_per_full_pass,
                      r.spec_tokens_per_full_pass);
    }
    out << "\n\"tok/s\": all generated tokens over the wall time, prompts included; \"decode\": the passes that "
           "carried no prompt chunk only (tokens they emitted over their time); \"all-c\": the decoding passes that "
           "carried all c requests (the steady state, without ramp-up and tail; 0 if none).\n";
    out << "\"vs 1 request\": against concurrency 1 of this run when measured, else unbatched plain decoding. "
           "Lossless: "
        << (s.mismatches.empty() ? "every request equals its own unbatched plain decoding" : "FAILED") << ".\n";
}

} // namespace rwd::bench
