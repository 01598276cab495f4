// The rewind command line, run as a user runs it: `rewind generate --json` reproduces llama.cpp's
// greedy continuations of the golden prompts, and bad requests end with a message and a non-zero
// status. Skipped when the apps are not built (REWIND_BUILD_APPS=OFF).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "rewind/kernels/simd.h"
#include "fixtures.h"

namespace {

const std::string kShared = REWIND_SHARED_DIR;
const std::string kRewind = std::string(REWIND_BINARY_DIR) + "/bin/rewind";

struct CliRun {
    int status = -1;
    std::string out; // stdout and stderr together
};

CliRun run(const std::string& args) {
    CliRun r;
    FILE* p = ::popen((kRewind + " " + args + " 2>&1").c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf{};
    size_t n = 0;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    r.status = ::pclose(p);
    return r;
}

std::string write_temp(const std::string& name, const std::string& text) {
    // The pid keeps two build trees' test runs apart.
    const auto path =
        std::filesystem::temp_directory_path() / ("rewind_test_cli_" + std::to_string(::getpid()) + "_" + name);
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
}

class Cli : public ::testing::Test {
protected:
    void SetUp() override {
        if (!std::filesystem::exists(kRewind)) GTEST_SKIP() << kRewind << " not built (REWIND_BUILD_APPS=OFF)";
    }
};

} // namespace

// Three golden prompts per F32 model, both numerics, both cache types (the default, --kv-type
// auto, is F16, as llama.cpp's cache that made the goldens): the ids llama.cpp generated, all 64.
TEST_F(Cli, GenerateReproducesLlamaCppGreedyOutput) {
    for (const char* name : {"pycode-4m", "aidreams260K"}) {
        std::ifstream f(kShared + "/reference/" + name + ".jsonl");
        std::string line;
        for (int i = 0; i < 3 && std::getline(f, line); ++i) {
            const auto golden = nlohmann::json::parse(line);
            const auto want = golden.at("generated_ids").get<std::vector<int>>();
            const std::string prompt = write_temp(std::string(name) + ".txt", golden.at("prompt").get<std::string>());
            for (const char* numerics : {"llamacpp", "exact"}) {
                for (const std::string kv : {"", "f32"}) {
                    SCOPED_TRACE(std::string(name) + " prompt " + std::to_string(i) + ", --numerics " + numerics +
                                 (kv.empty() ? "" : ", --kv-type " + kv));
                    const CliRun r = run("generate -m " + kShared + "/models/" + name + ".gguf -f " + prompt + " -n " +
                                      std::to_string(want.size()) + " --ignore-eos --json --numerics " + numerics +
                                      (kv.empty() ? "" : " --kv-type " + kv));
                    ASSERT_EQ(r.status, 0) << r.out;
                    const auto j = nlohmann::json::parse(r.out);
                    EXPECT_EQ(j.at("prompt_ids"), golden.at("prompt_ids"));
                    EXPECT_EQ(j.at("generated_ids").get<std::vector<int>>(), want);
                    EXPECT_EQ(j.at("numerics"), numerics);
                    EXPECT_EQ(j.at("memory").at("kv_type"), kv.empty() ? "f16" : "f32");
                    EXPECT_GT(j.at("memory").at("peak_rss_bytes").get<int64_t>(), 0);
                }
            }
            std::filesystem::remove(prompt);
        }
    }
}

TEST_F(Cli, BadRequestsFailWithAMessage) {
    const std::string prompt = write_temp("bad.txt", "def f(x):\n");
    const std::string model = " -m " + kShared + "/models/pycode-4m.gguf";
    // Each rwd::ErrorCode has its exit status, listed in `rewind --help`.
    CliRun r = run("generate -m /nonexistent/model.gguf -f " + prompt);
    ASSERT_TRUE(WIFEXITED(r.status));
    EXPECT_EQ(WEXITSTATUS(r.status), 3) << "io: " << r.out;
    EXPECT_NE(r.out.find("/nonexistent/model.gguf"), std::string::npos) << r.out;
    // Speculation needs rewind's exact numerics.
    r = run("generate" + model + " -f " + prompt + " -n 4 --spec ngram --numerics llamacpp");
    ASSERT_TRUE(WIFEXITED(r.status));
    EXPECT_EQ(WEXITSTATUS(r.status), 9) << "state: " << r.out;
    EXPECT_NE(r.out.find("Numerics::Exact"), std::string::npos) << r.out;
    r = run("generate" + model + " -f " + prompt + " -n 4 --top-p 2");
    ASSERT_TRUE(WIFEXITED(r.status));
    EXPECT_EQ(WEXITSTATUS(r.status), 8) << "argument: " << r.out;
    r = run("--help");
    EXPECT_NE(r.out.find("9  state"), std::string::npos) << r.out;
    r = run("generate" + model + " -f " + prompt + " --numerics fast");
    EXPECT_NE(r.status, 0);
    std::filesystem::remove(prompt);
}

// inspect describes every valid GGUF file: K-quant files it runs, and a file with a tensor type it
// cannot compute with (pycode-600k with one tensor's type id patched from F32 to Q8_1, whose data
// shrinks so the file stays valid), where it names the tensor and says why instead of failing.
TEST_F(Cli, InspectDescribesFilesWhateverTheirTensorTypes) {
    for (const char* name : {"kq-256-q4_k_m", "pycode-4m-q5_k_m", "pycode-4m-q4_0"}) {
        const CliRun ok = run("inspect " + kShared + "/models/" + name + ".gguf");
        EXPECT_EQ(ok.status, 0) << ok.out;
        EXPECT_NE(ok.out.find("rewind can run this model"), std::string::npos) << ok.out;
        EXPECT_EQ(ok.out.find("not supported"), std::string::npos) << ok.out;
    }
    // What repacking at load costs, by type: Q5_1 (the Q5_K_M fallback) widened by default, Q4_0
    // only when asked.
    const CliRun q5 = run("inspect " + kShared + "/models/pycode-4m-q5_k_m.gguf");
    EXPECT_NE(q5.out.find("of which Q5_1 widened to the packed Q8_0 layout"), std::string::npos) << q5.out;
    const CliRun q4 = run("inspect " + kShared + "/models/pycode-4m-q4_0.gguf");
    EXPECT_NE(q4.out.find("Q4_0 weights stay in the file's layout"), std::string::npos) << q4.out;
    EXPECT_NE(q4.out.find("--widen-q4 widens them"), std::string::npos) << q4.out;
    std::ifstream in(kShared + "/models/pycode-600k.gguf", std::ios::binary);
    std::string bytes{std::istreambuf_iterator<char>(in), {}};
    const std::string tensor = "blk.1.ffn_up.weight";
    std::string needle(8, '\0');
    const uint64_t len = tensor.size();
    std::memcpy(needle.data(), &len, 8);
    needle += tensor;
    size_t pos = bytes.find(needle);
    ASSERT_NE(pos, std::string::npos);
    pos += needle.size();
    uint32_t n_dims = 0;
    std::memcpy(&n_dims, &bytes[pos], 4);
    pos += 4 + 8 * size_t{n_dims};
    const uint32_t q8_1 = 9;
    std::memcpy(&bytes[pos], &q8_1, 4);
    const std::string path = write_temp("q8_1.gguf", bytes);
    const CliRun r = run("inspect " + path);
    std::remove(path.c_str());
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("rewind cannot run this file"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(tensor + " (Q8_1)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("type not supported by rewind"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tokenizer:"), std::string::npos) << r.out;
}

// Inputs that never end or cannot fit are refused past their documented limit, quickly and in
// bounded memory, naming the file: prompt (8 MiB), reference (16 MiB), workload (64 MiB).
TEST_F(Cli, EndlessOrOversizedInputIsRefused) {
    const std::string model = " -m " + kShared + "/models/pycode-600k.gguf";
    const std::string prompt = write_temp("small.txt", "def f(x):\n");
    const std::string big = write_temp("big.txt", "");
    std::filesystem::resize_file(big, (std::uintmax_t{8} << 20) + 1); // sparse, one byte over
    struct Case {
        std::string args, expect;
    };
    const Case cases[] = {
        {"generate" + model + " -f /dev/zero -n 1", "prompt file is more than 8 MiB"},
        {"generate" + model + " -f " + big + " -n 1", "prompt file is 8388609 bytes, over the limit of 8 MiB"},
        {"generate" + model + " -f " + prompt + " -n 1 --spec ref --ref /dev/zero", "reference file is more than 16 MiB"},
        {"tokenize" + model + " -f /dev/zero", "text file is more than 8 MiB"},
        {"bench" + model + " --workload /dev/zero", "workload file is more than 64 MiB"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.args);
        const auto t0 = std::chrono::steady_clock::now();
        const CliRun r = run(c.args);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_NE(r.status, 0);
        EXPECT_NE(r.out.find(c.expect), std::string::npos) << r.out;
        EXPECT_NE(r.out.find(c.args.find("big") != std::string::npos ? big : "/dev/zero"), std::string::npos) << r.out;
        EXPECT_LT(s, 60.0) << "refused only after " << s << " s";
    }
    std::filesystem::remove(prompt);
    std::filesystem::remove(big);
}

// A negative temperature decodes greedily, as in llama.cpp, and --help says so.
TEST_F(Cli, NegativeTemperatureIsGreedy) {
    const std::string prompt = write_temp("temp.txt", "import os\n");
    const std::string base = "generate -m " + kShared + "/models/pycode-600k.gguf -f " + prompt + " -n 12 --json";
    const CliRun greedy = run(base + " --temp 0"), negative = run(base + " --temp -0.5 --seed 7");
    ASSERT_EQ(greedy.status, 0) << greedy.out;
    ASSERT_EQ(negative.status, 0) << negative.out;
    EXPECT_EQ(nlohmann::json::parse(greedy.out).at("generated_ids"),
              nlohmann::json::parse(negative.out).at("generated_ids"));
    const CliRun help = run("generate --help");
    EXPECT_NE(help.out.find("0 or below = greedy"), std::string::npos) << help.out;
    std::filesystem::remove(prompt);
}

// Token trees from the command line: --tree with every text source, the cost policy and
// --spec suffix give plain decoding's ids, and the JSON statistics count tree passes; bad values
// are refused by name.
TEST_F(Cli, TreesAndTheCostPolicyGivePlainDecodingsIds) {
    const std::string prompt = write_temp("tree.txt", "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n");
    const std::string ref = write_temp("tree_ref.txt", "def sub(a, b):\n    return a - b\n\ndef mul(a, b):\n");
    const std::string base = "generate -m " + kShared + "/models/pycode-4m.gguf -f " + prompt + " -n 32 --json";
    const CliRun plain = run(base);
    ASSERT_EQ(plain.status, 0) << plain.out;
    const auto want = nlohmann::json::parse(plain.out).at("generated_ids");
    const std::vector<std::string> specs = {" --spec ngram --tree 3 -k 8", " --spec suffix -k 8 --k-policy cost",
                                            " --spec ref --ref " + ref + " --tree 4 -k 12"};
    for (const std::string& spec : specs) {
        const CliRun r = run(base + spec);
        ASSERT_EQ(r.status, 0) << spec << "\n" << r.out;
        const auto j = nlohmann::json::parse(r.out);
        EXPECT_EQ(j.at("generated_ids"), want) << spec;
        EXPECT_TRUE(j.at("speculation").contains("tree_passes")) << spec;
    }
    const CliRun bad = run(base + " --spec ngram --tree 0");
    EXPECT_NE(bad.status, 0);
    EXPECT_NE(bad.out.find("--tree"), std::string::npos) << bad.out;
    const CliRun unused = run(base + " --tree 2");
    EXPECT_NE(unused.status, 0);
    EXPECT_NE(unused.out.find("need --spec"), std::string::npos) << unused.out;
    std::filesystem::remove(prompt);
    std::filesystem::remove(ref);
}

// `rewind batch` writes one JSON line per request, each equal to `rewind generate` of its prompt
// alone; a request that cannot run ends with its own error line and the others go on.
TEST_F(Cli, BatchWritesOneLinePerRequestEachEqualToGenerate) {
    const std::vector<std::string> prompts = {"def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
                                              "import os\nimport sys\n", "class Stack:\n    def push(self, x):\n"};
    std::string wl;
    for (size_t i = 0; i < prompts.size(); ++i) {
        const std::string id = std::string("r").append(std::to_string(i)); // (GCC 12's -Wrestrict misfires on "r" + s)
        nlohmann::json j{{"id", id}, {"prompt", prompts[i]}, {"max_tokens", 12}};
        if (i != 1) j["references"] = {prompts[i] + "    return a - b\n"};
        wl += j.dump() + "\n";
    }
    const std::string path = write_temp("batch.jsonl", wl);
    std::map<std::string, nlohmann::json> lines;
    auto collect = [&](const std::string& out) {
        lines.clear();
        std::istringstream in(out);
        for (std::string line; std::getline(in, line);)
            if (!line.empty() && line[0] == '{') {
                auto j = nlohmann::json::parse(line);
                lines[j.at("id").get<std::string>()] = j;
            }
    };
    CliRun r = run("batch --workload " + path + " --concurrency 2 --spec ngram -k 4");
    ASSERT_EQ(r.status, 0) << r.out;
    collect(r.out);
    ASSERT_EQ(lines.size(), prompts.size()) << r.out;
    for (size_t i = 0; i < prompts.size(); ++i) {
        const std::string prompt = write_temp("batch_prompt.txt", prompts[i]);
        const CliRun g = run("generate -f " + prompt + " -n 12 --json");
        ASSERT_EQ(g.status, 0) << g.out;
        const auto gj = nlohmann::json::parse(g.out);
        const auto& bj = lines.at(std::string("r").append(std::to_string(i)));
        EXPECT_EQ(bj.at("generated_ids"), gj.at("generated_ids")) << i;
        EXPECT_EQ(bj.at("stop_reason"), gj.at("stop_reason")) << i;
        EXPECT_EQ(bj.at("text"), gj.at("generated_text")) << i;
        EXPECT_TRUE(bj.contains("speculation"));
        std::filesystem::remove(prompt);
    }
    // --spec ref: the item without references fails alone; the others' lines are written and the
    // exit status (1) says that not every request ran, naming the failed one.
    r = run("batch --workload " + path + " --concurrency 3 --spec ref");
    ASSERT_TRUE(WIFEXITED(r.status));
    EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.out;
    EXPECT_NE(r.out.find("failed requests: r1 (argument)"), std::string::npos) << r.out;
    collect(r.out);
    ASSERT_EQ(lines.size(), prompts.size()) << r.out;
    EXPECT_TRUE(lines.at("r1").contains("error")) << r.out;
    EXPECT_FALSE(lines.at("r0").contains("error")) << r.out;
    EXPECT_FALSE(lines.at("r2").contains("error")) << r.out;
    // bench --concurrency checks every request against its own plain decoding.
    r = run("bench --workload " + path + " --concurrency 1,2 -n 8 --repeat 1 -k 4");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("every request equals its own unbatched plain decoding"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("all-c decode plain tok/s"), std::string::npos) << r.out;
    // A fixed pass cost for the cost model (two positive numbers, or a clear refusal).
    r = run("bench --workload " + path + " --concurrency 2 -n 8 --repeat 1 -k 4 --cost-model --pass-cost 30,3");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("every request equals its own unbatched plain decoding"), std::string::npos) << r.out;
    for (const char* bad : {"--pass-cost 30", "--pass-cost 30,0", "--pass-cost -1,2"}) {
        r = run("batch --workload " + path + " --cost-model " + bad);
        ASSERT_TRUE(WIFEXITED(r.status)) << bad;
        EXPECT_EQ(WEXITSTATUS(r.status), 8) << bad << ": " << r.out;
        EXPECT_NE(r.out.find("--pass-cost wants two positive numbers"), std::string::npos) << bad << ": " << r.out;
    }
    r = run("batch --workload " + path + " --concurrency 0");
    ASSERT_TRUE(WIFEXITED(r.status));
    EXPECT_EQ(WEXITSTATUS(r.status), 8) << r.out;
    std::filesystem::remove(path);
}

