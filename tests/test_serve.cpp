// rewind serve: request parsing and validation (every field's type and range, the fields refused
// because rewind would have to ignore them), the length and key checks, the batch decoder's
// cross-request prefix cache (same tokens, prompt positions copied), and an in-process server
// over loopback: answers equal generate_plain's, the prefix cache, limits (413, 400, 401, 503),
// the replica id on every response, and the sampling fields (repeat_penalty, repeat_last_n,
// top_k, min_p) exact under speculation.
#include <gtest/gtest.h>

#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "rewind/context.h"
#include "rewind/generate.h"
#include "rewind/model.h"
#include "rewind/serve/api.h"
#include "rewind/serve/server.h"
#include "serve_test_util.h"
#include "rewind/speculate/batch_decoder.h"

using namespace rwd;
using namespace rwd::serve;
using json = nlohmann::json;

namespace {

const std::string kModel = std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf";

// The status and param of the ApiError parse_request throws for `body`.
std::pair<int, std::string> refusal(Endpoint ep, const std::string& body) {
    try {
        (void)parse_request(ep, body);
    } catch (const ApiError& e) {
        return {e.status, e.param};
    }
    return {0, "accepted"};
}

TEST(ServeParse, ChatRequestWithEveryField) {
    const ServeRequest r = parse_request(Endpoint::Chat, R"({
        "model": "m", "messages": [{"role": "developer", "content": "sys"},
                                   {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
        "max_completion_tokens": 7, "max_tokens": 99, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
        "seed": 42, "stop": ["x", "y"], "stream": true, "stream_options": {"include_usage": true}, "user": "u",
        "prediction": {"type": "content", "content": [{"type": "text", "text": "pred"}]},
        "speculation": {"source": "auto", "k": 4, "tree": 3, "references": ["doc"]}, "n": 1, "presence_penalty": 0, "tools": [],
        "chat_template_kwargs": {"enable_thinking": false}})");
    ASSERT_EQ(r.messages.size(), 2u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[1].content, "ab");
    EXPECT_EQ(*r.max_tokens, 7); // max_completion_tokens wins
    EXPECT_FLOAT_EQ(*r.temperature, 0.5f);
    EXPECT_EQ(*r.top_k, 40);
    EXPECT_EQ(*r.seed, 42u);
    EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "y"}));
    EXPECT_TRUE(r.stream && r.include_usage);
    EXPECT_EQ(*r.prediction, "pred");
    EXPECT_EQ(r.speculation.source, "auto");
    EXPECT_EQ(r.speculation.k, 4);
    EXPECT_EQ(r.speculation.tree, 3);
    EXPECT_FALSE(r.enable_thinking);
}

