// Constrained workload items in the benchmark harness: "json_schema", "grammar" and "regex" fields
// parsed into GBNF (once per distinct source, errors naming the line), and constrained runs of
// `rewind bench` (forced and ngram against plain) and of the batch decoder equal constrained
// plain decoding, on the bundled model and the shared JSON workload.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "rewind/bench/bench_batch.h"
#include "rewind/bench/bench_concurrency.h"
#include "rewind/bench/bench_runner.h"
#include "rewind/bench/bench_workload.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/model.h"
#include "rewind/speculate/grammar_constraint.h"

namespace rb = rwd::bench;

namespace {

std::string error_of(const auto& fn) {
    try {
        fn();
    } catch (const rwd::Error& e) {
        return e.what();
    }
    return "(no error)";
}

std::vector<rb::WorkItem> parse(const std::string& text) {
    std::istringstream in(text);
    return rb::parse_workload(in, "c.jsonl");
}

// The shared JSON workload's first `n` items, each with at most `max_tokens` tokens.
std::vector<rb::WorkItem> json_items(size_t n) {
    auto items = rb::take_first(rb::load_workload(std::string(REWIND_SHARED_DIR) + "/workloads/json.jsonl"),
                                static_cast<int64_t>(n));
    for (auto& w : items) w.max_tokens = std::min<int64_t>(w.max_tokens, 60);
    return items;
}

} // namespace

TEST(BenchConstrained, ParsesConstraintFields) {
    const auto items = parse(
        R"({"id": "s", "prompt": "p", "max_tokens": 4, "json_schema": {"type": "integer"}})" "\n"
        R"({"id": "t", "prompt": "p", "max_tokens": 4, "json_schema": {"type": "integer"}})" "\n"
        R"({"id": "g", "prompt": "p", "max_tokens": 4, "grammar": "root ::= \"a\""})" "\n"
        R"({"id": "r", "prompt": "p", "max_tokens": 4, "regex": "[ab]+"})" "\n"
        R"({"id": "n", "prompt": "p", "max_tokens": 4})");
    ASSERT_EQ(items.size(), 5u);
    EXPECT_NE(items[0].grammar.find("root ::="), std::string::npos) << items[0].grammar;
    EXPECT_EQ(items[1].grammar, items[0].grammar);
    EXPECT_EQ(items[2].grammar, "root ::= \"a\"");
    EXPECT_NE(items[3].grammar.find("root ::="), std::string::npos);
    EXPECT_TRUE(items[4].grammar.empty());

    std::string e = error_of([] { parse(R"({"id": "x", "prompt": "p", "max_tokens": 4, "json_schema": {"type": "nope"}})"); });
    EXPECT_NE(e.find("c.jsonl:1:"), std::string::npos) << e;
    EXPECT_NE(e.find("json_schema"), std::string::npos) << e;
    e = error_of([] { parse(R"j({"id": "x", "prompt": "p", "max_tokens": 4, "regex": "a(?=b)"})j"); });
    EXPECT_NE(e.find("regex"), std::string::npos) << e;
    e = error_of([] { parse(R"({"id": "x", "prompt": "p", "max_tokens": 4, "regex": "a", "grammar": "root ::= \"a\""})"); });
    EXPECT_NE(e.find("at most one"), std::string::npos) << e;
    e = error_of([] { parse(R"({"id": "x", "prompt": "p", "max_tokens": 4, "grammar": "root ::= item"})"); });
    EXPECT_NE(e.find("c.jsonl:1: \"grammar\""), std::string::npos) << e;
    EXPECT_NE(e.find("item"), std::string::npos) << e;
    e = error_of([] { parse(R"({"id": "x", "prompt": "p", "max_tokens": 4, "grammar": 3})"); });
    EXPECT_NE(e.find("\"grammar\" must be a string"), std::string::npos) << e;
}

TEST(BenchConstrained, SharedJsonWorkloadHasSchemas) {
    const auto items = rb::load_workload(std::string(REWIND_SHARED_DIR) + "/workloads/json.jsonl");
    ASSERT_EQ(items.size(), 48u);
    for (const auto& w : items) EXPECT_FALSE(w.grammar.empty()) << w.id;
}

TEST(BenchConstrained, ForcedAndNgramRunsAreLossless) {
    auto model = rwd::Model::load(std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf");
    rb::RunnerOptions opts;
    opts.configs = {{rb::Source::Forced, 8, false}, {rb::Source::Ngram, 8, false}};
    opts.repeat = 1;
    opts.warmup = 0;
    opts.cost_curve = false;
    const rb::BenchResult r = rb::run_bench({model, nullptr}, json_items(3), opts);
    ASSERT_EQ(r.items.size(), 3u);
    EXPECT_TRUE(r.lossless());
    for (const auto& item : r.items) {
        ASSERT_EQ(item.cells.size(), 3u);
        EXPECT_TRUE(item.constrained);
        // The output is JSON from its first token: the constraint was applied.
        ASSERT_FALSE(item.cells[0].output.empty());
        EXPECT_EQ(model->tokenizer().token_to_piece(item.cells[0].output[0]).substr(0, 1), "{");
        const auto& forced = item.cells[1].repeats.at(0);
        EXPECT_GT(forced.accepted, 0); // keys and punctuation are forced text
        EXPECT_LT(forced.passes, forced.tokens);
    }
}

TEST(BenchConstrained, BatchedRequestsEqualConstrainedPlain) {
    auto model = rwd::Model::load(std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf");
    rwd::Context ctx(model, rwd::ContextOptions{});
    const auto items = json_items(4);
    for (const std::string spec : {"none", "forced", "ngram"}) {
        rb::BatchRunOptions o;
        o.concurrency = 3;
        o.spec = spec;
        o.k = 4;
        const rb::BatchRun run = rb::run_batched(ctx, items, o);
        ASSERT_EQ(run.items.size(), items.size());
        for (size_t i = 0; i < items.size(); ++i) {
            ASSERT_FALSE(run.items[i].result.failed) << run.items[i].result.error;
            rwd::KvCache cache(*model);
            rwd::GenerateOptions g;
            g.max_tokens = items[i].max_tokens;
            const auto constraint = rwd::make_grammar_constraint(items[i].grammar, model->tokenizer());
            const rwd::GenerateResult plain =
                rwd::generate_plain(ctx, cache, model->tokenizer().encode(items[i].prompt), g, {}, constraint.get());
            EXPECT_EQ(run.items[i].result.tokens, plain.tokens) << spec << " item " << items[i].id;
        }
    }
}

// The concurrency sweep checks each request against its unbatched plain decoding under the same
// grammar: a constrained workload is lossless there too.
TEST(BenchConstrained, ConcurrencySweepBaselineIsConstrained) {
    auto model = rwd::Model::load(std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf");
    rwd::Context ctx(model, rwd::ContextOptions{});
    const auto items = json_items(3);
    rb::ConcurrencyOptions o;
    o.levels = {2};
    o.repeat = 1;
    o.spec.spec = "ngram";
    o.spec.k = 4;
    const rb::ConcurrencySweep s = rb::run_concurrency_sweep(ctx, items, o);
    EXPECT_TRUE(s.mismatches.empty()) << s.mismatches.size() << " mismatches, the first " << s.mismatches.front().item;
    ASSERT_EQ(s.rows.size(), 1u);
    EXPECT_GT(s.rows[0].spec_tokens_per_pass, 1.0);
}