// --simd caps the kernels' level: the same tokens at every level this machine runs; an unknown
// level is an argument error that names it.
TEST_F(Cli, SimdLevelCapGivesTheSameTokens) {
    const std::string base = "generate -m " + kShared + "/models/pycode-4m-q8_0.gguf -p 'def add(a, b):' -n 12 --ignore-eos --json";
    const CliRun best = run(base);
    ASSERT_EQ(best.status, 0) << best.out;
    const auto want = nlohmann::json::parse(best.out).at("generated_ids");
    for (const char* level : {"scalar", "avx2"}) {
        if (!rwd::simd_supported(rwd::parse_simd(level))) continue; // a CPU without AVX2 runs scalar only
        const CliRun r = run(base + " --simd " + level);
        ASSERT_EQ(r.status, 0) << level << ": " << r.out;
        EXPECT_EQ(nlohmann::json::parse(r.out).at("generated_ids"), want) << level;
    }
    const CliRun bad = run(base + " --simd avx3");
    ASSERT_TRUE(WIFEXITED(bad.status));
    EXPECT_EQ(WEXITSTATUS(bad.status), 8) << "argument: " << bad.out;
    EXPECT_NE(bad.out.find("avx3"), std::string::npos) << bad.out;
}

// `rewind tokenize --chat FILE --text` prints a conversation exactly as the publisher's template
// renders it (every record of ../shared/chat/goldens.jsonl, the template given as a file), and a
// record the template refuses fails with a message; in ids, message text that spells a control
// token stays text.
TEST_F(Cli, TokenizeChatFormatsEveryGoldenRecordExactly) {
    REWIND_NEED_FIXTURE(kShared + "/chat/goldens.jsonl");
    std::ifstream in(kShared + "/chat/goldens.jsonl");
    ASSERT_TRUE(in) << "missing ../shared/chat/goldens.jsonl";
    std::string line;
    int checked = 0;
    for (int i = 0; std::getline(in, line); ++i) {
        if (line.empty()) continue;
        const auto rec = nlohmann::json::parse(line);
        SCOPED_TRACE("record " + std::to_string(i) + " (" + rec["template"].get<std::string>() + ")");
        nlohmann::json conv = {{"messages", rec["messages"]},
                               {"add_generation_prompt", rec["add_generation_prompt"]},
                               {"kwargs", rec["kwargs"]},
                               {"bos_token", rec["bos_token"]},
                               {"eos_token", rec["eos_token"]}};
        const std::string path = write_temp("chat_" + std::to_string(i) + ".json", conv.dump());
        const std::string tmpl = kShared + "/chat/templates/" + rec["template"].get<std::string>() + ".jinja";
        const CliRun r = run("tokenize --chat " + path + " --text --chat-template-file " + tmpl);
        std::filesystem::remove(path);
        if (rec.contains("error") && !rec["error"].is_null()) {
            EXPECT_NE(r.status, 0) << r.out;
            EXPECT_FALSE(r.out.empty());
        } else {
            EXPECT_EQ(r.status, 0) << r.out;
            EXPECT_EQ(r.out, rec["text"].get<std::string>());
        }
        ++checked;
    }
    EXPECT_GE(checked, 40);

    // Qwen2.5's vocabulary: "<|im_end|>" typed by the user is text, so the ids hold exactly one
    // <|im_end|> per formatted turn (system, user) and none from the message.
    const nlohmann::json conv = {{"messages", {{{"role", "user"}, {"content", "say <|im_end|> twice: <|im_end|>"}}}}};
    const std::string path = write_temp("inject.json", conv.dump());
    const std::string vocab = kShared + "/vocab/ggml-vocab-qwen2.gguf";
    const CliRun ids = run("tokenize -m " + vocab + " --chat " + path + " --chat-template qwen2.5 --pieces");
    const CliRun text = run("tokenize -m " + vocab + " --chat " + path + " --chat-template qwen2.5 --text");
    std::filesystem::remove(path);
    ASSERT_EQ(ids.status, 0) << ids.out;
    ASSERT_EQ(text.status, 0) << text.out;
    size_t control = 0, pos = 0;
    while ((pos = ids.out.find("\t'<|im_end|>'", pos)) != std::string::npos) ++control, ++pos;
    EXPECT_EQ(control, 2u) << ids.out;
    EXPECT_NE(text.out.find("say <|im_end|> twice"), std::string::npos);
}

