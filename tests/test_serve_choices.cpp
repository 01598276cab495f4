// rewind serve's `n` > 1: choice i equals the same request with n = 1 and seed + i, whole and
// streamed (chunks carry the choice's index), the choices after the first copy the prompt's KV
// from it instead of computing it again, and n outside [1, 16] is a 400.
#include <gtest/gtest.h>

#include <httplib.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "rewind/serve/api.h"
#include "rewind/serve/server.h"
#include "serve_test_util.h"

using namespace rwd;
using namespace rwd::serve;
using json = nlohmann::json;

namespace {

const std::string kModel = std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf";

class ServeChoices : public ::testing::Test {
protected:
    void SetUp() override {
        ServerOptions o;
        o.model_path = kModel;
        o.port = 0;
        o.chat_template = "chatml";
        o.parallel = 4;
        o.cache_budget_bytes = 0; // no prefix cache: what is shared comes from the first choice
        loop = std::make_unique<LoopbackServer>(o);
        server = &loop->server();
        client = &loop->client();
    }
    void TearDown() override { loop.reset(); }
    json post(const std::string& path, const json& body) {
        auto r = client->Post(path.c_str(), body.dump(), "application/json");
        EXPECT_TRUE(r);
        EXPECT_EQ(r->status, 200) << r->body;
        return json::parse(r->body);
    }
    // The streamed texts by choice index, and the finish reasons.
    std::map<int, std::pair<std::string, std::string>> stream(const std::string& path, json body) {
        body["stream"] = true;
        auto r = client->Post(path.c_str(), body.dump(), "application/json");
        EXPECT_TRUE(r);
        std::map<int, std::pair<std::string, std::string>> out;
        for (size_t pos = 0; (pos = r->body.find("data: {", pos)) != std::string::npos;) {
            const size_t end = r->body.find("\n\n", pos);
            const json chunk = json::parse(r->body.substr(pos + 6, end - pos - 6));
            pos = end;
            for (const json& c : chunk["choices"]) {
                auto& [text, finish] = out[c["index"].get<int>()];
                if (c.contains("text")) text += c["text"].get<std::string>();
                if (c.contains("delta") && c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
                if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
            }
        }
        return out;
    }
    std::unique_ptr<LoopbackServer> loop;
    Server* server = nullptr;          // loop's
    httplib::Client* client = nullptr; // loop's
};

TEST_F(ServeChoices, ChoiceIIsTheAnswerWithSeedPlusI) {
    const std::string prompt = "import os\nimport sys\n\ndef main(argv):\n    parser = ";
    const json req = {{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0.9}, {"seed", 5}, {"n", 4}};
    const json all = post("/v1/completions", req);
    ASSERT_EQ(all["choices"].size(), 4u);
    int64_t completion = 0;
    for (int i = 0; i < 4; ++i) {
        json one = req;
        one["n"] = 1;
        one["seed"] = 5 + i;
        const json want = post("/v1/completions", one);
        EXPECT_EQ(all["choices"][i]["index"], i);
        EXPECT_EQ(all["choices"][i]["text"], want["choices"][0]["text"]) << "choice " << i;
        completion += want["usage"]["completion_tokens"].get<int64_t>();
    }
    EXPECT_EQ(all["usage"]["completion_tokens"], completion);
    EXPECT_EQ(all["usage"]["prompt_tokens"], post("/v1/completions", req)["usage"]["prompt_tokens"]);
    // Streamed, each index reassembles to its choice.
    const auto streamed = stream("/v1/completions", req);
    ASSERT_EQ(streamed.size(), 4u);
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(streamed.at(i).first, all["choices"][i]["text"]) << "choice " << i;
        EXPECT_EQ(streamed.at(i).second, all["choices"][i]["finish_reason"]);
    }
}

TEST_F(ServeChoices, ChatChoicesShareThePromptsKv) {
    const json req = {{"messages", {{{"role", "user"}, {"content", "def fib(n):\n    \"\"\"The n-th Fibonacci number.\"\"\""}}}},
                      {"max_tokens", 8}, {"temperature", 1.0}, {"seed", 11}, {"n", 3}};
    const json all = post("/v1/chat/completions", req);
    ASSERT_EQ(all["choices"].size(), 3u);
    const int64_t prompt = all["usage"]["prompt_tokens"];
    // The second and third choice copied all but the prompt's last token from the first.
    auto metrics = client->Get("/metrics");
    ASSERT_TRUE(metrics);
    const std::string line = "rewind_cached_prompt_tokens_total ";
    const size_t at = metrics->body.find("\n" + line);
    ASSERT_NE(at, std::string::npos) << metrics->body;
    EXPECT_EQ(std::stoll(metrics->body.substr(at + 1 + line.size())), 2 * (prompt - 1));
    const auto streamed = stream("/v1/chat/completions", req);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(streamed.at(i).first, all["choices"][i]["message"]["content"]) << i;
}

TEST(ServeChoicesParse, Bounds) {
    const std::string msgs = R"({"messages": [{"role": "user", "content": "x"}], "n": )";
    EXPECT_EQ(parse_request(Endpoint::Chat, msgs + "16}").n, 16);
    EXPECT_EQ(parse_request(Endpoint::Completions, R"({"prompt": "x", "n": 3})").n, 3);
    for (const char* bad : {"0", "17", "2.5", "\"2\""}) {
        try {
            (void)parse_request(Endpoint::Chat, msgs + bad + "}");
            ADD_FAILURE() << "n = " << bad << " accepted";
        } catch (const ApiError& e) {
            EXPECT_EQ(e.status, 400);
            EXPECT_EQ(e.param, "n");
        }
    }
}

} // namespace