TEST(ServeParse, CompletionPromptAsTextOrIds) {
    EXPECT_EQ(parse_request(Endpoint::Completions, R"({"prompt": "hi"})").prompt_text, "hi");
    EXPECT_EQ(parse_request(Endpoint::Completions, R"({"prompt": ["hi"]})").prompt_text, "hi");
    const ServeRequest ids = parse_request(Endpoint::Completions, R"({"prompt": [1, 2, 3], "stop": "s"})");
    EXPECT_TRUE(ids.prompt_is_ids);
    EXPECT_EQ(ids.prompt_ids, (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(ids.stop, std::vector<std::string>{"s"});
    // Absent: the server's defaults (ServerOptions::sampling, OpenAI's unless given).
    EXPECT_FALSE(ids.temperature.has_value());
    EXPECT_FALSE(ids.max_tokens.has_value());
}

TEST(ServeParse, RefusesWhatItWouldHaveToIgnore) {
    for (const char* f : {R"("n": 17)", R"("tool_choice": "required")", R"("echo": true)", R"("best_of": 2)",
                          R"("suffix": "x")"}) {
        const auto [status, param] = refusal(Endpoint::Chat, std::string(R"({"messages": [{"role": "user", "content": "x"}], )") + f + "}");
        EXPECT_EQ(status, 400) << f;
        EXPECT_NE(param, "accepted") << f;
        EXPECT_NE(std::string(f).find(param), std::string::npos) << f << " named " << param;
    }
}

TEST(ServeParse, NamesTheFieldOfEveryMalformedRequest) {
    const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{" + msgs + R"(, "temperature": "hot"})", "temperature"},
        {"{" + msgs + R"(, "temperature": 3})", "temperature"},
        {"{" + msgs + R"(, "top_p": 0})", "top_p"},
        {"{" + msgs + R"(, "max_tokens": -1})", "max_tokens"},
        {"{" + msgs + R"(, "max_tokens": 1.5})", "max_tokens"},
        {"{" + msgs + R"(, "seed": "x"})", "seed"},
        {"{" + msgs + R"(, "stop": ["a", "b", "c", "d", "e"]})", "stop"},
        {"{" + msgs + R"(, "stop": [""]})", "stop"},
        {"{" + msgs + R"(, "stream": 1})", "stream"},
        {"{" + msgs + R"(, "stream_options": {"include_usage": true}})", "stream_options"},
        {"{" + msgs + R"(, "prediction": {"type": "content"}})", "prediction.content"},
        {"{" + msgs + R"(, "prediction": {"type": "other", "content": "x"}})", "prediction.type"},
        {"{" + msgs + R"(, "speculation": {"k": 99}})", "speculation.k"},
        {"{" + msgs + R"(, "speculation": {"tree": 0}})", "speculation.tree"},
        {"{" + msgs + R"(, "speculation": {"k": 0}})", "speculation.k"},
        {"{" + msgs + R"(, "speculation": {"source": "magic"}})", "speculation.source"},
        {"{" + msgs + R"(, "speculation": {"source": "ngram", "references": ["d"]}})", "speculation.references"},
        {"{" + msgs + R"(, "speculation": {"depth": 3}})", "speculation.depth"},
        {"{" + msgs + R"(, "chat_template_kwargs": {"other": 1}})", "chat_template_kwargs.other"},
        {R"({"messages": []})", "messages"},
        {R"({"messages": "hi"})", "messages"},
        {R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role"},
        {R"({"messages": [{"role": "tool"}]})", "messages[0].content"},
        {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
        {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0].type"},
        {R"({})", "messages"},
    };
    for (const auto& [body, param] : cases) {
        const auto [status, got] = refusal(Endpoint::Chat, body);
        EXPECT_EQ(status, 400) << body;
        EXPECT_EQ(got, param) << body;
    }
    EXPECT_EQ(refusal(Endpoint::Completions, R"({"prompt": 5})").second, "prompt");
    EXPECT_EQ(refusal(Endpoint::Completions, R"({"prompt": ""})").second, "prompt");
    EXPECT_EQ(refusal(Endpoint::Completions, R"({"prompt": [1, -2]})").second, "prompt[1]");
    EXPECT_EQ(refusal(Endpoint::Completions, R"({"prompt": ["a", "b"]})").second, "prompt");
    EXPECT_EQ(refusal(Endpoint::Completions, R"({"prompt)").first, 400);
    EXPECT_EQ(refusal(Endpoint::Completions, R"([1, 2])").first, 400);
}

// llama.cpp's repeat_penalty / repeat_last_n and the top_k / min_p extensions, read on both
// endpoints; out of range, a 400 naming the field.
TEST(ServeParse, SamplingFields) {
    const ServeRequest d = parse_request(Endpoint::Completions, R"({"prompt": "x"})");
    EXPECT_FALSE(d.repeat_penalty); // absent: the server's default (off unless --repeat-penalty)
    EXPECT_FALSE(d.repeat_last_n);
    const ServeRequest c = parse_request(Endpoint::Completions,
                                         R"({"prompt": "x", "repeat_penalty": 1.3, "repeat_last_n": 16, "top_k": 5, "min_p": 0.1})");
    EXPECT_FLOAT_EQ(*c.repeat_penalty, 1.3f);
    EXPECT_EQ(*c.repeat_last_n, 16);
    EXPECT_EQ(*c.top_k, 5);
    EXPECT_FLOAT_EQ(*c.min_p, 0.1f);
    const ServeRequest all = parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}], "repeat_last_n": -1})");
    EXPECT_EQ(*all.repeat_last_n, INT32_MAX); // -1: the whole sequence, as llama.cpp
    const std::string msgs = R"({"messages": [{"role": "user", "content": "x"}], )";
    for (const auto& [field, param] : std::vector<std::pair<std::string, std::string>>{
             {R"("repeat_penalty": 0)", "repeat_penalty"}, {R"("repeat_penalty": -1)", "repeat_penalty"},
             {R"("repeat_penalty": 11)", "repeat_penalty"}, {R"("repeat_penalty": "x")", "repeat_penalty"},
             {R"("repeat_last_n": -2)", "repeat_last_n"}, {R"("repeat_last_n": 1.5)", "repeat_last_n"},
             {R"("top_k": -1)", "top_k"}, {R"("top_k": 2.5)", "top_k"}, {R"("min_p": 1.5)", "min_p"},
             {R"("min_p": -0.1)", "min_p"}}) {
        EXPECT_EQ(refusal(Endpoint::Chat, msgs + field + "}"), std::make_pair(400, param)) << field;
        EXPECT_EQ(refusal(Endpoint::Completions, R"({"prompt": "x", )" + field + "}"), std::make_pair(400, param)) << field;
    }
}

