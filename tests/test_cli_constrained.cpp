// Constrained generation through the command line: `rewind generate --json-schema` gives complete
// JSON the grammar accepts; constrained speculative decoding (every source, k, trees, greedy and
// seeded), batched requests and chat turns give constrained plain decoding's ids and --logprobs
// values; bad schemas and grammars end with a message naming the problem. Skipped when the apps
// are not built.
#include <gtest/gtest.h>

#include "cli_test_util.h"
#include "fixtures.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

namespace {

const std::string kShared = REWIND_SHARED_DIR;
const std::string kRewind = rwd::test::kRewindBinary;
using rwd::test::CliRun;

// `rewind ARGS`: stdout, and stderr too when asked.
CliRun run(const std::string& args, bool with_stderr = false) { return rwd::test::run_rewind(args, with_stderr); }

std::string write_temp(const std::string& name, const std::string& text) {
    return rwd::test::write_temp("rewind_test_cli_constrained_", name, text);
}

// Enums, bounded integers, a bounded string and a list: forced text (keys, punctuation, the rest
// of an enum value) and free choices alternate.
const char* const kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":10},
  "kind":{"enum":["function","class","module"]},
  "lines":{"type":"integer","minimum":1,"maximum":500},
  "tags":{"type":"array","items":{"enum":["io","math","text"]},"maxItems":3}},
  "required":["name","kind","lines","tags"],"additionalProperties":false})";

class CliConstrained : public ::testing::Test {
protected:
    void SetUp() override {
        if (!std::filesystem::exists(kRewind)) GTEST_SKIP() << kRewind << " not built (REWIND_BUILD_APPS=OFF)";
        schema_ = write_temp("schema.json", kSchema);
    }
    void TearDown() override {
        if (!schema_.empty()) std::filesystem::remove(schema_);
    }
    // `generate --json` on the bundled model under the schema, with `extra` flags.
    nlohmann::json generate(const std::string& extra) {
        const CliRun r = run("generate -p 'def parse(line):' -n 80 --json --json-schema " + schema_ + " " + extra);
        EXPECT_EQ(r.status, 0) << extra;
        return nlohmann::json::parse(r.out, nullptr, false);
    }
    std::string schema_;
};

} // namespace

TEST_F(CliConstrained, OutputIsCompleteJsonTheGrammarAccepts) {
    for (const std::string extra : {"", "--spec forced", "--temp 0.8 --seed 3"}) {
        const nlohmann::json j = generate(extra);
        ASSERT_TRUE(j.is_object()) << extra;
        EXPECT_EQ(j["stop_reason"], "end_of_generation") << extra;
        const std::string text = j["generated_text"];
        const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
        ASSERT_TRUE(doc.is_object()) << text;
        EXPECT_EQ(doc.size(), 4u) << text;
        const std::string file = write_temp("out.json", text);
        EXPECT_EQ(run("grammar --json-schema " + schema_ + " --file " + file).out, "complete\n") << text;
        std::filesystem::remove(file);
    }
}

TEST_F(CliConstrained, SpeculativeIdsEqualPlain) {
    for (const std::string sampling : {"", "--temp 0.8 --seed 11"}) {
        const nlohmann::json plain = generate("--spec none " + sampling);
        ASSERT_TRUE(plain.is_object());
        for (const std::string spec : {"--spec ngram", "--spec forced", "--spec auto", "--spec suffix", "--spec ngram --tree 3"}) {
            for (const int k : {1, 3, 8}) {
                const std::string extra = spec + " -k " + std::to_string(k) + " " + sampling;
                const nlohmann::json j = generate(extra);
                ASSERT_TRUE(j.is_object()) << extra;
                EXPECT_EQ(j["generated_ids"], plain["generated_ids"]) << extra;
            }
        }
    }
    // Forced text is proposed and counted.
    const nlohmann::json f = generate("--spec forced");
    EXPECT_GT(f["speculation"]["forced_proposed"].get<int64_t>(), 0);
    EXPECT_GT(f["speculation"]["forced_accepted"].get<int64_t>(), 0);
    EXPECT_GT(f["speculation"]["tokens_per_pass"].get<double>(), 1.0);
}