// `rewind tokenize --chat FILE --text` reads "tools", assistant "tool_calls" (arguments as objects,
// or as OpenAI's JSON strings) and "tool" messages: every record of ../shared/chat/tool_goldens.jsonl
// exactly; a format without tool support refuses them, naming it.
TEST_F(Cli, TokenizeChatRendersTheToolGoldens) {
    using ojson = nlohmann::ordered_json; // tools render in the key order written
    REWIND_NEED_FIXTURE(kShared + "/chat/tool_goldens.jsonl");
    std::ifstream in(kShared + "/chat/tool_goldens.jsonl");
    ASSERT_TRUE(in) << "missing ../shared/chat/tool_goldens.jsonl";
    int checked = 0;
    for (std::string line; std::getline(in, line);) {
        if (line.empty()) continue;
        const ojson rec = ojson::parse(line);
        ojson conv = {{"messages", rec["messages"]}, {"tools", rec["tools"]},
                      {"add_generation_prompt", rec["add_generation_prompt"]}, {"kwargs", rec["kwargs"]},
                      {"bos_token", rec["bos_token"]}, {"eos_token", rec["eos_token"]}};
        if (checked % 2) // OpenAI's form: the arguments as JSON strings
            for (ojson& m : conv["messages"])
                for (ojson& c : m.value("tool_calls", ojson::array())) c["function"]["arguments"] = c["function"]["arguments"].dump();
        const std::string path = write_temp("tools_" + std::to_string(checked) + ".json", conv.dump());
        const std::string tmpl = kShared + "/chat/templates/" + rec["template"].get<std::string>() + ".jinja";
        const CliRun r = run("tokenize --chat " + path + " --text --chat-template-file " + tmpl);
        EXPECT_EQ(r.status, 0) << r.out;
        EXPECT_EQ(r.out, rec["text"].get<std::string>()) << "record " << checked;
        if (checked == 2) {
            const CliRun refused = run("tokenize --chat " + path + " --text --chat-template llama3");
            EXPECT_EQ(WEXITSTATUS(refused.status), 5) << refused.out; // unsupported
            EXPECT_NE(refused.out.find("'llama3' has no tool support"), std::string::npos) << refused.out;
        }
        std::filesystem::remove(path);
        ++checked;
    }
    EXPECT_EQ(checked, 18);
}