TEST(ServeParse, LengthsAndKeys) {
    EXPECT_EQ(check_lengths(10, std::nullopt, 512), 502);
    EXPECT_EQ(check_lengths(10, 20, 512), 20);
    try {
        check_lengths(10, 600, 512);
        FAIL();
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status, 400);
        EXPECT_NE(std::string(e.what()).find("600"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("512"), std::string::npos);
    }
    EXPECT_THROW(check_lengths(512, std::nullopt, 512), ApiError);
    EXPECT_TRUE(constant_time_equal("secret", "secret"));
    EXPECT_FALSE(constant_time_equal("secret", "secreT"));
    EXPECT_FALSE(constant_time_equal("secret", "secret2"));
    EXPECT_FALSE(constant_time_equal("", "secret"));
    const json body = json::parse(error_body(ApiError(413, "too big")));
    EXPECT_EQ(body["error"]["message"], "too big");
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(body["error"]["param"].is_null());
    EXPECT_TRUE(body["error"].contains("code"));
}

// A finished request's cache, handed back by keep_caches, seeds a later request sharing its
// prefix: the prompt positions are copied, the tokens equal generate_plain's.
TEST(ServePrefixCache, BatchDecoderReusesAFinishedRequestsCache) {
    auto model = Model::load(kModel);
    Context ctx(model, ContextOptions{});
    const Tokenizer& tok = model->tokenizer();
    speculate::BatchDecoder dec(ctx, speculate::BatchOptions{.keep_caches = true});
    GenerateOptions g;
    g.max_tokens = 16;
    g.sampler.temperature = 0;
    const std::vector<TokenId> first = tok.encode("def add(a, b):\n    return a + b\n");
    speculate::BatchRequest fr;
    fr.prompt = first;
    fr.generate = g;
    dec.submit(std::move(fr));
    std::vector<speculate::BatchResult> done;
    while (done.empty()) done = dec.step();
    ASSERT_TRUE(done[0].cache);
    ASSERT_GE(done[0].cache_tokens.size(), first.size());

    std::vector<TokenId> second = done[0].cache_tokens;
    const std::vector<TokenId> more = tok.encode("\ndef sub(a, b):", AddBos::No);
    second.insert(second.end(), more.begin(), more.end());
    speculate::BatchRequest br;
    br.prompt = second;
    br.generate = g;
    br.prefix_cache = done[0].cache.get();
    br.prefix_tokens = done[0].cache_tokens;
    dec.submit(std::move(br));
    std::vector<speculate::BatchResult> again;
    while (again.empty()) again = dec.step();
    EXPECT_EQ(again[0].prompt_tokens_shared, static_cast<int64_t>(done[0].cache_tokens.size()));

    KvCache solo(*model, KvCacheOptions{.type = KvType::F16}); // the server's default
    Context ctx2(model, ContextOptions{});
    EXPECT_EQ(again[0].tokens, generate_plain(ctx2, solo, second, g).tokens);
}

