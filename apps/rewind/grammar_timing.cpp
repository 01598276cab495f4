// Mask timings for `rewind grammar --time-masks`. Timings on a shared machine are noisy: quote
// them with the load, and compare runs made side by side.
#include "grammar_timing.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "rewind/bench/bench_workload.h"
#include "rewind/error.h"
#include "rewind/grammar/token_mask.h"

namespace rwd::cli {

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

// Quantile `f` of `v` (sorted here); 0 when empty.
double quantile(std::vector<double>& v, double f) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(f * static_cast<double>(v.size())))];
}

std::string summary(std::vector<double> us) {
    if (us.empty()) return "no masks";
    char buf[160];
    const double med = quantile(us, 0.5), p99 = quantile(us, 0.99);
    std::snprintf(buf, sizeof buf, "%5zu masks, median %7.1f us, p99 %8.1f us, max %8.1f us", us.size(), med, p99, us.back());
    return buf;
}

struct GrammarStats {
    std::string name; // the first item's id
    std::vector<double> compile_first_ms, compile_cached_ms, first_us, cached_us;
};

struct SlowMask {
    double us;
    size_t grammar;
    std::string before; // the end of the text before the mask
};

// One random valid path: masks timed into `us`; the slow ones of a first run into `slow`.
void walk_path(grammar::TokenMatcher& tm, const Tokenizer& tok, std::mt19937& rng, int steps, std::vector<double>& us,
               std::vector<SlowMask>* slow, size_t gi) {
    std::vector<uint32_t> mask(static_cast<size_t>((tok.n_vocab() + 31) / 32));
    std::vector<TokenId> allowed;
    std::string text;
    for (int step = 0; step < steps; ++step) {
        const auto t0 = Clock::now();
        tm.fill_mask(mask);
        us.push_back(us_since(t0));
        if (slow) slow->push_back({us.back(), gi, text.substr(text.size() - std::min<size_t>(text.size(), 40))});
        allowed.clear();
        for (size_t w = 0; w < mask.size(); ++w)
            for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1)
                allowed.push_back(static_cast<TokenId>(w * 32 + static_cast<size_t>(std::countr_zero(bits))));
        std::erase_if(allowed, [&](TokenId t) { return tm.vocab().is_eog(t); });
        if (allowed.empty()) break;
        // Mostly short tokens, so paths go deep into the grammar rather than into long words.
        TokenId pick = allowed[rng() % allowed.size()];
        for (int tries = 0; tries < 4 && tm.vocab().bytes(pick).size() > 3; ++tries) pick = allowed[rng() % allowed.size()];
        if (!tm.accept(pick)) throw Error(ErrorCode::state, "time-masks: an allowed token was refused (masks and accept disagree)");
        text += tm.vocab().bytes(pick);
    }
}