// `rewind generate --chat` runs exactly the ids `rewind tokenize --chat` gives for the same
// conversation (the prompt as the user's message after --system); a file without a template and
// no --chat-template is refused with a message.
TEST_F(Cli, GenerateChatRunsTheFormattedConversation) {
    const nlohmann::json conv = {{"messages",
                                  {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "def f(x):"}}}}};
    const std::string path = write_temp("generate_chat.json", conv.dump());
    const CliRun ids = run("tokenize --chat " + path + " --chat-template qwen2.5");
    std::filesystem::remove(path);
    ASSERT_EQ(ids.status, 0) << ids.out;
    const CliRun gen = run("generate --chat --system 'Be brief.' -p 'def f(x):' -n 2 --chat-template qwen2.5 --json");
    ASSERT_EQ(gen.status, 0) << gen.out;
    const auto j = nlohmann::json::parse(gen.out.substr(gen.out.find('{')));
    std::ostringstream want;
    for (size_t i = 0; i < j["prompt_ids"].size(); ++i) want << (i ? " " : "") << j["prompt_ids"][i].get<int>();
    want << '\n';
    EXPECT_EQ(want.str(), ids.out);
    const CliRun none = run("generate --chat -p x -n 2");
    EXPECT_NE(none.status, 0);
    EXPECT_NE(none.out.find("chat_template"), std::string::npos) << none.out;
}

