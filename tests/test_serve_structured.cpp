// rewind serve's structured output, logprobs and penalties: the request fields parsed and
// range-checked, answers under response_format that parse as the schema's JSON, and every answer
// (constrained, with logprobs, with penalties) byte- and bit-identical with speculation on and off.
#include <gtest/gtest.h>

#include <httplib.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "rewind/serve/api.h"
#include "rewind/serve/server.h"
#include "serve_test_util.h"

using namespace rwd;
using namespace rwd::serve;
using json = nlohmann::json;

namespace {

const std::string kModel = std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf";
const std::string kMsgs = R"({"messages": [{"role": "user", "content": "x"}], )";

std::string refused_param(Endpoint ep, const std::string& body) {
    try {
        parse_request(ep, body);
    } catch (const ApiError& e) {
        return e.status == 400 ? e.param : "status " + std::to_string(e.status);
    }
    return "accepted";
}

} // namespace

TEST(ServeStructuredParse, ResponseFormats) {
    EXPECT_EQ(parse_request(Endpoint::Chat, kMsgs + R"("response_format": {"type": "text"}})").format.kind, OutputKind::Text);
    EXPECT_EQ(parse_request(Endpoint::Chat, kMsgs + R"("response_format": {"type": "json_object"}})").format.kind,
              OutputKind::JsonObject);
    const ServeRequest s = parse_request(
        Endpoint::Chat,
        kMsgs + R"("response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true, "schema": {"type": "integer"}}}})");
    EXPECT_EQ(s.format.kind, OutputKind::JsonSchema);
    EXPECT_EQ(json::parse(s.format.text), json::parse(R"({"type": "integer"})"));
    const ServeRequest g = parse_request(Endpoint::Completions, R"({"prompt": "x", "grammar": "root ::= \"a\""})");
    EXPECT_EQ(g.format.kind, OutputKind::Grammar);
    EXPECT_EQ(g.format.text, "root ::= \"a\"");
    EXPECT_EQ(parse_request(Endpoint::Completions, R"({"prompt": "x", "json_schema": {"type": "string"}})").format.kind,
              OutputKind::JsonSchema);
    for (const auto& [field, param] : std::vector<std::pair<std::string, std::string>>{
             {R"("response_format": {"type": "xml"}})", "response_format.type"},
             {R"("response_format": "json"})", "response_format"},
             {R"("response_format": {"type": "json_schema"}})", "response_format.json_schema"},
             {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})", "response_format.json_schema.name"},
             {R"("response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": 3}}})",
              "response_format.json_schema.schema"},
             {R"("grammar": ""})", "grammar"},
             {R"("grammar": "root ::= \"a\"", "json_schema": {}})", "grammar"},
             {R"("json_schema": "x"})", "json_schema"}})
        EXPECT_EQ(refused_param(Endpoint::Chat, kMsgs + field), param) << field;
}