TEST_F(CliConstrained, LogprobsIdenticalWithSpeculation) {
    const nlohmann::json plain = generate("--logprobs 5");
    ASSERT_TRUE(plain.is_object());
    const nlohmann::json& lp = plain["logprobs"];
    ASSERT_EQ(lp.size(), plain["generated_ids"].size());
    ASSERT_FALSE(lp.empty());
    EXPECT_EQ(lp[0]["id"], plain["generated_ids"][0]);
    EXPECT_EQ(lp[0]["top"].size(), 5u);
    EXPECT_TRUE(lp[0]["text"].is_string());
    EXPECT_LE(lp[0]["logprob"].get<double>(), 0.0);
    for (const std::string spec : {"--spec forced -k 8", "--spec ngram -k 4", "--spec auto -k 2 --tree 2"}) {
        const nlohmann::json j = generate("--logprobs 5 " + spec);
        ASSERT_TRUE(j.is_object()) << spec;
        EXPECT_EQ(j["logprobs"], lp) << spec; // the same values, printed from the same bits
    }
}

TEST_F(CliConstrained, PenaltiesAndBiasKeepSpeculationExact) {
    const std::string pen = "--frequency-penalty 0.5 --presence-penalty 0.3 --logit-bias 3873=1.5 --temp 0.7 --seed 5 ";
    const nlohmann::json plain = generate(pen);
    ASSERT_TRUE(plain.is_object());
    const nlohmann::json spec = generate(pen + "--spec ngram -k 4");
    ASSERT_TRUE(spec.is_object());
    EXPECT_EQ(spec["generated_ids"], plain["generated_ids"]);
    EXPECT_NE(run("generate -p x -n 2 --logit-bias 12", true).status, 0);      // not ID=BIAS
    EXPECT_NE(run("generate -p x -n 2 --frequency-penalty 3", true).status, 0); // out of range
}

TEST_F(CliConstrained, RegexAndGrammarFile) {
    const CliRun r = run("generate -p 'x = ' -n 40 --json --regex '[0-9]{1,4}(\\.[0-9]{2})?'");
    ASSERT_EQ(r.status, 0);
    const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object());
    const std::string text = j["generated_text"];
    EXPECT_EQ(run("grammar --regex '[0-9]{1,4}(\\.[0-9]{2})?' --text '" + text + "'").out, "complete\n") << text;
    const std::string g = write_temp("yes.gbnf", "root ::= (\"yes\" | \"no\") \".\"\n");
    const CliRun y = run("generate -p 'Answer:' -n 10 --json --grammar " + g);
    ASSERT_EQ(y.status, 0);
    const std::string answer = nlohmann::json::parse(y.out)["generated_text"];
    EXPECT_TRUE(answer == "yes." || answer == "no.") << answer;
    std::filesystem::remove(g);
}

TEST_F(CliConstrained, BadSchemaOrGrammarIsAnError) {
    const CliRun s = run(R"(generate -p x -n 4 --json-schema '{"type":"object","properties":{"a":{"minimum":"x"}}}')", true);
    EXPECT_EQ(s.status, 8) << s.out; // argument
    EXPECT_NE(s.out.find("--json-schema"), std::string::npos) << s.out;
    const std::string g = write_temp("bad.gbnf", "root ::= item\n");
    const CliRun b = run("generate -p x -n 4 --grammar " + g, true);
    EXPECT_EQ(b.status, 8) << b.out;
    EXPECT_NE(b.out.find("item"), std::string::npos) << b.out;
    std::filesystem::remove(g);
    EXPECT_NE(run("generate -p x -n 4 --regex a --json-schema '{}'", true).status, 0);
    EXPECT_NE(run("generate -p x -n 4 --logprobs 21", true).status, 0);
}

