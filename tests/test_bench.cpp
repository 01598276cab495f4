// Tests of the `rewind bench` harness library: statistics, the lossless comparison, workload
// parsing (including malformed lines), the Markdown/JSON/SVG writers, and a short end-to-end run
// on the bundled model. No timing assertions: timings on a shared machine are noise.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <sys/mman.h>

#include "model_test_util.h"
#include "rewind/error.h"
#include "rewind/bench/bench_cost.h"
#include "rewind/bench/bench_memory.h"
#include "rewind/bench/bench_report.h"
#include "rewind/bench/bench_runner.h"
#include "rewind/bench/bench_stats.h"
#include "rewind/bench/bench_workload.h"

namespace rb = rwd::bench;
using nlohmann::json;

namespace {

std::string error_of(const auto& fn) {
    try {
        fn();
    } catch (const rwd::Error& e) {
        return e.what();
    }
    return "(no error)";
}

size_t count(const std::string& s, const std::string& needle) {
    size_t n = 0;
    for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + needle.size())) ++n;
    return n;
}

} // namespace

TEST(BenchStats, MedianOfOddAndEvenCounts) {
    const std::vector<double> odd{5, 1, 3};
    EXPECT_DOUBLE_EQ(rb::median(odd), 3.0);
    const std::vector<double> even{4, 1, 3, 2};
    EXPECT_DOUBLE_EQ(rb::median(even), 2.5);
    const std::vector<double> one{7};
    EXPECT_DOUBLE_EQ(rb::median(one), 7.0);
    EXPECT_NE(error_of([] { rb::median(std::vector<double>{}); }).find("empty"), std::string::npos);
}

TEST(BenchStats, QuantilesInterpolate) {
    const std::vector<double> v{1, 2, 3, 4, 5};
    EXPECT_DOUBLE_EQ(rb::quantile(v, 0.0), 1.0);
    EXPECT_DOUBLE_EQ(rb::quantile(v, 0.25), 2.0);
    EXPECT_DOUBLE_EQ(rb::quantile(v, 1.0), 5.0);
    const std::vector<double> w{10, 20};
    EXPECT_DOUBLE_EQ(rb::quantile(w, 0.75), 17.5);
    EXPECT_THROW(rb::quantile(v, 1.5), rwd::Error);

    const auto s = rb::summarize(std::vector<double>{4, 8, 1, 2});
    EXPECT_EQ(s.n, 4);
    EXPECT_DOUBLE_EQ(s.median, 3.0);
    EXPECT_DOUBLE_EQ(s.min, 1.0);
    EXPECT_DOUBLE_EQ(s.max, 8.0);
    EXPECT_DOUBLE_EQ(s.p25, 1.75);
    EXPECT_DOUBLE_EQ(s.p75, 5.0);
    EXPECT_EQ(rb::summarize(std::vector<double>{}).n, 0);
}

TEST(BenchStats, Ratios) {
    const std::vector<double> base{2.0, 3.0}, cfg{1.0, 4.0};
    const auto r = rb::ratios(base, cfg);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_DOUBLE_EQ(r[0], 2.0);
    EXPECT_DOUBLE_EQ(r[1], 0.75);
    EXPECT_THROW(rb::ratios(base, std::vector<double>{1.0}), rwd::Error);
    EXPECT_THROW(rb::ratios(base, std::vector<double>{1.0, 0.0}), rwd::Error);
}

TEST(BenchStats, FirstDifference) {
    using V = std::vector<rwd::TokenId>;
    EXPECT_EQ(rb::first_difference(V{1, 2, 3}, V{1, 2, 3}), -1);
    EXPECT_EQ(rb::first_difference(V{1, 2, 3}, V{1, 9, 3}), 1);
    EXPECT_EQ(rb::first_difference(V{1, 2, 3}, V{7, 2, 3}), 0);
    EXPECT_EQ(rb::first_difference(V{1, 2, 3}, V{1, 2}), 2);    // cut short
    EXPECT_EQ(rb::first_difference(V{1, 2}, V{1, 2, 3}), 2);    // ran on
    EXPECT_EQ(rb::first_difference(V{}, V{}), -1);
}

TEST(BenchWorkload, ParsesLinesWithOptionalFields) {
    std::istringstream in(
        R"({"id": "a", "kind": "edit", "prompt": "x = 1\n", "references": ["doc one", "doc two"], "max_tokens": 8})"
        "\n\n"
        R"({"id": 7, "prompt": "def f():", "max_tokens": 16})"
        "\r\n");
    const auto items = rb::parse_workload(in, "dir/w.jsonl");
    ASSERT_EQ(items.size(), 2u);
    EXPECT_EQ(items[0].id, "a");
    EXPECT_EQ(items[0].kind, "edit");
    EXPECT_EQ(items[0].workload, "w");
    EXPECT_EQ(items[0].prompt, "x = 1\n");
    ASSERT_EQ(items[0].references.size(), 2u);
    EXPECT_EQ(items[0].references[1], "doc two");
    EXPECT_EQ(items[0].max_tokens, 8);
    EXPECT_EQ(items[1].id, "7");
    EXPECT_EQ(items[1].kind, "");
    EXPECT_TRUE(items[1].references.empty());
    EXPECT_EQ(rb::take_first(items, 1).size(), 1u);
    EXPECT_EQ(rb::take_first(items, 0).size(), 2u);
    EXPECT_EQ(rb::take_first(items, 5).size(), 2u);
}

