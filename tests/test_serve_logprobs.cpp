// Server logprobs against the CLI's: chat (top_logprobs N; whole and streamed) and completions
// (the legacy logprobs: N) answered with speculation on give, token for token, the text, logprob
// (the same shortest round-trip decimal, so the same float bits) and top alternatives of
// `rewind generate --logprobs N --json` on the same prompt with speculation off.
#include <gtest/gtest.h>

#include <httplib.h>

#include <bit>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "rewind/gguf.h"
#include "rewind/tokenizer.h"
#include "rewind/serve/server.h"
#include "serve_test_util.h"

using namespace rwd;
using namespace rwd::serve;
using json = nlohmann::ordered_json;

namespace {

const std::string kModel = std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf";
const std::string kPrompt = "import os\n\ndef walk(root):\n    for name in os.listdir(root):\n        path = os.path.join(root, name)\n";
constexpr int kTop = 5;
constexpr int kTokens = 24;

struct Case {
    float temperature;
    uint64_t seed;
};

// `rewind generate --json --logprobs kTop` (speculation off) on kPrompt, as one user message with
// the chatml template when `chat`.
json generate(bool chat, const Case& c) {
    const std::string file = test::write_temp("rwd_logprobs_", "prompt.txt", kPrompt);
    std::string args = "generate -m '" + kModel + "' -f '" + file + "' --json --logprobs " + std::to_string(kTop) +
                       " -n " + std::to_string(kTokens) + " --temp " + std::to_string(c.temperature) + " --seed " +
                       std::to_string(c.seed) + " --spec none";
    if (chat) args += " --chat --chat-template chatml";
    const test::CliRun r = test::run_rewind(args, false);
    EXPECT_EQ(r.status, 0) << r.out;
    return json::parse(r.out);
}

// The same value, written the same way: the server and the CLI print a float's shortest round trip.
void expect_same_logprob(const json& served, const json& cli, const std::string& where) {
    EXPECT_EQ(served.dump(), cli.dump()) << where;
    EXPECT_EQ(std::bit_cast<uint32_t>(served.get<float>()), std::bit_cast<uint32_t>(cli.get<float>())) << where;
}

// The server writes a token as its text with control tokens rendered (the CLI's "text" leaves
// them out): compared by the CLI's ids.
std::string piece(const json& id) {
    static const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(GgufFile::open(kModel));
    return tok->token_to_piece(id.get<TokenId>(), true);
}

json bytes_of(const std::string& text) {
    json b = json::array();
    for (char ch : text) b.push_back(static_cast<int>(static_cast<unsigned char>(ch)));
    return b;
}

class ServeLogprobs : public ::testing::TestWithParam<Case> {
protected:
    static void SetUpTestSuite() {
        ServerOptions o;
        o.model_path = kModel;
        o.port = 0;
        o.chat_template = "chatml";
        o.parallel = 2;
        loop_ = std::make_unique<LoopbackServer>(o);
    }
    static void TearDownTestSuite() { loop_.reset(); }
    static json post(const std::string& path, json body, const std::string& source) {
        body["speculation"] = {{"source", source}};
        auto r = loop_->client().Post(path.c_str(), body.dump(), "application/json");
        EXPECT_TRUE(r);
        if (!r) return json::object();
        EXPECT_EQ(r->status, 200) << r->body;
        return json::parse(r->body)["choices"][0];
    }
    // Guesses the source's answers have had accepted so far (the server's metrics): the answers
    // above were speculative indeed.
    static double accepted(const std::string& source) {
        auto r = loop_->client().Get("/metrics");
        const std::string key = "rewind_guesses_accepted_total{source=\"" + source + "\"} ";
        const size_t at = r ? r->body.find(key) : std::string::npos;
        return at == std::string::npos ? 0.0 : std::stod(r->body.substr(at + key.size()));
    }
    // A streamed chat answer put back together: its content and its chunks' logprobs.content.
    static json streamed_chat(json body, const std::string& source) {
        body["speculation"] = {{"source", source}};
        body["stream"] = true;
        auto r = loop_->client().Post("/v1/chat/completions", body.dump(), "application/json");
        EXPECT_TRUE(r);
        json out = {{"content", ""}, {"logprobs", json::array()}};
        if (!r) return out;
        for (size_t pos = 0; (pos = r->body.find("data: {", pos)) != std::string::npos;) {
            const size_t end = r->body.find("\n\n", pos);
            const json c = json::parse(r->body.substr(pos + 6, end - pos - 6))["choices"][0];
            pos = end;
            if (c["delta"].contains("content")) out["content"] = out["content"].get<std::string>() + c["delta"]["content"].get<std::string>();
            if (c.contains("logprobs") && c["logprobs"].is_object())
                for (const json& e : c["logprobs"]["content"]) out["logprobs"].push_back(e);
        }
        return out;
    }
    static json sampling(const Case& c) { return {{"max_tokens", kTokens}, {"temperature", c.temperature}, {"seed", c.seed}}; }
    static inline std::unique_ptr<LoopbackServer> loop_;
};

TEST_P(ServeLogprobs, ChatEqualsGenerate) {
    const json cli = generate(true, GetParam());
    const json& lps = cli["logprobs"];
    ASSERT_EQ(lps.size(), cli["generated_ids"].size());
    const double before = accepted("ngram");
    for (const std::string source : {"ngram", "suffix"}) {
        json req = sampling(GetParam());
        req["messages"] = {{{"role", "user"}, {"content", kPrompt}}};
        req["logprobs"] = true;
        req["top_logprobs"] = kTop;
        const json choice = post("/v1/chat/completions", req, source);
        EXPECT_EQ(choice["message"]["content"], cli["generated_text"]) << source;
        const json& content = choice["logprobs"]["content"];
        ASSERT_EQ(content.size(), lps.size()) << source;
        const json streamed = streamed_chat(req, source); // chunk by chunk, the same entries
        EXPECT_EQ(streamed["content"], cli["generated_text"]) << source << " streamed";
        EXPECT_EQ(streamed["logprobs"], content) << source << " streamed";
        for (size_t i = 0; i < lps.size(); ++i) {
            const std::string at = source + " token " + std::to_string(i);
            EXPECT_EQ(content[i]["token"], piece(lps[i]["id"])) << at;
            EXPECT_EQ(content[i]["bytes"], bytes_of(piece(lps[i]["id"]))) << at;
            expect_same_logprob(content[i]["logprob"], lps[i]["logprob"], at);
            const json& top = content[i]["top_logprobs"];
            ASSERT_EQ(top.size(), lps[i]["top"].size()) << at;
            for (size_t j = 0; j < top.size(); ++j) {
                EXPECT_EQ(top[j]["token"], piece(lps[i]["top"][j]["id"])) << at << " alternative " << j;
                expect_same_logprob(top[j]["logprob"], lps[i]["top"][j]["logprob"], at + " alternative " + std::to_string(j));
            }
        }
    }
    EXPECT_GT(accepted("ngram"), before);
}

TEST_P(ServeLogprobs, CompletionEqualsGenerate) {
    const json cli = generate(false, GetParam());
    const json& lps = cli["logprobs"];
    const double before = accepted("ngram");
    for (const std::string source : {"ngram", "suffix"}) {
        json req = sampling(GetParam());
        req["prompt"] = kPrompt;
        req["logprobs"] = kTop;
        const json choice = post("/v1/completions", req, source);
        EXPECT_EQ(choice["text"], cli["generated_text"]) << source;
        const json& lp = choice["logprobs"];
        ASSERT_EQ(lp["tokens"].size(), lps.size()) << source;
        for (size_t i = 0; i < lps.size(); ++i) {
            const std::string at = source + " token " + std::to_string(i);
            EXPECT_EQ(lp["tokens"][i], piece(lps[i]["id"])) << at;
            expect_same_logprob(lp["token_logprobs"][i], lps[i]["logprob"], at);
            const json& top = lp["top_logprobs"][i]; // {text: logprob}
            ASSERT_EQ(top.size(), lps[i]["top"].size()) << at;
            for (const json& alt : lps[i]["top"]) {
                const std::string text = piece(alt["id"]);
                ASSERT_TRUE(top.contains(text)) << at << ": " << text;
                expect_same_logprob(top[text], alt["logprob"], at + " " + json(text).dump());
            }
        }
    }
    EXPECT_GT(accepted("ngram"), before);
}

INSTANTIATE_TEST_SUITE_P(GreedyAndSampled, ServeLogprobs, ::testing::Values(Case{0.0f, 0}, Case{0.8f, 7}),
                         [](const auto& info) { return info.param.temperature > 0 ? std::string("Sampled") : std::string("Greedy"); });

} // namespace