TEST(ServeStructuredParse, LogprobsAndPenalties) {
    const ServeRequest c = parse_request(
        Endpoint::Chat, kMsgs + R"("logprobs": true, "top_logprobs": 3, "frequency_penalty": -1.5, "presence_penalty": 2, "logit_bias": {"7": -100, "12": 3.5}})");
    EXPECT_TRUE(c.logprobs);
    EXPECT_EQ(c.top_logprobs, 3);
    EXPECT_FLOAT_EQ(*c.frequency_penalty, -1.5f);
    EXPECT_FLOAT_EQ(*c.presence_penalty, 2.0f);
    ASSERT_EQ(c.logit_bias.size(), 2u);
    EXPECT_EQ(c.logit_bias[0], (std::pair<int64_t, float>{7, -100.0f}));
    const ServeRequest legacy = parse_request(Endpoint::Completions, R"({"prompt": "x", "logprobs": 2})");
    EXPECT_TRUE(legacy.logprobs);
    EXPECT_EQ(legacy.top_logprobs, 2);
    for (const auto& [field, param] : std::vector<std::pair<std::string, std::string>>{
             {R"("frequency_penalty": 2.5})", "frequency_penalty"},
             {R"("presence_penalty": -3})", "presence_penalty"},
             {R"("logit_bias": {"x": 1}})", "logit_bias.x"},
             {R"("logit_bias": {"-1": 1}})", "logit_bias.-1"},
             {R"("logit_bias": {"5": 101}})", "logit_bias.5"},
             {R"("logit_bias": [1]})", "logit_bias"},
             {R"("top_logprobs": 2})", "top_logprobs"},
             {R"("logprobs": true, "top_logprobs": 21})", "top_logprobs"},
             {R"("logprobs": 3})", "logprobs"}})
        EXPECT_EQ(refused_param(Endpoint::Chat, kMsgs + field), param) << field;
    EXPECT_EQ(refused_param(Endpoint::Completions, R"({"prompt": "x", "top_logprobs": 2})"), "top_logprobs");
    EXPECT_EQ(refused_param(Endpoint::Completions, R"({"prompt": "x", "logprobs": 21})"), "logprobs");
}

class ServeStructured : public ::testing::Test {
protected:
    void SetUp() override {
        ServerOptions o;
        o.model_path = kModel;
        o.port = 0;
        o.chat_template = "chatml";
        o.parallel = 4;
        loop = std::make_unique<LoopbackServer>(o, 120);
        server = &loop->server();
        client = &loop->client();
    }
    void TearDown() override { loop.reset(); }
    std::pair<int, json> post(const std::string& path, const json& body) {
        auto r = client->Post(path.c_str(), body.dump(), "application/json");
        EXPECT_TRUE(r);
        if (!r) return {0, json()};
        return {r->status, json::parse(r->body)};
    }
    json ok(const std::string& path, const json& body) {
        auto [status, j] = post(path, body);
        EXPECT_EQ(status, 200) << j.dump();
        return j;
    }
    // The streamed chunks' choices, in order.
    std::vector<json> stream(const std::string& path, json body) {
        body["stream"] = true;
        auto r = client->Post(path.c_str(), body.dump(), "application/json");
        EXPECT_TRUE(r);
        std::vector<json> out;
        if (!r) return out;
        for (size_t pos = 0; (pos = r->body.find("data: {", pos)) != std::string::npos;) {
            const size_t end = r->body.find("\n\n", pos);
            const json chunk = json::parse(r->body.substr(pos + 6, end - pos - 6));
            pos = end;
            for (const json& c : chunk["choices"]) out.push_back(c);
        }
        return out;
    }
    std::unique_ptr<LoopbackServer> loop;
    Server* server = nullptr;          // loop's
    httplib::Client* client = nullptr; // loop's
};

std::vector<json> json_workload(size_t n) {
    std::ifstream in(std::string(REWIND_SHARED_DIR) + "/workloads/json.jsonl");
    std::vector<json> out;
    for (std::string line; out.size() < n && std::getline(in, line);) out.push_back(json::parse(line));
    return out;
}

json chat_with_schema(const json& item) {
    return {{"messages", {{{"role", "user"}, {"content", item["prompt"].get<std::string>().substr(0, 600)}}}},
            {"max_tokens", item["max_tokens"]},
            {"temperature", 0},
            {"response_format",
             {{"type", "json_schema"}, {"json_schema", {{"name", "item"}, {"strict", true}, {"schema", item["json_schema"]}}}}}};
}

