// `rewind grammar` run as a user runs it: printing a grammar (GBNF, a JSON Schema or a regex), the
// one-line verdict on a text or on many (exit 0 whenever the check ran), a bad grammar's, schema's
// or regex's message and status, allowed tokens.
// Skipped when the apps are not built (REWIND_BUILD_APPS=OFF).
#include <gtest/gtest.h>

#include "cli_test_util.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

namespace {

const std::string kShared = REWIND_SHARED_DIR;
const std::string kRewind = rwd::test::kRewindBinary;
using rwd::test::CliRun;

// `rewind grammar ARGS`, both output streams.
CliRun run(const std::string& args) { return rwd::test::run_rewind("grammar " + args, true); }

std::string write_temp(const std::string& name, const std::string& text) {
    return rwd::test::write_temp("rewind_test_cli_grammar_", name, text);
}

class CliGrammar : public ::testing::Test {
protected:
    void SetUp() override {
        if (!std::filesystem::exists(kRewind)) GTEST_SKIP() << kRewind << " not built (REWIND_BUILD_APPS=OFF)";
    }
    const std::string json = kShared + "/grammars/json.gbnf";
};

} // namespace

TEST_F(CliGrammar, VerdictsOnText) {
    EXPECT_EQ(run("--grammar " + json + " --text '{\"a\": [1, 2'").out, "prefix\n");
    EXPECT_EQ(run("--grammar " + json + " --text '{\"a\": [1, 2]}'").out, "complete\n");
    const CliRun bad = run("--grammar " + json + " --text '{\"a\": ]'");
    EXPECT_EQ(bad.status, 0);
    EXPECT_EQ(bad.out, "rejected at byte 6\n");
    const std::string file = write_temp("doc.json", "[1]");
    EXPECT_EQ(run("--grammar " + kShared + "/grammars/json_arr.gbnf --file " + file).out, "rejected at byte 1\n");
    std::filesystem::remove(file);
}

TEST_F(CliGrammar, PrintAndBadGrammar) {
    const CliRun p = run("--grammar " + kShared + "/grammars/chess.gbnf --print");
    EXPECT_EQ(p.status, 0);
    EXPECT_NE(p.out.find("castle ::= \"O-O\" castle-2"), std::string::npos) << p.out;
    const std::string g = write_temp("bad.gbnf", "root ::= \"a\"\nitem ::= [a-\n");
    const CliRun e = run("--grammar " + g + " --text a");
    EXPECT_EQ(e.status, 8); // argument
    EXPECT_NE(e.out.find("line 2, column 10"), std::string::npos) << e.out;
    std::filesystem::remove(g);
}

TEST_F(CliGrammar, AllowedTokens) {
    const std::string g = write_temp("yes.gbnf", "root ::= \"yes\" | \"no\"\n");
    const CliRun r = run("--grammar " + g + " --vocab " + kShared + "/vocab/ggml-vocab-llama-bpe.gguf --text y --mask");
    EXPECT_EQ(r.status, 0);
    // Llama 3: "es" is 288, "e" is 68.
    EXPECT_EQ(r.out, "prefix\nallowed: 68 288\n");
    std::filesystem::remove(g);
}

TEST_F(CliGrammar, JsonSchemaAndRegexSources) {
    const std::string schema = R"('{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}')";
    EXPECT_EQ(run("--json-schema " + schema + " --text '{\"n\":12}'").out, "complete\n");
    EXPECT_EQ(run("--json-schema " + schema + " --text '{\"n\":'").out, "prefix\n");
    EXPECT_EQ(run("--json-schema " + schema + " --text '{\"n\": 1}'").out, "rejected at byte 5\n"); // compact
    EXPECT_EQ(run("--json-schema " + schema + " --json-whitespace free --text '{\"n\": 1}'").out, "complete\n");
    const std::string file = write_temp("schema.json", R"({"enum":["red","green"]})");
    EXPECT_EQ(run("--json-schema " + file + " --text '\"gre'").out, "prefix\n");
    std::filesystem::remove(file);
    EXPECT_EQ(run("--regex '[a-c]+x' --text abx").out, "complete\n");
    EXPECT_EQ(run("--regex '[a-c]+x' --text abd").out, "rejected at byte 2\n");
    const CliRun p = run("--regex 'ab?' --print");
    EXPECT_EQ(p.status, 0);
    EXPECT_NE(p.out.find("root ::="), std::string::npos) << p.out;
}

TEST_F(CliGrammar, ManyTexts) {
    const std::string texts = write_temp("texts.jsonl", "\"{\\\"n\\\":1}\"\n\"{\\\"n\"\n\"x\"\n");
    const CliRun r = run(R"(--json-schema '{"type":"object","properties":{"n":{"type":"integer"}}}' --texts )" + texts);
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, "complete\nprefix\nrejected at byte 0\n");
    std::filesystem::remove(texts);
}

TEST_F(CliGrammar, BadSchemaOrRegexNamesTheProblem) {
    const CliRun s = run(R"(--json-schema '{"type":"strin"}' --text x)");
    EXPECT_EQ(s.status, 8); // argument
    EXPECT_NE(s.out.find("--json-schema"), std::string::npos) << s.out;
    EXPECT_NE(s.out.find("strin"), std::string::npos) << s.out;
    const CliRun j = run("--json-schema '{\"type\":' --text x");
    EXPECT_NE(j.status, 0);
    EXPECT_NE(j.out.find("--json-schema"), std::string::npos) << j.out;
    const CliRun r = run("--regex 'a(?=b)' --text a");
    EXPECT_EQ(r.status, 8);
    EXPECT_NE(r.out.find("lookahead"), std::string::npos) << r.out;
    EXPECT_NE(run("--regex a --grammar " + json).status, 0); // one source at a time
    EXPECT_NE(run("--text a").status, 0);                    // and at least one
}