void print_results(const std::vector<GrammarStats>& stats, std::vector<SlowMask>& slow, int n_slow) {
    std::vector<double> all_first, all_cached, all_compile;
    for (size_t i = 0; i < stats.size(); ++i) {
        const GrammarStats& s = stats[i];
        std::vector<double> c = s.compile_first_ms, l = s.compile_cached_ms;
        const double c_med = quantile(c, 0.5), l_med = quantile(l, 0.5); // sorts them
        std::printf("grammar %zu (%s): compile median %.1f ms, max %.1f ms; cached lookup %.2f ms\n", i, s.name.c_str(), c_med,
                    c.empty() ? 0.0 : c.back(), l_med);
        std::printf("  first run:   %s\n  cached runs: %s\n", summary(s.first_us).c_str(), summary(s.cached_us).c_str());
        all_first.insert(all_first.end(), s.first_us.begin(), s.first_us.end());
        all_cached.insert(all_cached.end(), s.cached_us.begin(), s.cached_us.end());
        all_compile.insert(all_compile.end(), s.compile_first_ms.begin(), s.compile_first_ms.end());
    }
    const double compile_med = quantile(all_compile, 0.5); // sorts it
    std::printf("workload: %zu grammars, compile median %.1f ms, max %.1f ms\n", stats.size(), compile_med,
                all_compile.empty() ? 0.0 : all_compile.back());
    std::printf("  first run:   %s\n  cached runs: %s\n", summary(all_first).c_str(), summary(all_cached).c_str());
    std::sort(slow.begin(), slow.end(), [](const SlowMask& a, const SlowMask& b) { return a.us > b.us; });
    for (size_t i = 0; i < slow.size() && i < static_cast<size_t>(n_slow); ++i)
        std::printf("slow first-run mask: %8.1f us, grammar %zu, after ...%s\n", slow[i].us, slow[i].grammar,
                    nlohmann::json(slow[i].before).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

} // namespace

void time_text_masks(const std::string& gbnf, const Tokenizer& tok, const std::string& text) {
    grammar::GrammarCache cache;
    auto t0 = Clock::now();
    const auto vocab = cache.vocab(tok);
    const double index_us = us_since(t0);
    t0 = Clock::now();
    const auto c = cache.get(gbnf, tok);
    std::printf("vocabulary index: %.1f ms; grammar compile: %.2f ms\n", index_us / 1000, us_since(t0) / 1000);
    const std::vector<TokenId> ids = tok.encode(text, AddBos::No);
    grammar::TokenMatcher tm(c.grammar, c.vocab, {}, c.local_masks);
    std::vector<uint32_t> mask(static_cast<size_t>((vocab->n_vocab() + 31) / 32));
    for (const char* pass : {"fresh matcher", "warm caches"}) {
        tm.matcher().reset();
        std::vector<double> us;
        for (TokenId t : ids) {
            const auto m0 = Clock::now();
            tm.fill_mask(mask);
            us.push_back(us_since(m0));
            if (!tm.accept(t)) break;
        }
        std::vector<double> sorted = us;
        std::printf("mask time (%s): %zu masks, median %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us\n", pass, us.size(),
                    quantile(sorted, 0.5), quantile(sorted, 0.9), quantile(sorted, 0.99), sorted.empty() ? 0.0 : sorted.back());
    }
}

void time_workload_masks(const WorkloadTiming& w, const Tokenizer& tok) {
    const std::vector<bench::WorkItem> items = bench::load_workload(w.workload);
    std::map<std::string, size_t> index; // grammar text -> stats slot
    std::vector<GrammarStats> stats;
    std::vector<SlowMask> slow;
    double index_ms = 0;
    for (int round = 0; round < w.rounds; ++round) {
        grammar::GrammarCache cache; // fresh: every grammar has its first run in each round
        auto t0 = Clock::now();
        cache.vocab(tok);
        if (round == 0) index_ms = us_since(t0) / 1000;
        std::map<std::string, bool> seen;
        for (size_t i = 0; i < items.size(); ++i) {
            const bench::WorkItem& item = items[i];
            if (item.grammar.empty()) continue;
            auto [it, added] = index.emplace(item.grammar, stats.size());
            if (added) stats.push_back({item.id, {}, {}, {}, {}});
            GrammarStats& s = stats[it->second];
            const bool first = seen.emplace(item.grammar, true).second;
            t0 = Clock::now();
            const auto c = cache.get(item.grammar, tok);
            (first ? s.compile_first_ms : s.compile_cached_ms).push_back(us_since(t0) / 1000);
            grammar::TokenMatcher tm(c.grammar, c.vocab, {}, c.local_masks);
            std::mt19937 rng(w.seed + static_cast<uint32_t>(round * 100003 + static_cast<int>(i)));
            walk_path(tm, tok, rng, w.steps, first ? s.first_us : s.cached_us, first ? &slow : nullptr, it->second);
        }
    }
    std::printf("vocabulary index: %.1f ms (once per vocabulary); %d rounds, fresh caches each\n", index_ms, w.rounds);
    print_results(stats, slow, w.slowest);
}

} // namespace rwd::cli