// The workload's schemas: each answer is JSON (or cut by max_tokens), the same bytes with
// speculation (ngram, forced text alone, and a prediction of the answer itself) as without.
TEST_F(ServeStructured, SchemaAnswersAreJsonAndExactUnderSpeculation) {
    const std::vector<json> items = json_workload(6);
    if (items.empty()) GTEST_SKIP() << "the shared JSON workload is absent";
    for (const json& item : items) {
        json body = chat_with_schema(item);
        body["speculation"] = {{"source", "none"}};
        const json plain = ok("/v1/chat/completions", body)["choices"][0];
        const std::string text = plain["message"]["content"];
        if (plain["finish_reason"] == "stop") {
            EXPECT_TRUE(json::accept(text)) << item["id"] << ": " << text;
        } else {
            EXPECT_EQ(plain["finish_reason"], "length");
        }
        for (const char* source : {"ngram", "forced"}) {
            body["speculation"] = {{"source", source}};
            EXPECT_EQ(ok("/v1/chat/completions", body)["choices"][0]["message"]["content"], text)
                << item["id"] << " " << source;
        }
        body["speculation"] = {{"source", "ngram"}};
        body["prediction"] = {{"type", "content"}, {"content", text}};
        EXPECT_EQ(ok("/v1/chat/completions", body)["choices"][0]["message"]["content"], text) << item["id"];
        body.erase("prediction");
        body["speculation"] = {{"source", "none"}};
        std::string streamed;
        for (const json& c : stream("/v1/chat/completions", body)) streamed += c["delta"].value("content", "");
        EXPECT_EQ(streamed, text) << item["id"];
    }
    // Forced text is guessed under ngram too (composed), and counted by the request's source.
    const std::string m = client->Get("/metrics")->body;
    for (const char* source : {"ngram", "forced"}) {
        const std::string key = std::string("rewind_forced_guesses_accepted_total{source=\"") + source + "\"} ";
        const size_t at = m.find(key);
        ASSERT_NE(at, std::string::npos) << source << "\n" << m;
        EXPECT_GT(std::stoll(m.substr(at + key.size())), 0) << source;
    }
}

TEST_F(ServeStructured, JsonObjectAndGrammar) {
    json body = {{"messages", {{{"role", "user"}, {"content", "def f():"}}}}, {"max_tokens", 60}, {"temperature", 0},
                 {"response_format", {{"type", "json_object"}}}};
    const json c = ok("/v1/chat/completions", body)["choices"][0];
    if (c["finish_reason"] == "stop") {
        EXPECT_TRUE(json::parse(c["message"]["content"].get<std::string>()).is_object());
    }
    const json g = ok("/v1/completions", {{"prompt", "x = "}, {"max_tokens", 6}, {"grammar", "root ::= \"ab\" [0-9]+"}})["choices"][0];
    const std::string t = g["text"];
    ASSERT_GE(t.size(), 2u);
    EXPECT_EQ(t.substr(0, 2), "ab");
    EXPECT_EQ(t.find_first_not_of("0123456789", 2), std::string::npos) << t;
}