// /health is 503 until the model is loaded, then 200; the other endpoints say why they wait.
TEST(ServeHealth, LoadingThenReady) {
    ServerOptions o;
    o.model_path = kModel;
    o.port = 0;
    Server server(o);
    server.bind();
    std::thread runner([&] { server.run(); });
    httplib::Client c("127.0.0.1", server.bound_port());
    auto loading = c.Get("/health");
    ASSERT_TRUE(loading);
    EXPECT_EQ(loading->status, 503);
    auto early = c.Post("/v1/completions", R"({"prompt": "x"})", "application/json");
    EXPECT_EQ(early->status, 503);
    EXPECT_EQ(json::parse(early->body)["error"]["code"], "model_not_ready");
    server.load();
    EXPECT_EQ(c.Get("/health")->status, 200);
    server.shutdown();
    runner.join();
}

// The server in this process on an ephemeral port, driven over loopback with httplib's client.
class ServeLoopback : public ::testing::Test {
protected:
    void SetUp() override { start([](ServerOptions&) {}); }
    template <class Tweak>
    void start(Tweak tweak) {
        if (server) TearDown();
        ServerOptions o;
        o.model_path = kModel;
        o.port = 0;
        o.api_key = std::string("k"); // (a one-char literal trips GCC 12's -Wrestrict false positive)
        o.chat_template = "chatml";
        o.max_body_bytes = 4096;
        o.parallel = 2;
        tweak(o);
        loop = std::make_unique<LoopbackServer>(o);
        server = &loop->server();
        client = &loop->client();
    }
    void TearDown() override {
        loop.reset();
        server = nullptr;
        client = nullptr;
    }
    httplib::Result post(const std::string& path, const std::string& body, bool key = true) {
        httplib::Headers h;
        if (key) h.emplace("Authorization", "Bearer k");
        return client->Post(path.c_str(), h, body, "application/json");
    }
    std::unique_ptr<LoopbackServer> loop;
    Server* server = nullptr;          // loop's
    httplib::Client* client = nullptr; // loop's
};

TEST_F(ServeLoopback, AnswersEqualGeneratePlainAndReuseThePrefix) {
    auto model = Model::load(kModel);
    Context ctx(model, ContextOptions{});
    const std::string prompt = "class Stack:\n    def __init__(self):\n";
    GenerateOptions g;
    g.max_tokens = 20;
    g.sampler.temperature = 0.7f;
    g.sampler.seed = 5;
    KvCache cache(*model, KvCacheOptions{.type = KvType::F16}); // the server's default
    const GenerateResult want = generate_plain(ctx, cache, model->tokenizer().encode(prompt), g);
    Utf8StreamDecoder dec(model->tokenizer(), false);
    std::string text;
    for (TokenId t : want.tokens) text += dec.push(t);
    text += dec.flush();

    const json req = {{"prompt", prompt}, {"max_tokens", 20}, {"temperature", 0.7}, {"seed", 5}};
    auto r1 = post("/v1/completions", req.dump());
    ASSERT_TRUE(r1);
    ASSERT_EQ(r1->status, 200) << r1->body;
    const json a = json::parse(r1->body);
    EXPECT_EQ(a["choices"][0]["text"], text);
    EXPECT_EQ(a["usage"]["completion_tokens"], want.tokens.size());
    // Again: the whole prompt but its last token comes from the prefix cache; the same answer.
    auto r2 = post("/v1/completions", req.dump());
    const json b = json::parse(r2->body);
    EXPECT_EQ(b["choices"][0]["text"], text);
    EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], a["usage"]["prompt_tokens"].get<int>() - 1);
}