// `rewind chat` from a pipe: one reply per input line, the first equal to `generate --chat` of the
// same message; with --verbose, the second turn reuses the first's KV; /reset starts over.
TEST_F(Cli, ChatFromAPipeReusesEarlierTurns) {
    const std::string input = write_temp("chat_input.txt", "def add(a, b):\nnow def sub(a, b):\n/reset\nclass Stack:\n");
    const std::string common = " --chat-template qwen2.5 -n 10 --system 'You write Python.'";
    const CliRun chat = run("chat" + common + " --verbose < " + input);
    const CliRun quiet = run("chat" + common + " < " + input); // the replies alone
    std::filesystem::remove(input);
    ASSERT_EQ(chat.status, 0) << chat.out;
    size_t turns = 0, pos = 0;
    while ((pos = chat.out.find("[turn ", pos)) != std::string::npos) ++turns, ++pos;
    EXPECT_EQ(turns, 3u) << chat.out;
    const size_t t2 = chat.out.find("[turn 2: ");
    ASSERT_NE(t2, std::string::npos);
    const size_t reused = chat.out.find(" reused", t2);
    const size_t comma = chat.out.rfind(", ", reused);
    EXPECT_GT(std::stoll(chat.out.substr(comma + 2, reused - comma - 2)), 0) << chat.out.substr(t2, 120);
    EXPECT_NE(chat.out.find("conversation reset"), std::string::npos);

    const CliRun gen = run("generate --chat -p 'def add(a, b):'" + common + " --json");
    ASSERT_EQ(gen.status, 0) << gen.out;
    const auto j = nlohmann::json::parse(gen.out.substr(gen.out.find('{')));
    const std::string first_reply = j["generated_text"].get<std::string>();
    ASSERT_EQ(quiet.status, 0) << quiet.out;
    EXPECT_EQ(quiet.out.substr(0, first_reply.size() + 1), first_reply + "\n") << quiet.out;
}