TEST_F(ServeStructured, RefusesUnsupportedSchemaKeywordsAndBadGrammarsByName) {
    json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                 {"response_format",
                  {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", {{"type", "string"}, {"format", "uri-template"}}}}}}}};
    auto [status, j] = post("/v1/chat/completions", body);
    EXPECT_EQ(status, 400);
    EXPECT_EQ(j["error"]["param"], "response_format.json_schema.schema");
    EXPECT_NE(j["error"]["message"].get<std::string>().find("format"), std::string::npos) << j.dump();
    auto [gs, gj] = post("/v1/completions", {{"prompt", "x"}, {"grammar", "root ::= ("}});
    EXPECT_EQ(gs, 400);
    EXPECT_EQ(gj["error"]["param"], "grammar");
    auto [bs, bj] = post("/v1/completions", {{"prompt", "x"}, {"logit_bias", {{"99999999", 1}}}});
    EXPECT_EQ(bs, 400);
    EXPECT_EQ(bj["error"]["param"], "logit_bias");
}

// Logprobs: the same values (as JSON numbers, so the same floats) with speculation as without,
// whole and streamed, on both endpoints, greedy and sampled.
TEST_F(ServeStructured, LogprobsAreThePlainValuesWhateverTheSpeculation) {
    for (const double temp : {0.0, 0.8}) {
        json chat = {{"messages", {{{"role", "user"}, {"content", "def add(a, b):\n    return a + b\n\ndef add("}}}},
                     {"max_tokens", 24}, {"temperature", temp}, {"seed", 5}, {"logprobs", true}, {"top_logprobs", 3},
                     {"speculation", {{"source", "none"}}}};
        const json plain = ok("/v1/chat/completions", chat)["choices"][0]["logprobs"]["content"];
        ASSERT_EQ(plain.size(), 24u);
        EXPECT_EQ(plain[0]["top_logprobs"].size(), 3u);
        for (const json& e : plain) EXPECT_LE(e["logprob"].get<double>(), 0.0);
        chat["speculation"] = {{"source", "ngram"}};
        EXPECT_EQ(ok("/v1/chat/completions", chat)["choices"][0]["logprobs"]["content"], plain) << temp;
        json streamed = json::array();
        for (const json& c : stream("/v1/chat/completions", chat))
            if (c.contains("logprobs") && !c["logprobs"].is_null())
                for (const json& e : c["logprobs"]["content"]) streamed.push_back(e);
        EXPECT_EQ(streamed, plain) << temp;
    }
    json legacy = {{"prompt", "def add(a, b):\n    return a + b\n\ndef add("}, {"max_tokens", 16}, {"temperature", 0},
                   {"logprobs", 2}, {"speculation", {{"source", "none"}}}};
    const json lp = ok("/v1/completions", legacy)["choices"][0]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), 16u);
    EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
    EXPECT_EQ(lp["text_offset"][1], lp["tokens"][0].get<std::string>().size());
    legacy["speculation"] = {{"source", "ngram"}};
    EXPECT_EQ(ok("/v1/completions", legacy)["choices"][0]["logprobs"], lp);
}

// Penalties and logit_bias: the same answer with speculation as without; a -100 bias removes
// the token the plain answer starts with.
TEST_F(ServeStructured, PenaltiesAreExactUnderSpeculation) {
    json body = {{"prompt", "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef"},
                 {"max_tokens", 40}, {"temperature", 0}, {"speculation", {{"source", "none"}}}};
    const std::string free_text = ok("/v1/completions", body)["choices"][0]["text"];
    body["frequency_penalty"] = 1.2;
    body["presence_penalty"] = 0.6;
    const std::string plain = ok("/v1/completions", body)["choices"][0]["text"];
    EXPECT_NE(plain, free_text);
    body["speculation"] = {{"source", "ngram"}};
    EXPECT_EQ(ok("/v1/completions", body)["choices"][0]["text"], plain);
    body["n"] = 2;
    body["temperature"] = 0.7;
    body["seed"] = 3;
    const json both = ok("/v1/completions", body)["choices"];
    body["n"] = 1;
    body["speculation"] = {{"source", "none"}};
    for (int i = 0; i < 2; ++i) {
        body["seed"] = 3 + i;
        EXPECT_EQ(ok("/v1/completions", body)["choices"][0]["text"], both[i]["text"]) << i;
    }
    json lp = {{"prompt", "def add("}, {"max_tokens", 1}, {"temperature", 0}, {"logprobs", 1}};
    const json first = ok("/v1/completions", lp)["choices"][0]["logprobs"];
    const std::string tok = first["tokens"][0];
    json biased = lp;
    // The token id of the greedy first token is not in the answer; find it through /tokenize.
    auto r = client->Post("/tokenize", json{{"content", tok}}.dump(), "application/json");
    if (r && r->status == 200) {
        const json ids = json::parse(r->body)["tokens"];
        if (ids.size() == 1) {
            biased["logit_bias"] = {{std::to_string(ids[0].get<int>()), -100}};
            EXPECT_NE(ok("/v1/completions", biased)["choices"][0]["logprobs"]["tokens"][0], tok);
        }
    }
}