// `rewind serve --temp T -s S` (ServerOptions::sampling): the defaults of requests that omit
// those fields, as in llama-server; a field the request gives wins.
TEST_F(ServeLoopback, SamplingDefaultsApplyToRequestsThatOmitTheField) {
    start([](ServerOptions& o) {
        o.sampling.temperature = 0.7f;
        o.sampling.seed = 5;
    });
    auto model = Model::load(kModel);
    Context ctx(model, ContextOptions{});
    const std::string prompt = "def add(a, b):\n";
    auto text_of = [&](float temperature, uint64_t seed) {
        GenerateOptions g;
        g.max_tokens = 16;
        g.sampler.temperature = temperature;
        g.sampler.seed = seed;
        KvCache cache(*model, KvCacheOptions{.type = KvType::F16}); // the server's default
        const GenerateResult r = generate_plain(ctx, cache, model->tokenizer().encode(prompt), g);
        Utf8StreamDecoder dec(model->tokenizer(), false);
        std::string text;
        for (TokenId t : r.tokens) text += dec.push(t);
        return text + dec.flush();
    };
    auto answer = [&](const json& req) {
        auto r = post("/v1/completions", req.dump());
        EXPECT_TRUE(r && r->status == 200);
        return r ? json::parse(r->body)["choices"][0]["text"].get<std::string>() : std::string();
    };
    EXPECT_EQ(answer({{"prompt", prompt}, {"max_tokens", 16}}), text_of(0.7f, 5));
    EXPECT_EQ(answer({{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}}), text_of(0.0f, 5));
    EXPECT_EQ(answer({{"prompt", prompt}, {"max_tokens", 16}, {"seed", 9}}), text_of(0.7f, 9));
}

TEST_F(ServeLoopback, LimitsAndErrors) {
    auto big = post("/v1/completions", json{{"prompt", std::string(8000, 'x')}}.dump());
    ASSERT_TRUE(big);
    EXPECT_EQ(big->status, 413);
    EXPECT_EQ(json::parse(big->body)["error"]["type"], "invalid_request_error");
    auto nokey = post("/v1/completions", R"({"prompt": "x"})", false);
    EXPECT_EQ(nokey->status, 401);
    EXPECT_EQ(json::parse(nokey->body)["error"]["type"], "authentication_error");
    auto bad = post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_k": "many"})");
    EXPECT_EQ(bad->status, 400);
    EXPECT_EQ(json::parse(bad->body)["error"]["param"], "top_k");
    std::string longer;
    for (int i = 0; i < 300; ++i) longer += "x = 1\n";
    auto too_long = post("/v1/completions", json{{"prompt", longer}}.dump());
    EXPECT_EQ(too_long->status, 400);
    const std::string msg = json::parse(too_long->body)["error"]["message"];
    EXPECT_NE(msg.find("512"), std::string::npos) << msg; // both lengths named
    EXPECT_EQ(json::parse(too_long->body)["error"]["code"], "context_length_exceeded");
    EXPECT_EQ(json::parse(too_long->body)["error"]["param"], "prompt");
    auto ids = post("/v1/completions", R"({"prompt": [1, 999999]})");
    EXPECT_EQ(ids->status, 400);
    auto health = client->Get("/health");
    EXPECT_EQ(health->status, 200);
    auto models = client->Get("/v1/models", httplib::Headers{{"Authorization", "Bearer k"}});
    EXPECT_EQ(models->status, 200);
    auto tok = post("/tokenize", R"({"content": "def f"})");
    ASSERT_EQ(tok->status, 200);
    auto detok = post("/detokenize", json{{"tokens", json::parse(tok->body)["tokens"]}}.dump());
    EXPECT_EQ(json::parse(detok->body)["content"], "def f");
    auto tmpl = post("/apply-template", R"({"messages": [{"role": "user", "content": "hi"}]})");
    EXPECT_EQ(json::parse(tmpl->body)["prompt"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    auto metrics = client->Get("/metrics", httplib::Headers{{"Authorization", "Bearer k"}});
    EXPECT_NE(metrics->body.find("rewind_http_requests_total{path=\"/v1/completions\",status=\"413\"} 1"), std::string::npos)
        << metrics->body;
}

TEST_F(ServeLoopback, QueueFullAndKvBudgetAre503) {
    start([](ServerOptions& o) { o.max_queue = 0; });
    auto full = post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
    EXPECT_EQ(full->status, 503);
    EXPECT_EQ(full->get_header_value("Retry-After"), "1");
    EXPECT_EQ(json::parse(full->body)["error"]["code"], "queue_full");
    start([](ServerOptions& o) { o.kv_budget_bytes = 1024; });
    auto kv = post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
    EXPECT_EQ(kv->status, 503);
    EXPECT_EQ(json::parse(kv->body)["error"]["code"], "kv_budget_exhausted");
}

// --replica-id names the replica on every response (answers, errors, /health) and in /metrics;
// an id that could break a header or a label is refused.
TEST_F(ServeLoopback, ReplicaIdOnEveryResponseAndInMetrics) {
    start([](ServerOptions& o) { o.replica_id = "r-2.a_b"; });
    auto ok = post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200);
    EXPECT_EQ(ok->get_header_value("X-Rewind-Replica"), "r-2.a_b");
    EXPECT_EQ(post("/v1/completions", R"({"prompt": "x"})", false)->get_header_value("X-Rewind-Replica"), "r-2.a_b");
    EXPECT_EQ(post("/nowhere", "{}")->get_header_value("X-Rewind-Replica"), "r-2.a_b");
    EXPECT_EQ(client->Get("/health")->get_header_value("X-Rewind-Replica"), "r-2.a_b");
    auto metrics = client->Get("/metrics", httplib::Headers{{"Authorization", "Bearer k"}});
    EXPECT_NE(metrics->body.find("\nrewind_replica_info{replica=\"r-2.a_b\"} 1\n"), std::string::npos) << metrics->body;
    for (const char* bad : {"a b", "a\"b", "x\r\nSet-Cookie: y"}) {
        ServerOptions o;
        o.model_path = kModel;
        o.replica_id = bad;
        EXPECT_THROW(Server{o}, Error) << bad;
    }
    ServerOptions o;
    o.replica_id = std::string(65, 'a');
    EXPECT_THROW(Server{o}, Error);
}