TEST(BenchWorkload, MalformedLinesNameFileAndLine) {
    auto parse = [](const std::string& text) {
        std::istringstream in(text);
        return error_of([&] { rb::parse_workload(in, "bad.jsonl"); });
    };
    const std::string ok = R"({"id": "a", "prompt": "p", "max_tokens": 4})";
    std::string e = parse(ok + "\n" + ok.substr(0, 10) + "\n");
    EXPECT_NE(e.find("bad.jsonl:2:"), std::string::npos) << e;
    EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;

    e = parse(ok + "\n\n" + R"({"id": "b", "max_tokens": 4})");
    EXPECT_NE(e.find("bad.jsonl:3:"), std::string::npos) << e;
    EXPECT_NE(e.find("\"prompt\""), std::string::npos) << e;

    e = parse(R"({"id": "a", "prompt": "p", "max_tokens": -1})");
    EXPECT_NE(e.find("bad.jsonl:1:"), std::string::npos) << e;
    EXPECT_NE(e.find("max_tokens"), std::string::npos) << e;

    e = parse(R"({"id": "a", "prompt": "p", "max_tokens": 4, "references": "not a list"})");
    EXPECT_NE(e.find("references"), std::string::npos) << e;
    e = parse(R"([1, 2])");
    EXPECT_NE(e.find("expected a JSON object"), std::string::npos) << e;
    e = parse(ok + "\n" + ok);
    EXPECT_NE(e.find("bad.jsonl:2: duplicate id"), std::string::npos) << e;

    e = error_of([] { rb::load_workload("/nonexistent/w.jsonl"); });
    EXPECT_NE(e.find("/nonexistent/w.jsonl"), std::string::npos) << e;
}

TEST(BenchWorkload, LoadsSharedWorkloads) {
    const auto edit = rb::load_workload(std::string(REWIND_SHARED_DIR) + "/workloads/edit.jsonl");
    ASSERT_FALSE(edit.empty());
    EXPECT_EQ(edit[0].kind, "edit");
    EXPECT_EQ(edit[0].workload, "edit");
    EXPECT_GT(edit[0].max_tokens, 0);
    const auto ref = rb::load_workload(std::string(REWIND_SHARED_DIR) + "/workloads/ref.jsonl");
    ASSERT_FALSE(ref.empty());
    EXPECT_FALSE(ref[0].references.empty());
}

TEST(BenchConfigs, MakeConfigsCrossesSourcesKsAndPolicies) {
    const std::vector<rb::Source> sources{rb::Source::Ngram, rb::Source::Draft};
    const std::vector<int> ks{1, 4};
    const auto fixed = rb::make_configs(sources, ks, rb::KModes::Fixed);
    ASSERT_EQ(fixed.size(), 4u);
    EXPECT_EQ(fixed[0].label(), "ngram k=1");
    EXPECT_EQ(fixed[3].label(), "draft k=4");
    const auto both = rb::make_configs(sources, ks, rb::KModes::Both);
    EXPECT_EQ(both.size(), 6u); // adaptive k=1 is fixed k=1
    EXPECT_EQ(both[2].label(), "ngram k<=4 adaptive");
    EXPECT_EQ(rb::make_configs(sources, ks, rb::KModes::Adaptive).size(), 4u);
    EXPECT_THROW(rb::make_configs(sources, std::vector<int>{0}, rb::KModes::Fixed), rwd::Error);
    EXPECT_THROW(rb::make_configs(sources, std::vector<int>{4, 4}, rb::KModes::Fixed), rwd::Error);
    EXPECT_EQ(rb::parse_source("auto"), rb::Source::Auto);
    EXPECT_NE(error_of([] { rb::parse_source("magic"); }).find("ngram, ref, draft, auto"), std::string::npos);
}

namespace {

// A synthetic result: two kinds, baseline + ngram at k 2 and 4 + ref at k 4 (edit item only).
rb::BenchResult synthetic_result() {
    rb::BenchResult r;
    r.setup.model_path = "/models/tiny & small.gguf";
    r.setup.draft_path = "/models/draft.gguf";
    r.setup.workloads = {"/w/edit.jsonl", "/w/free.jsonl"};
    r.setup.threads = 1;
    r.setup.repeat = 2;
    r.setup.seed = 42;
    r.machine = {"Test CPU", "avx2", 2, 0.5};
    r.configs = {rb::Config{}, {rb::Source::Ngram, 2, false}, {rb::Source::Ngram, 4, false}, {rb::Source::Ref, 4, false}};
    auto sample = [](double s, int64_t tokens, int64_t passes, int64_t proposed, int64_t accepted) {
        rb::RunSample x;
        x.seconds = s;
        x.tokens = tokens;
        x.passes = passes;
        x.proposed = proposed;
        x.accepted = accepted;
        x.propose_seconds = s * 0.1;
        x.verify_seconds = s * 0.9;
        return x;
    };
    auto cell = [&](double s1, double s2, int64_t passes, int64_t proposed, int64_t accepted) {
        rb::Cell c;
        c.repeats = {sample(s1, 100, passes, proposed, accepted), sample(s2, 100, passes, proposed, accepted)};
        return c;
    };
    rb::ItemResult a;
    a.id = "edit-0";
    a.kind = "edit";
    a.workload = "edit";
    a.cells = {cell(1.0, 1.2, 100, 0, 0), cell(0.5, 0.5, 40, 80, 60), cell(0.4, 0.6, 30, 120, 70), cell(0.8, 0.8, 60, 80, 40)};
    rb::ItemResult b;
    b.id = "free-0";
    b.kind = "free";
    b.workload = "free";
    b.cells = {cell(1.0, 1.0, 100, 0, 0), cell(1.0, 1.0, 90, 20, 10), cell(2.0, 2.0, 95, 40, 5), rb::Cell{}};
    r.items = {a, b};
    r.cost_curve = {{1, 0.001, {0.001}}, {2, 0.0015, {0.0015}}};
    return r;
}

} // namespace

