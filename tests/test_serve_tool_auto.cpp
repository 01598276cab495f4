// tool_choice "auto" over loopback on a make-dummy model with Qwen2.5's vocabulary and template:
// a logit bias on the <tool_call> token makes the random model open calls; every call it opens
// is held to the tools' schemas (the answer is text or calls whose arguments are valid), at most
// one with parallel_tool_calls false, and speculation (ngram, suffix) answers as plain decoding.
#include <gtest/gtest.h>

#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "fixtures.h"
#include "rewind/dummy_model.h"
#include "rewind/serve/server.h"
#include "serve_test_util.h"

using namespace rwd;
using namespace rwd::serve;
using json = nlohmann::ordered_json;

namespace {

const std::string kVocab = std::string(REWIND_SHARED_DIR) + "/vocab/ggml-vocab-qwen2.gguf";
const std::string kTemplate = std::string(REWIND_SHARED_DIR) + "/chat/templates/qwen2_5.jinja";
constexpr int kOpenTag = 151657; // <tool_call> in Qwen2.5's vocabulary

// Bounded arguments, so that the random model's calls close within the answer.
const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "additionalProperties": false,
    "required": ["city", "days"], "properties": {"city": {"type": "string", "maxLength": 12},
    "days": {"type": "integer", "minimum": 1, "maximum": 7}}}}},
  {"type": "function", "function": {"name": "set_mode", "parameters": {"type": "object", "additionalProperties": false,
    "required": ["mode"], "properties": {"mode": {"enum": ["fast", "slow"]}}}}}])");

size_t characters(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

// The tools' schemas, checked by hand: exactly the required keys, each within its bounds.
bool valid_call(const json& name, const json& args) {
    if (!args.is_object()) return false;
    if (name == "get_weather") {
        const auto city = args.find("city"), days = args.find("days");
        return args.size() == 2 && city != args.end() && city->is_string() &&
               characters(city->get<std::string>()) <= 12 && days != args.end() &&
               days->is_number_integer() && *days >= 1 && *days <= 7;
    }
    if (name == "set_mode") return args.size() == 1 && args.contains("mode") && (args["mode"] == "fast" || args["mode"] == "slow");
    return false;
}

std::string model_path() {
    const std::string path = std::string(REWIND_BINARY_DIR) + "/test-models/dummy-qwen25-tiny-q8_0.gguf";
    if (!std::filesystem::exists(path)) {
        std::filesystem::create_directories(std::filesystem::path(path).parent_path());
        std::ifstream t(kTemplate);
        DummyOptions o;
        o.shape = "tiny";
        o.file_type = "q8_0";
        o.vocab_path = kVocab;
        o.chat_template.assign(std::istreambuf_iterator<char>(t), {});
        o.seed = 1;
        o.threads = 2;
        o.out_path = path; // written to a temporary file and renamed: test binaries may race here
        write_dummy_model(o);
    }
    return path;
}

class ServeToolAuto : public ::testing::Test {
protected:
    void SetUp() override {
        REWIND_NEED_FIXTURE(kVocab);
        REWIND_NEED_FIXTURE(kTemplate);
        ServerOptions o;
        o.model_path = model_path();
        o.port = 0;
        o.parallel = 3;
        loop_ = std::make_unique<LoopbackServer>(o);
    }
    // The request's answer with speculation off, ngram and suffix, asked at once (a client each).
    std::vector<json> ask(const json& req) {
        std::vector<std::future<std::pair<int, std::string>>> answers;
        for (const char* source : {"none", "ngram", "suffix"}) {
            json body = req;
            body["speculation"] = {{"source", source}};
            answers.push_back(std::async(std::launch::async, [this, b = body.dump()] {
                httplib::Client c("127.0.0.1", loop_->server().bound_port());
                c.set_read_timeout(60, 0);
                auto r = c.Post("/v1/chat/completions", b, "application/json");
                return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
            }));
        }
        std::vector<json> out;
        for (auto& a : answers) {
            const auto [status, body] = a.get();
            EXPECT_EQ(status, 200) << body;
            out.push_back(status == 200 ? json::parse(body)["choices"][0] : json::object());
        }
        return out;
    }
    std::unique_ptr<LoopbackServer> loop_;
};

// The calls of an answer, without their ids (they number the response).
json calls_of(const json& choice) {
    json calls = json::array();
    for (json c : choice["message"].value("tool_calls", json::array())) {
        c.erase("id");
        calls.push_back(c);
    }
    return calls;
}

TEST_F(ServeToolAuto, CallsAreValidAndSpeculationChangesNothing) {
    int opened = 0;
    for (const int seed : {1, 2, 3}) {
        for (const bool parallel : {true, false}) {
            const json req = {{"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
                              {"tools", kTools},
                              {"tool_choice", "auto"},
                              {"parallel_tool_calls", parallel},
                              {"max_tokens", 80},
                              {"temperature", 1},
                              {"seed", seed},
                              {"logit_bias", {{std::to_string(kOpenTag), 10}}}};
            const std::string where = "seed " + std::to_string(seed) + (parallel ? " parallel" : " one call");
            const std::vector<json> answers = ask(req);
            const json& plain = answers[0];
            for (size_t i = 1; i < answers.size(); ++i) {
                const json& spec = answers[i];
                EXPECT_EQ(spec["message"]["content"], plain["message"]["content"]) << where << " source " << i;
                EXPECT_EQ(calls_of(spec), calls_of(plain)) << where << " source " << i;
                EXPECT_EQ(spec["finish_reason"], plain["finish_reason"]) << where << " source " << i;
            }
            const json calls = calls_of(plain);
            if (plain["finish_reason"] == "tool_calls") {
                EXPECT_TRUE(parallel || calls.size() == 1) << where;
                for (const json& c : calls)
                    EXPECT_TRUE(valid_call(c["function"]["name"], json::parse(c["function"]["arguments"].get<std::string>())))
                        << where << ": " << c.dump();
                opened += static_cast<int>(calls.size());
                continue;
            }
            // Text: each call closed in it is valid all the same.
            const std::string text = plain["message"]["content"].is_string() ? plain["message"]["content"].get<std::string>() : "";
            for (size_t at = 0; (at = text.find("<tool_call>\n", at)) != std::string::npos;) {
                const size_t end = text.find("\n</tool_call>", at);
                if (end == std::string::npos) break;
                const json call = json::parse(text.substr(at + 12, end - at - 12));
                EXPECT_TRUE(valid_call(call["name"], call["arguments"])) << where << ": " << call.dump();
                ++opened;
                at = end;
            }
        }
    }
    EXPECT_GT(opened, 0) << "no call was opened: the test proves nothing";
}

} // namespace