// A prefix cache with room for one finished request keeps the most recent one: the least
// recently used is evicted first.
TEST_F(ServeLoopback, PrefixCacheEvictsTheLeastRecentlyUsed) {
    auto model = Model::load(kModel);
    Context ctx(model, ContextOptions{});
    // An entry holds prompt + max_tokens positions: room for the larger one, not for both.
    const auto pa = static_cast<int64_t>(model->tokenizer().encode("import os\nimport sys\n").size());
    const auto pb = static_cast<int64_t>(model->tokenizer().encode("class Point:\n    pass\n").size());
    speculate::BatchOptions server_caches;
    server_caches.kv_type = ServerOptions{}.kv_type;
    speculate::BatchDecoder sizer(ctx, server_caches);
    const uint64_t budget = sizer.kv_bytes_for(std::max(pa, pb) + 4);
    ASSERT_LT(budget, sizer.kv_bytes_for(pa + 4) + sizer.kv_bytes_for(pb + 4));
    start([budget](ServerOptions& o) { o.cache_budget_bytes = budget; });
    const std::string a = R"({"prompt": "import os\nimport sys\n", "max_tokens": 4, "temperature": 0})";
    const std::string b = R"({"prompt": "class Point:\n    pass\n", "max_tokens": 4, "temperature": 0})";
    auto cached = [&](const std::string& body) {
        auto r = post("/v1/completions", body);
        EXPECT_EQ(r->status, 200) << r->body;
        const json j = json::parse(r->body);
        return std::pair<int, int>{j["usage"]["prompt_tokens_details"]["cached_tokens"], j["usage"]["prompt_tokens"]};
    };
    EXPECT_EQ(cached(a).first, 0);
    const auto [b_cached, b_prompt] = cached(b);
    EXPECT_LE(b_cached, 1); // at most the BOS they share
    EXPECT_LE(cached(a).first, 1) << "a was evicted when b was kept";
    const auto again = cached(a);
    EXPECT_EQ(again.first, again.second - 1) << "a is cached now";
    (void)b_prompt;
}