TEST(BenchResult, SummariesUsePerItemRatiosAndPooledCounts) {
    const auto r = synthetic_result();
    const auto rows = rb::summarize_configs(r);
    ASSERT_EQ(rows.size(), 4u);
    // ngram k=2: item ratios 1.1/0.5 = 2.2 and 1.0/1.0 = 1.0 -> median 1.6.
    EXPECT_NEAR(rows[1].speedup.median, 1.6, 1e-12);
    EXPECT_NEAR(rows[1].acceptance, 140.0 / 200.0, 1e-12);
    EXPECT_NEAR(rows[1].tokens_per_pass, 400.0 / 260.0, 1e-12);
    EXPECT_NEAR(rows[1].propose_share, 0.1, 1e-12);
    EXPECT_DOUBLE_EQ(rows[0].speedup.median, 1.0);
    EXPECT_LT(rows[0].acceptance, 0); // the baseline proposes nothing
    EXPECT_EQ(rows[3].items, 1);      // ref measured on the edit item only
    const auto edit = rb::summarize_configs(r, "edit");
    EXPECT_NEAR(edit[2].speedup.median, 1.1 / 0.5, 1e-12);
    EXPECT_EQ(r.kinds(), (std::vector<std::string>{"edit", "free"}));
    EXPECT_TRUE(r.lossless());
}

TEST(BenchReport, MarkdownHasTablesPerKindAndVerdict) {
    auto r = synthetic_result();
    std::ostringstream md;
    rb::write_markdown(md, r);
    const std::string s = md.str();
    EXPECT_NE(s.find("| configuration | tokens/s | speedup |"), std::string::npos) << s;
    EXPECT_NE(s.find("| ngram k=2 |"), std::string::npos);
    EXPECT_NE(s.find("1.60x"), std::string::npos);
    EXPECT_NE(s.find("### edit (1 item)"), std::string::npos);
    EXPECT_NE(s.find("### free (1 item)"), std::string::npos);
    EXPECT_NE(s.find("tiny & small.gguf (draft draft.gguf)"), std::string::npos);
    EXPECT_NE(s.find("Verification cost"), std::string::npos);
    EXPECT_NE(s.find("| 2 | 1.500 | 1.50x | 0.750 |"), std::string::npos) << s;
    EXPECT_NE(s.find("Lossless: ✓"), std::string::npos);
    EXPECT_EQ(count(s, "| baseline |"), 3u); // overall + two kinds

    r.items[0].cells[2].first_difference = 17;
    r.items[0].cells[2].failed_repeat = 1;
    std::ostringstream bad;
    rb::write_markdown(bad, r);
    EXPECT_NE(bad.str().find("item edit-0, ngram k=4: first difference at generated token 17 (repeat 1)"),
              std::string::npos) << bad.str();
    EXPECT_NE(bad.str().find("✗"), std::string::npos);
}

TEST(BenchReport, JsonParsesBackWithEveryRawFigure) {
    auto r = synthetic_result();
    r.items[1].cells[1].first_difference = 3;
    r.items[1].cells[1].failed_repeat = 0;
    const json j = json::parse(rb::to_json(r));
    EXPECT_EQ(j["format"], "rewind-bench/1");
    EXPECT_EQ(j["setup"]["model_file"], "tiny & small.gguf");
    EXPECT_EQ(j["setup"]["draft_file"], "draft.gguf");
    EXPECT_EQ(j["setup"]["threads"], 1);
    EXPECT_EQ(j["setup"]["seed"], 42);
    EXPECT_EQ(j["machine"]["cpu_model"], "Test CPU");
    EXPECT_EQ(j["machine"]["simd"], "avx2");
    EXPECT_DOUBLE_EQ(j["machine"]["load_average"].get<double>(), 0.5);
    ASSERT_EQ(j["configs"].size(), 4u);
    ASSERT_EQ(j["items"].size(), 2u);
    const auto& run = j["items"][0]["runs"][2];
    EXPECT_EQ(run["config"], "ngram k=4");
    ASSERT_EQ(run["repeats"].size(), 2u);
    EXPECT_DOUBLE_EQ(run["repeats"][1]["seconds"].get<double>(), 0.6);
    EXPECT_EQ(run["repeats"][0]["accepted"], 70);
    EXPECT_EQ(j["items"][1]["runs"][3]["repeats"].size(), 0u);
    EXPECT_FALSE(j["lossless"].get<bool>());
    ASSERT_EQ(j["lossless_failures"].size(), 1u);
    EXPECT_EQ(j["lossless_failures"][0]["item"], "free-0");
    EXPECT_EQ(j["lossless_failures"][0]["first_difference"], 3);
    EXPECT_TRUE(j["summary"]["by_kind"].contains("edit"));
    EXPECT_EQ(j["summary"]["all"].size(), 4u);
    EXPECT_EQ(j["cost_curve"]["points"].size(), 2u);
}