// A small model carrying a real chat template (make-dummy --chat-template-file): inspect names the
// format detected from it, and chat and generate --chat use it without --chat-template.
TEST_F(Cli, AModelsOwnChatTemplateIsDetectedAndUsed) {
    const std::string model = write_temp("chat_dummy.gguf", "");
    const CliRun made = run("make-dummy --shape tiny --type f32 -t 1 -o " + model + " --chat-template-file " + kShared +
                            "/chat/templates/qwen2_5.jinja");
    ASSERT_EQ(made.status, 0) << made.out;
    const CliRun info = run("inspect " + model);
    EXPECT_NE(info.out.find("chat format           qwen2.5 (from tokenizer.chat_template)"), std::string::npos) << info.out;
    const std::string input = write_temp("chat_dummy_input.txt", "hello\n");
    const CliRun chat = run("chat -m " + model + " -n 4 --verbose < " + input);
    std::filesystem::remove(input);
    EXPECT_EQ(chat.status, 0) << chat.out;
    EXPECT_NE(chat.out.find("chat format: qwen2.5"), std::string::npos) << chat.out;
    const CliRun gen = run("generate -m " + model + " --chat -p hello -n 4 --json");
    EXPECT_EQ(gen.status, 0) << gen.out;
    std::filesystem::remove(model);
}