// Streaming over SSE: the chunks spell the non-streamed answer and end with [DONE]; a client that
// stops reading mid-stream has its request cancelled, and the server goes on.
TEST_F(ServeLoopback, StreamsAndCancelsAStreamWhoseClientLeft) {
    start([](ServerOptions& o) { o.throttle_ms = 2; }); // 500 tokens then take a second at least
    const json req = {{"prompt", "def add(a, b):"}, {"max_tokens", 40}, {"temperature", 0}};
    const json whole = json::parse(post("/v1/completions", req.dump())->body);
    auto stream = [&](int stop_after_chunks) {
        httplib::Request r;
        r.method = "POST";
        r.path = "/v1/completions";
        r.headers = {{"Authorization", "Bearer k"}, {"Content-Type", "application/json"}};
        json body = req;
        body["stream"] = true;
        if (stop_after_chunks > 0) body["max_tokens"] = 500;
        r.body = body.dump();
        std::string got;
        int chunks = 0;
        r.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
            got.append(d, n);
            return stop_after_chunks == 0 || ++chunks < stop_after_chunks;
        };
        httplib::Client c("127.0.0.1", server->bound_port());
        (void)c.send(r);
        return got;
    };
    const std::string sse = stream(0);
    std::string text;
    for (size_t at = 0; (at = sse.find("data: ", at)) != std::string::npos; at += 6) {
        const size_t end = sse.find("\n\n", at);
        const std::string data = sse.substr(at + 6, end - at - 6);
        if (data == "[DONE]") break;
        const json chunk = json::parse(data);
        if (!chunk["choices"].empty()) text += chunk["choices"][0]["text"].get<std::string>();
    }
    EXPECT_EQ(text, whole["choices"][0]["text"]);
    EXPECT_NE(sse.find("data: [DONE]\n\n"), std::string::npos);

    (void)stream(2); // reads two chunks of 500 tokens' worth, then hangs up
    auto metric = [&](const std::string& name) {
        const std::string m = client->Get("/metrics", httplib::Headers{{"Authorization", "Bearer k"}})->body;
        const size_t at = m.find("\n" + name + " ");
        return at == std::string::npos ? -1.0 : std::stod(m.substr(at + name.size() + 2));
    };
    for (int i = 0; i < 200 && metric("rewind_running_requests") != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(metric("rewind_running_requests"), 0);
    EXPECT_EQ(metric("rewind_kv_bytes_used"), 0);
    EXPECT_EQ(metric("rewind_requests_cancelled_total"), 1);
    EXPECT_EQ(json::parse(post("/v1/completions", req.dump())->body)["choices"][0]["text"], whole["choices"][0]["text"]);
}

