// Fuzz regressions: every input in tests/fuzz_regressions/<target>/ (inputs the fuzzers once
// crashed or broke a property on, minimized) is fed to the same entry point its libFuzzer target
// calls (fuzz/entries.h). Each must now be refused with rwd::Error or accepted, nothing else.
// Besides findings, a target's folder holds inputs that reach deep into its parser (a valid file,
// then one damaged at each check), so that every target runs real inputs; an empty folder fails.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "entries.h"

namespace {

namespace fs = std::filesystem;

class FuzzRegressions : public ::testing::TestWithParam<std::string> {};

TEST_P(FuzzRegressions, EveryInputIsHandled) {
    const std::string target = GetParam();
    const auto entry = rwd::fuzz::entry(target);
    ASSERT_NE(entry, nullptr);
    const fs::path dir = fs::path(REWIND_FUZZ_REGRESSIONS) / target;
    ASSERT_TRUE(fs::is_directory(dir)) << dir;
    int n = 0;
    for (const auto& f : fs::directory_iterator(dir)) {
        if (!f.is_regular_file() || f.path().filename().string().front() == '.') continue;
        SCOPED_TRACE(f.path().string());
        std::ifstream in(f.path(), std::ios::binary);
        const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
        EXPECT_NO_THROW(entry(bytes)); // rwd::Error is caught inside: only findings escape
        ++n;
    }
    RecordProperty("inputs", n);
    // A target without inputs would pass whatever its entry point did.
    EXPECT_GT(n, 0) << dir << " holds no input";
}

// The request target's dictionary names the fields a request may carry, so that mutations reach
// each one's checks (a field added to parse_request belongs in it).
TEST(FuzzDictionary, ServeRequestNamesTheRequestFields) {
    const fs::path path = fs::path(REWIND_FUZZ_REGRESSIONS) / ".." / ".." / "fuzz" / "serve_request.dict";
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    const std::string dict{std::istreambuf_iterator<char>(in), {}};
    for (const char* field : {"tools", "tool_choice", "parallel_tool_calls", "tool_calls", "tool_call_id", "response_format",
                              "json_schema", "grammar", "logprobs", "top_logprobs", "frequency_penalty", "presence_penalty",
                              "repeat_penalty", "repeat_last_n", "logit_bias", "n", "seed", "top_k", "min_p", "prediction",
                              "speculation", "stream_options"})
        EXPECT_NE(dict.find("=\"\\\"" + std::string(field) + "\\\":\""), std::string::npos) << field;
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzRegressions,
                         ::testing::Values("gguf", "tokenizer", "kv_state", "workload", "reference", "serve_request",
                                           "gbnf", "json_schema", "regex"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

} // namespace