TEST(BenchReport, JsonRoundTrips) {
    auto r = synthetic_result();
    r.items[0].cells[1].first_difference = 5;
    r.items[0].cells[1].failed_repeat = 1;
    r.throughput = {128, 64, 0.01, 0.02, 0.03};
    const std::string text = rb::to_json(r);
    const rb::BenchResult back = rb::from_json(text, "r.json");
    EXPECT_EQ(rb::to_json(back), text);
    EXPECT_FALSE(back.lossless());
    const std::string e = error_of([] { rb::from_json(R"({"format": "rewind-bench/1"})", "r.json"); });
    EXPECT_NE(e.find("r.json: malformed"), std::string::npos) << e;
    EXPECT_NE(error_of([] { rb::from_json("{}", "x.json"); }).find("not a rewind bench report"), std::string::npos);
}

TEST(BenchReport, SvgIsWellFormedWithAxesLegendAndTitle) {
    const auto r = synthetic_result();
    std::ostringstream out;
    rb::write_svg(out, r);
    const std::string s = out.str();
    EXPECT_EQ(s.rfind("<?xml", 0), 0u);
    EXPECT_NE(s.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
    EXPECT_EQ(count(s, "<svg"), 1u);
    EXPECT_EQ(s.substr(s.size() - 7), "</svg>\n");
    EXPECT_EQ(count(s, "<text"), count(s, "</text>"));
    EXPECT_EQ(s.find("tiny & small"), std::string::npos); // escaped
    EXPECT_NE(s.find("tiny &amp; small.gguf"), std::string::npos);
    EXPECT_NE(s.find("k (tokens guessed per pass)"), std::string::npos);
    EXPECT_NE(s.find("speedup over plain decoding (x)"), std::string::npos);
    EXPECT_NE(s.find("tokens per target pass"), std::string::npos);
    EXPECT_NE(s.find(">ngram</text>"), std::string::npos);  // legend
    EXPECT_NE(s.find(">ref</text>"), std::string::npos);
    EXPECT_NE(s.find("kind: free"), std::string::npos);     // a row per kind
    // Per panel pair: all items and edit have ngram and ref; free has no ref measurement.
    EXPECT_EQ(count(s, "<polyline"), 2u * 2u + 2u * 2u + 1u * 2u);
    // Every element that opens without self-closing is closed.
    for (const char* tag : {"<style", "<text"}) {
        const std::string name = std::string(tag).substr(1);
        EXPECT_EQ(count(s, tag), count(s, "</" + name + ">")) << tag;
    }
}

TEST(BenchReport, ProgressLine) {
    rb::Progress p;
    p.runs_done = 5;
    p.runs_total = 20;
    p.items_done = 1;
    p.items_total = 4;
    p.elapsed_seconds = 10;
    p.current = "edit-1";
    const std::string line = rb::format_progress(p, 8);
    EXPECT_EQ(line, "[##------] 1/4 items  0:10 elapsed  ~0:30 left  edit-1");
    EXPECT_EQ(rb::format_duration(3725), "1:02:05");
    EXPECT_EQ(rb::format_duration(59.6), "1:00");
}

TEST(BenchEndToEnd, ShortRunOnBundledModelIsLossless) {
    auto model = rwd::Model::load(std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf");
    auto edit = rb::take_first(rb::load_workload(std::string(REWIND_SHARED_DIR) + "/workloads/edit.jsonl"), 1);
    auto ref = rb::take_first(rb::load_workload(std::string(REWIND_SHARED_DIR) + "/workloads/ref.jsonl"), 1);
    std::vector<rb::WorkItem> items{edit[0], ref[0]};

    rb::RunnerOptions opts;
    const std::vector<rb::Source> sources{rb::Source::Ngram, rb::Source::Ref, rb::Source::Auto};
    const std::vector<int> ks{4};
    opts.configs = rb::make_configs(sources, ks, rb::KModes::Fixed);
    opts.repeat = 1;
    opts.warmup = 0;
    opts.max_tokens = 16;
    opts.cost.max_n = 3;
    opts.cost.repeat = 1;
    opts.cost.warmup = 0;
    int calls = 0;
    rb::BenchResult r = rb::run_bench({model, nullptr}, items, opts, [&](const rb::Progress&) { ++calls; });
    EXPECT_GT(calls, 0);

    ASSERT_EQ(r.configs.size(), 4u);
    ASSERT_EQ(r.items.size(), 2u);
    EXPECT_TRUE(r.lossless());
    for (const auto& item : r.items) {
        ASSERT_EQ(item.cells.size(), 4u);
        const auto& base = item.cells[0];
        ASSERT_EQ(base.repeats.size(), 1u);
        EXPECT_GT(base.repeats[0].tokens, 0);
        EXPECT_LE(base.repeats[0].tokens, 16);
        EXPECT_EQ(item.cells[1].output, base.output);
        EXPECT_GT(item.cells[1].repeats[0].passes, 0);
    }
    EXPECT_TRUE(r.items[0].cells[2].repeats.empty()); // no references on the edit item
    EXPECT_EQ(r.items[1].cells[2].repeats.size(), 1u);
    ASSERT_EQ(r.cost_curve.size(), 3u);
    EXPECT_EQ(r.cost_curve[2].n, 3);

    r.setup.model_path = "pycode-4m-q8_0.gguf";
    std::ostringstream md;
    rb::write_markdown(md, r);
    if (!r.lossless()) ADD_FAILURE() << md.str();
    EXPECT_NE(md.str().find("| ngram k=4 |"), std::string::npos) << md.str();
    EXPECT_NE(md.str().find("Lossless: ✓"), std::string::npos);
    const json j = json::parse(rb::to_json(r));
    EXPECT_TRUE(j["lossless"].get<bool>());
    EXPECT_EQ(j["items"][1]["runs"].size(), 4u);
    std::ostringstream svg;
    rb::write_svg(svg, r);
    EXPECT_NE(svg.str().find("</svg>"), std::string::npos);
}

TEST(BenchEndToEnd, SuffixSharesOneCacheOfEarlierItemsOutputs) {
    auto model = rwd::Model::load(std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf");
    const auto repeat = rb::load_workload(std::string(REWIND_ASSETS_DIR) + "/../apps/bench/workloads/repeat.jsonl");
    ASSERT_GE(repeat.size(), 12u);
    EXPECT_EQ(repeat[0].kind, "repeat");
    // One prompt's first two revisions (items 0 and 4 of the file): the second item's output
    // largely repeats the first's, which only the cache holds.
    std::vector<rb::WorkItem> items{repeat[0], repeat[4]};
    rb::RunnerOptions opts;
    const std::vector<rb::Source> sources{rb::Source::Suffix};
    const std::vector<int> ks{4};
    opts.configs = rb::make_configs(sources, ks, rb::KModes::Fixed);
    opts.repeat = 2;
    opts.warmup = 1;
    opts.max_tokens = 32;
    opts.cost_curve = false;
    const rb::BenchResult r = rb::run_bench({model, nullptr}, items, opts);
    ASSERT_EQ(r.items.size(), 2u);
    EXPECT_TRUE(r.lossless());
    EXPECT_EQ(rb::parse_source("suffix"), rb::Source::Suffix);
    // No run guesses from its own earlier output: the first item's two repeats (and the warm-up
    // before them) see the same empty cache, so they guess alike.
    const auto& first = r.items[0].cells[1].repeats;
    ASSERT_EQ(first.size(), 2u);
    EXPECT_EQ(first[0].proposed, first[1].proposed);
    EXPECT_EQ(first[0].accepted, first[1].accepted);
    // The second item guesses from the first's output: more of its guesses stand than when it
    // runs alone, with an empty cache.
    const auto& second = r.items[1].cells[1].repeats;
    ASSERT_EQ(second.size(), 2u);
    EXPECT_EQ(second[0].accepted, second[1].accepted);
    const rb::BenchResult alone = rb::run_bench({model, nullptr}, {repeat[4]}, opts);
    const auto& cold = alone.items[0].cells[1].repeats;
    ASSERT_EQ(cold.size(), 2u);
    EXPECT_GT(second[0].accepted, cold[0].accepted) << "proposed " << second[0].proposed << " and " << cold[0].proposed;
}

TEST(BenchEndToEnd, RefusesDraftConfigurationWithoutDraftModel) {
    auto model = rwd::Model::load(std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf");
    rb::WorkItem item;
    item.id = "x";
    item.prompt = "def f():";
    item.max_tokens = 4;
    rb::RunnerOptions opts;
    opts.configs = {{rb::Source::Draft, 4, false}};
    const std::string e = error_of([&] { rb::run_bench({model, nullptr}, {item}, opts); });
    EXPECT_NE(e.find("--draft"), std::string::npos) << e;
    opts.configs = {{rb::Source::Ref, 4, false}};
    EXPECT_NE(error_of([&] { rb::run_bench({model, nullptr}, {item}, opts); }).find("references"), std::string::npos);
}

// The arithmetic behind the scale report: pass-cost ratios, projections, the bandwidth fraction
// and the weight bytes of a decode pass. No timings are asserted.
TEST(BenchScale, CostRatioAndProjection) {
    const std::vector<rb::CostPoint> curve = {{1, 0.010, {}}, {2, 0.011, {}}, {3, 0.012, {}}, {5, 0.015, {}}, {9, 0.020, {}}};
    EXPECT_DOUBLE_EQ(rb::cost_ratio(curve, 9), 2.0);
    EXPECT_DOUBLE_EQ(rb::cost_ratio(curve, 4), 0.0); // not measured
    EXPECT_DOUBLE_EQ(rb::cost_ratio({}, 1), 0.0);
    // k = 8 verifies 9 tokens: 3.6 tokens per pass at twice the cost of one = 1.8x.
    EXPECT_DOUBLE_EQ(rb::projected_speedup(3.6, 8, curve), 1.8);
    EXPECT_DOUBLE_EQ(rb::projected_speedup(1.5, 4, curve), 1.5 / 1.5);
    EXPECT_DOUBLE_EQ(rb::projected_speedup(2.0, 16, curve), 0.0);

    const auto r = synthetic_result(); // ngram k=2: 400/260 tokens per pass; ref k=4: 100/60 (edit only)
    const std::vector<rb::CostPoint> long_curve = {{1, 0.02, {}}, {3, 0.03, {}}, {5, 0.05, {}}};
    const auto p = rb::project_speedups(rb::summarize_configs(r), curve, long_curve);
    ASSERT_EQ(p.size(), 3u); // the baseline is not projected
    EXPECT_EQ(p[0].config.label(), "ngram k=2");
    EXPECT_NEAR(p[0].tokens_per_pass, 400.0 / 260.0, 1e-12);
    EXPECT_NEAR(p[0].cost_ratio, 1.2, 1e-12);
    EXPECT_NEAR(p[0].speedup, 400.0 / 260.0 / 1.2, 1e-12);
    EXPECT_NEAR(p[0].cost_ratio_long, 1.5, 1e-12);
    EXPECT_NEAR(p[0].speedup_long, 400.0 / 260.0 / 1.5, 1e-12);
    EXPECT_EQ(p[2].config.label(), "ref k=4");
    EXPECT_NEAR(p[2].speedup, 100.0 / 60.0 / 1.5, 1e-12);
    EXPECT_NEAR(p[2].speedup_long, 100.0 / 60.0 / 2.5, 1e-12);
}

TEST(BenchScale, BandwidthFraction) {
    // 1 GB per token at 20 tokens/s = 20 GB/s of 25 GB/s.
    EXPECT_DOUBLE_EQ(rb::bandwidth_fraction(1000000000, 20.0, 25.0), 0.8);
    EXPECT_DOUBLE_EQ(rb::bandwidth_fraction(0, 20.0, 25.0), 0.0);
    EXPECT_DOUBLE_EQ(rb::bandwidth_fraction(1000, 0.0, 25.0), 0.0);
    EXPECT_DOUBLE_EQ(rb::bandwidth_fraction(1000, 20.0, 0.0), 0.0);
}

TEST(BenchScale, WeightBytesPerToken) {
    // pycode-4m: untied head. Every tensor once, but of the embedding one row.
    auto model = rwd::Model::load(std::string(REWIND_SHARED_DIR) + "/models/pycode-4m.gguf");
    int64_t all = 0;
    for (const auto& t : model->file().gguf().tensors()) all += static_cast<int64_t>(t.n_bytes);
    const auto& e = model->file().weights().tok_embd;
    EXPECT_EQ(rb::weight_bytes_per_token(*model), all - static_cast<int64_t>(e.n_bytes) + e.cols * 4);
    // pycode-600k: tied, so the embedding is read whole as the head (and counted once).
    auto tied = rwd::Model::load(std::string(REWIND_SHARED_DIR) + "/models/pycode-600k.gguf");
    ASSERT_TRUE(tied->file().weights().tied_output);
    int64_t all_tied = 0;
    for (const auto& t : tied->file().gguf().tensors()) all_tied += static_cast<int64_t>(t.n_bytes);
    EXPECT_EQ(rb::weight_bytes_per_token(*tied), all_tied + tied->file().weights().tok_embd.cols * 4);
    // Repacked matrices count as packed: pycode-4m-q4_k_m's Q5_0 ones (widened to the Q8_0 layout)
    // read more than the file holds, so the repacked model reads more than the file's layout.
    const std::string q4km = std::string(REWIND_SHARED_DIR) + "/models/pycode-4m-q4_k_m.gguf";
    auto packed = rwd::Model::load(q4km), plain = rwd::Model::load(q4km, rwd::ModelOptions{.repack = false});
    int64_t swapped = 0;
    auto add = [&](const rwd::MatrixView& v) {
        if (v.packed) swapped += static_cast<int64_t>(rwd::dtype_row_bytes(v.type, v.cols)) * v.rows;
    };
    add(packed->output);
    for (const auto& l : packed->layers)
        for (const rwd::MatrixView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_down, &l.ffn_up}) add(*v);
    ASSERT_GT(swapped, 0);
    EXPECT_EQ(rb::weight_bytes_per_token(*plain) - swapped + static_cast<int64_t>(packed->packed_bytes()),
              rb::weight_bytes_per_token(*packed));
    EXPECT_GT(rb::weight_bytes_per_token(*packed), rb::weight_bytes_per_token(*plain));
}

TEST(BenchScale, WeightBytesPerTokenOfExpertModels) {
    // make-dummy's qwen3-moe-tiny (F32, nothing repacked): a 1-token pass reads 4 of 16 experts.
    auto moe = rwd::model_test::load("dummy-qwen3-moe-tiny-f32");
    const auto& hp = moe->hparams();
    int64_t all = 0, experts = 0;
    for (const auto& t : moe->file().gguf().tensors()) {
        all += static_cast<int64_t>(t.n_bytes);
        if (t.name.find("_exps.") != std::string::npos) experts += static_cast<int64_t>(t.n_bytes);
    }
    const auto& e = moe->file().weights().tok_embd;
    EXPECT_EQ(rb::weight_bytes_per_token(*moe), all - static_cast<int64_t>(e.n_bytes) + e.cols * 4 - experts +
                                                    experts * hp.n_expert_used / hp.n_expert);
}

// The split a MoE pass's floor uses: what every pass reads plus one token's experts is a decode
// pass's bytes (packed K-quant experts counted in their packed form); dense models have none.
TEST(BenchScale, ExpertBytesAndTheMoePassFloor) {
    auto moe = rwd::model_test::load("dummy-qwen3-moe-tiny-q4_k_m");
    const auto& hp = moe->hparams();
    const rb::ExpertBytes b = rb::expert_bytes(*moe);
    EXPECT_GT(b.per_expert, 0);
    EXPECT_GT(b.dense, 0);
    EXPECT_NEAR(static_cast<double>(b.dense) + b.per_expert * static_cast<double>(hp.n_expert_used * hp.n_layer),
                static_cast<double>(rb::weight_bytes_per_token(*moe)), 1.0);
    const rb::ExpertBytes none = rb::expert_bytes(*rwd::model_test::load("bundled"));
    EXPECT_EQ(none.dense, 0);
    EXPECT_EQ(none.per_expert, 0);
    // 1 GB + 100 experts of 10 MB at 10 GB/s: 0.2 s; 4 tokens at 10 tokens/s: 0.4 s.
    EXPECT_DOUBLE_EQ(rb::moe_pass_floor_seconds(4, 100, 1e9, 1e7, 10, 10), 0.4);
    EXPECT_DOUBLE_EQ(rb::moe_pass_floor_seconds(4, 100, 1e9, 1e7, 10, 100), 0.2);
    EXPECT_DOUBLE_EQ(rb::moe_pass_floor_seconds(4, 100, 1e9, 1e7, 0, 100), 0.04); // bandwidth unknown
    EXPECT_EQ(rb::moe_pass_floor_seconds(4, 100, 1e9, 1e7, 0, 0), 0);
}

// A seeded prefix (no prefill pass) gives a curve of every n, on a cache of exactly that many
// cached tokens; the context's own state is untouched by the fill.
TEST(BenchScale, CostCurveOnASeededPrefix) {
    auto model = rwd::Model::load(std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf");
    rwd::Context ctx(model, rwd::ContextOptions{1, 32});
    rb::CostCurveOptions c;
    c.max_n = 3;
    c.prefix = 200;
    c.repeat = 2;
    c.warmup = 0;
    c.rounds = 1;
    c.seeded_prefix = true;
    const auto curve = rb::measure_cost_curve(ctx, c);
    ASSERT_EQ(curve.size(), 3u);
    for (const auto& p : curve) {
        EXPECT_EQ(p.samples.size(), 2u);
        EXPECT_GT(p.seconds, 0.0);
    }
    EXPECT_EQ(ctx.tokens_processed(), 3u * 2u + 2u * 2u + 1u * 2u);
}

// Decode throughput runs every pass of every round (end-of-generation tokens do not cut a round
// short) and gives both figures: the median interval between tokens and the wall clock's.
TEST(BenchScale, ThroughputRunsEveryPassAndGivesBothDecodeFigures) {
    auto model = rwd::Model::load(std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf");
    rwd::Context ctx(model, rwd::ContextOptions{1, 32});
    rb::ThroughputOptions o;
    o.prompt_tokens = 5;
    o.decode_tokens = 12;
    o.rounds = 2;
    const rb::Throughput t = rb::measure_throughput(ctx, o);
    EXPECT_EQ(t.prompt_tokens, 5);
    EXPECT_EQ(t.decode_tokens, 12);
    EXPECT_GT(t.prefill_seconds, 0.0);
    EXPECT_GT(t.decode_seconds, 0.0);
    EXPECT_GT(t.decode_wall_seconds, 0.0);
    // A warm-up round and two timed ones, each the prompt then 12 single-token passes.
    EXPECT_EQ(ctx.tokens_processed(), 3u * (5u + 12u));
}

TEST(BenchScale, MemoryBandwidthRunsAndValidates) {
    const auto b = rb::measure_memory_bandwidth(2, int64_t{4} << 20, 1);
    EXPECT_EQ(b.threads, 2);
    EXPECT_EQ(b.bytes, int64_t{4} << 20);
    EXPECT_GT(b.read_gbps, 0.0);
    EXPECT_GT(b.copy_gbps, 0.0);
    EXPECT_THROW(rb::measure_memory_bandwidth(0), rwd::Error);
    EXPECT_THROW(rb::measure_memory_bandwidth(1, 1000), rwd::Error);
    EXPECT_THROW(rb::measure_memory_bandwidth(1, int64_t{4} << 20, 0), rwd::Error);
}

TEST(BenchScale, PeakResidentMemoryCountsABufferOnceTouchedAndStartsOver) {
    ASSERT_GT(rb::peak_resident_bytes(), 0); // Linux: VmHWM
    // From the current resident memory, not the peak of the tests before this one.
    if (!rb::reset_peak_resident()) GTEST_SKIP() << "/proc/self/clear_refs cannot reset the peak here";
    const int64_t before = rb::peak_resident_bytes();
    {
        // Mapped and unmapped directly: a heap block could stay resident after it is freed (an
        // allocator's cache, a sanitizer's quarantine).
        const size_t size = size_t{64} << 20;
        void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_NE(p, MAP_FAILED);
        auto* big = static_cast<volatile char*>(p);
        for (size_t i = 0; i < size; i += 4096) big[i] = 1; // touched: resident
        EXPECT_GE(rb::peak_resident_bytes(), before + (int64_t{60} << 20));
        EXPECT_EQ(big[size / 2], 1);
        munmap(p, size);
    }
    ASSERT_TRUE(rb::reset_peak_resident()); // the buffer is gone: the peak starts over below it
    EXPECT_LT(rb::peak_resident_bytes(), before + (int64_t{60} << 20));
}

TEST(BenchReport, KvTypeAndPeakMemoryAreReportedAndKept) {
    auto r = synthetic_result();
    r.setup.kv_type = "f16";
    r.setup.peak_rss_bytes = 1'420'000'000;
    std::ostringstream md;
    rb::write_markdown(md, r);
    EXPECT_NE(md.str().find("Peak resident memory: 1.42 GB (the whole process: weights, f16 KV cache"), std::string::npos)
        << md.str();
    const rb::BenchResult back = rb::from_json(rb::to_json(r), "r.json");
    EXPECT_EQ(back.setup.kv_type, "f16");
    EXPECT_EQ(back.setup.peak_rss_bytes, 1'420'000'000);
}

TEST(BenchScale, ReportAndJsonKeepTheScaleFigures) {
    auto r = synthetic_result();
    r.items.clear(); // a --cost-curve result
    r.cost_prefix = 100;
    r.throughput = {128, 64, 0.5, 3.2}; // 20 tokens/s
    r.scale.long_prefix_asked = 4096;
    r.scale.long_prefix = 495;
    r.scale.long_prefix_seeded = true;
    r.scale.long_curve = {{1, 0.002, {0.002}}, {2, 0.004, {0.004}}};
    r.scale.weight_bytes_per_token = 1000000000;
    r.scale.bandwidth_1 = {1, 1 << 20, 20.0, 30.0};
    r.scale.bandwidth_n = {2, 1 << 20, 25.0, 35.0};
    r.scale.projection_source = "w.json";
    r.scale.projections = {{{rb::Source::Ngram, 1, false}, 1.8, 1.5, 1.2, 2.0, 0.9}};
    std::ostringstream md;
    rb::write_markdown(md, r);
    const std::string s = md.str();
    EXPECT_NE(s.find("(100 and 495 tokens cached)"), std::string::npos) << s;
    EXPECT_NE(s.find("| 2 | 1.500 | 1.50x | 0.750 | 4.000 | 2.00x |"), std::string::npos) << s;
    EXPECT_NE(s.find("4096 cached tokens asked; clamped to 495"), std::string::npos) << s;
    EXPECT_NE(s.find("The 495 cached tokens are seeded K/V values"), std::string::npos) << s;
    EXPECT_NE(s.find("reads 1.000 GB of weights"), std::string::npos) << s;
    EXPECT_NE(s.find("= 80% of the 2-thread read bandwidth"), std::string::npos) << s;
    EXPECT_NE(s.find("| ngram k=1 | 1.80 | 1.50x | 1.20x | 2.00x | 0.90x |"), std::string::npos) << s;
    const std::string text = rb::to_json(r);
    const json j = json::parse(text);
    EXPECT_DOUBLE_EQ(j["scale"]["decode_bandwidth_fraction"].get<double>(), 0.8);
    EXPECT_EQ(j["scale"]["long_prefix_tokens"], 495);
    EXPECT_EQ(j["scale"]["long_prefix_seeded"], true);
    EXPECT_EQ(rb::to_json(rb::from_json(text, "r.json")), text);
}

// A dense pass's floor: the 1-token pass, or its tokens at the prefill rate, whichever is more;
// the report prints it and the ratio beside each point, and the JSON keeps the rate it came from.
TEST(BenchScale, DensePassFloor) {
    EXPECT_DOUBLE_EQ(rb::dense_pass_floor(0.050, 1, 250.0), 0.050);
    EXPECT_DOUBLE_EQ(rb::dense_pass_floor(0.050, 10, 250.0), 0.050); // 40 ms of arithmetic < the 1-token pass
    EXPECT_DOUBLE_EQ(rb::dense_pass_floor(0.050, 25, 250.0), 0.100);
    EXPECT_DOUBLE_EQ(rb::dense_pass_floor(0.0, 25, 250.0), 0.0);
    EXPECT_DOUBLE_EQ(rb::dense_pass_floor(0.050, 25, 0.0), 0.0);

    auto r = synthetic_result();
    r.items.clear(); // a --cost-curve result
    r.cost_prefix = 100;
    r.throughput = {512, 8, 2.0, 0.4};
    r.cost_curve = {{1, 0.050, {0.050}}, {17, 0.085, {0.085}}};
    r.scale.floor_prefill_tokens_per_s = 250.0;
    std::ostringstream md;
    rb::write_markdown(md, r);
    const std::string s = md.str();
    EXPECT_NE(s.find("| n | ms per pass | ÷ 1-token pass | ms per token | floor, ms | ÷ floor |"), std::string::npos) << s;
    EXPECT_NE(s.find("| 1 | 50.000 | 1.00x | 50.000 | 50.000 | 1.00x |"), std::string::npos) << s;
    EXPECT_NE(s.find("| 17 | 85.000 | 1.70x | 5.000 | 68.000 | 1.25x |"), std::string::npos) << s;
    EXPECT_NE(s.find("prefill rate of a 512-token prompt, 250.0 tokens/s"), std::string::npos) << s;
    const std::string text = rb::to_json(r);
    EXPECT_DOUBLE_EQ(json::parse(text)["scale"]["floor_prefill_tokens_per_s"].get<double>(), 250.0);
    EXPECT_EQ(rb::to_json(rb::from_json(text, "r.json")), text);

    r.scale.floor_prefill_tokens_per_s = 0; // not measured: no floor columns
    std::ostringstream plain;
    rb::write_markdown(plain, r);
    EXPECT_EQ(plain.str().find("floor"), std::string::npos) << plain.str();
}