// The sampling fields (repeat_penalty, repeat_last_n, top_k, min_p) on both endpoints, greedy and
// seeded: with speculation (n-gram, and n-gram with the answer itself as the prediction) each
// answer equals the same request's plain decoding, which equals generate_plain's.
TEST_F(ServeLoopback, SamplingFieldsAreExactUnderSpeculation) {
    auto model = Model::load(kModel);
    Context ctx(model, ContextOptions{});
    const std::string prompt = "def fib(n):\n    if n < 2:\n        return n\n";
    const std::vector<json> cases = {
        {{"temperature", 0}, {"repeat_penalty", 1.3}, {"repeat_last_n", 32}},
        {{"temperature", 0.8}, {"seed", 7}, {"top_k", 20}, {"min_p", 0.05}, {"repeat_penalty", 1.2}, {"repeat_last_n", -1}},
        {{"temperature", 1.0}, {"seed", 3}, {"top_k", 5}},
        {{"temperature", 0.7}, {"seed", 11}, {"min_p", 0.1}, {"repeat_penalty", 0.9}},
    };
    int64_t accepted = 0; // prediction tokens accepted, over every request with one
    auto answer = [&](json req, const std::string& path) {
        auto r = post(path, req.dump());
        EXPECT_EQ(r->status, 200) << r->body;
        const json j = json::parse(r->body);
        const json& c = j["choices"][0];
        accepted += j["usage"]["completion_tokens_details"]["accepted_prediction_tokens"].get<int64_t>();
        return std::pair<std::string, int>{path == "/v1/completions" ? c["text"] : c["message"]["content"],
                                           j["usage"]["completion_tokens"]};
    };
    for (const json& sampling : cases) {
        for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
            json req = sampling;
            req["max_tokens"] = 40;
            if (path == "/v1/completions") req["prompt"] = prompt;
            else req["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
            req["speculation"] = {{"source", "none"}};
            const auto plain = answer(req, path);
            req["speculation"] = {{"source", "ngram"}, {"k", 8}};
            EXPECT_EQ(answer(req, path), plain) << path << " " << sampling.dump();
            req["prediction"] = {{"type", "content"}, {"content", plain.first}};
            EXPECT_EQ(answer(req, path), plain) << path << " " << sampling.dump() << " with a prediction";
            if (path != "/v1/completions") continue;
            GenerateOptions g;
            g.max_tokens = 40;
            g.sampler.temperature = sampling["temperature"].get<float>();
            g.sampler.seed = sampling.value("seed", 0);
            g.sampler.top_k = sampling.value("top_k", 0);
            g.sampler.min_p = sampling.value("min_p", 0.0f);
            g.sampler.repeat_penalty = sampling.value("repeat_penalty", 1.0f);
            const int last_n = sampling.value("repeat_last_n", 64);
            g.sampler.repeat_last_n = last_n < 0 ? INT32_MAX : last_n;
            KvCache cache(*model, KvCacheOptions{.type = KvType::F16}); // the server's default
            const GenerateResult want = generate_plain(ctx, cache, model->tokenizer().encode(prompt), g);
            Utf8StreamDecoder dec(model->tokenizer(), false);
            std::string text;
            for (TokenId t : want.tokens) text += dec.push(t);
            text += dec.flush();
            EXPECT_EQ(plain, std::make_pair(text, static_cast<int>(want.tokens.size()))) << sampling.dump();
        }
    }
    EXPECT_GT(accepted, 0); // the predictions were verified, not ignored
    // The penalty is honoured, not ignored: greedy decoding of this prompt changes with it.
    const json greedy = {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}};
    json penalised = greedy;
    penalised["repeat_penalty"] = 1.3;
    EXPECT_NE(answer(greedy, "/v1/completions").first, answer(penalised, "/v1/completions").first);
}

// Every source a request can name, with and without documents and a prediction, gives the answer
// of plain decoding; "draft" on a server without --draft is refused before anything runs.
TEST_F(ServeLoopback, EverySourceGivesThePlainAnswer) {
    const std::string prompt = "import os\nimport sys\n\ndef main():\n";
    const json base = {{"prompt", prompt}, {"max_tokens", 32}, {"temperature", 0.6}, {"seed", 9}, {"repeat_penalty", 1.1}};
    auto text = [&](const json& req) {
        auto r = post("/v1/completions", req.dump());
        EXPECT_EQ(r->status, 200) << req.dump() << " " << r->body;
        return json::parse(r->body)["choices"][0]["text"].get<std::string>();
    };
    json off = base;
    off["speculation"] = {{"source", "none"}};
    const std::string plain = text(off);
    const json doc = json::array({prompt + "    print(os.getcwd())\n    sys.exit(0)\n"});
    for (const json& spec : {json{{"source", "ngram"}}, json{{"source", "suffix"}, {"tree", 3}}, json{{"source", "auto"}},
                             json{{"source", "auto"}, {"references", doc}}, json{{"source", "ref"}, {"references", doc}},
                             json{{"references", doc}}, json{{"source", "none"}, {"k", 3}}}) {
        json req = base;
        req["speculation"] = spec;
        EXPECT_EQ(text(req), plain) << spec.dump();
        req["prediction"] = {{"type", "content"}, {"content", plain}};
        EXPECT_EQ(text(req), plain) << spec.dump() << " with a prediction";
    }
    json draft = base;
    draft["speculation"] = {{"source", "draft"}};
    auto refused = post("/v1/completions", draft.dump());
    EXPECT_EQ(refused->status, 400);
    EXPECT_EQ(json::parse(refused->body)["error"]["param"], "speculation.source");
}

} // namespace