// batch: each request under its item's schema, speculating in the batched passes, gives what
// `generate` gives that prompt under that schema alone: ids and --logprobs values.
TEST_F(CliConstrained, BatchEqualsGeneratePerItem) {
    REWIND_NEED_FIXTURE(kShared + "/workloads/json.jsonl");
    std::ifstream in(kShared + "/workloads/json.jsonl");
    std::string workload, line;
    for (int i = 0; i < 3 && std::getline(in, line); ++i) workload += line + "\n";
    const std::string w = write_temp("w.jsonl", workload);
    const CliRun b = run("batch --workload " + w + " --concurrency 3 --spec ngram -k 4 -n 40 --logprobs 2");
    ASSERT_EQ(b.status, 0);
    std::istringstream lines(b.out);
    int checked = 0;
    for (std::string l; std::getline(lines, l);) {
        const nlohmann::json got = nlohmann::json::parse(l);
        std::istringstream items(workload);
        for (std::string it; std::getline(items, it);) {
            const nlohmann::json item = nlohmann::json::parse(it);
            if (item["id"] != got["id"]) continue;
            const std::string p = write_temp("p.txt", item["prompt"].get<std::string>());
            const std::string s = write_temp("s.json", item["json_schema"].dump());
            const CliRun g = run("generate -f " + p + " --json-schema " + s + " -n 40 --json --logprobs 2");
            ASSERT_EQ(g.status, 0);
            const nlohmann::json plain = nlohmann::json::parse(g.out);
            EXPECT_EQ(got["generated_ids"], plain["generated_ids"]) << got["id"];
            EXPECT_EQ(got["logprobs"], plain["logprobs"]) << got["id"];
            ++checked;
            std::filesystem::remove(p);
            std::filesystem::remove(s);
        }
    }
    EXPECT_EQ(checked, 3);
    std::filesystem::remove(w);
}

// chat: every reply (the constraint starts afresh each turn) is one instance of the schema.
TEST_F(CliConstrained, ChatRepliesFollowTheSchema) {
    const std::string in = write_temp("turns.txt", "give me json\nagain\nonce more\n");
    const CliRun r = run("chat --chat-template chatml -n 40 --spec forced --json-schema "
                         "'{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"}},\"required\":[\"a\"],"
                         "\"additionalProperties\":false}' < " + in);
    ASSERT_EQ(r.status, 0);
    std::istringstream lines(r.out);
    int replies = 0;
    for (std::string l; std::getline(lines, l); ++replies) {
        const nlohmann::json j = nlohmann::json::parse(l, nullptr, false);
        ASSERT_TRUE(j.is_object()) << l;
        EXPECT_TRUE(j["a"].is_boolean()) << l;
    }
    EXPECT_EQ(replies, 3);
    std::filesystem::remove(in);
}

// chat: the constrained replies are the same bits with and without speculation, for a regex and a
// GBNF grammar; a bad constraint ends the run before any turn, naming the flag.
TEST_F(CliConstrained, ChatConstrainedRepliesEqualPlainDecoding) {
    const std::string in = write_temp("turns2.txt", "yes or no?\nand now?\n/reset\nonce more\n");
    const std::string g = write_temp("yn.gbnf", "root ::= (\"yes\" | \"no\") \" \" [0-9] [0-9]?\n");
    for (const std::string& constraint : {std::string("--regex '[a-z]{2,6}-[0-9]{1,2}'"), "--grammar " + g}) {
        const std::string base = "chat --chat-template chatml -n 12 " + constraint;
        const CliRun plain = run(base + " < " + in);
        ASSERT_EQ(plain.status, 0) << constraint;
        std::istringstream lines(plain.out);
        int replies = 0;
        for (std::string l; std::getline(lines, l); ++replies) {
            if (constraint.starts_with("--regex")) {
                EXPECT_NE(l.find('-'), std::string::npos) << l;
            } else {
                EXPECT_TRUE(l.starts_with("yes ") || l.starts_with("no ")) << l;
            }
        }
        EXPECT_EQ(replies, 3) << plain.out;
        for (const char* spec : {"--spec forced -k 4", "--spec ngram -k 4", "--spec suffix --tree 2 -k 6"}) {
            const CliRun s = run(base + " " + spec + " < " + in);
            ASSERT_EQ(s.status, 0) << spec;
            EXPECT_EQ(s.out, plain.out) << constraint << " " << spec;
        }
    }
    for (const char* bad : {"--regex '(ab'", "--json-schema '{\"type\":\"object\",\"minProperties\":1}'",
                            "--json-schema '{not json'", "--grammar /nonexistent.gbnf"}) {
        const CliRun r = run(std::string("chat --chat-template chatml -n 4 ") + bad + " < " + in, true);
        EXPECT_NE(r.status, 0) << bad;
        EXPECT_NE(r.out.find("rewind: error"), std::string::npos) << bad << ": " << r.out;
    }
    std::filesystem::remove(in);
    std::filesystem::remove(g);
}