// `rewind chat` under a terminal shows its prompt; /save in one run and /load in the next keep the
// conversation: the turn after the load reuses the saved cache.
TEST_F(Cli, ChatUnderATerminalAndAcrossRuns) {
    if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1) for a pseudo-terminal";
    const std::string saved = write_temp("chat_saved.kv", "");
    const std::string first = write_temp("chat_first.txt", "def add(a, b):\n/save " + saved + "\n");
    // script(1) runs rewind under a pseudo-terminal (run() would run rewind on a pipe).
    FILE* p = ::popen(("script -qec '" + kRewind + " chat --chat-template chatml -n 6' /dev/null < " + first + " 2>&1").c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    std::array<char, 4096> buf{};
    size_t n = 0;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    EXPECT_EQ(::pclose(p), 0) << out;
    EXPECT_NE(out.find("> "), std::string::npos) << "no prompt under a terminal: " << out;
    EXPECT_NE(out.find("conversation saved to"), std::string::npos) << out;

    const std::string second = write_temp("chat_second.txt", "/load " + saved + "\nclass Stack:\n");
    const CliRun again = run("chat --chat-template chatml -n 6 --verbose < " + second);
    EXPECT_EQ(again.status, 0) << again.out;
    EXPECT_NE(again.out.find("conversation loaded from"), std::string::npos) << again.out;
    const size_t t = again.out.find("[turn ");
    ASSERT_NE(t, std::string::npos) << again.out;
    EXPECT_EQ(again.out.find(", 0 reused", t), std::string::npos) << again.out.substr(t, 120);
    for (const std::string& f : {saved, saved + ".chat", first, second}) std::filesystem::remove(f);
}
