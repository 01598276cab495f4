// rewind serve with tools: tools, tool_choice, parallel_tool_calls and tool-call messages parsed
// and refused by field; the streamed split of an answer into content and calls reassembling to the
// whole answer's at every cut; and over loopback, a second turn carrying a tool result rendered
// as Qwen2.5's template renders it (the golden), streamed and whole answers equal.
#include <gtest/gtest.h>

#include "fixtures.h"

#include <httplib.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tool_stream.h"
#include "rewind/serve/api.h"
#include "rewind/serve/server.h"
#include "serve_test_util.h"

using namespace rwd;
using namespace rwd::serve;
using json = nlohmann::ordered_json;

namespace {

const std::string kModel = std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf";
const std::string kMsgs = R"("messages": [{"role": "user", "content": "x"}])";
const std::string kTools =
    R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}}])";

std::pair<int, std::string> refusal(Endpoint ep, const std::string& body) {
    try {
        (void)parse_request(ep, body);
    } catch (const ApiError& e) {
        return {e.status, e.param};
    }
    return {0, "accepted"};
}

TEST(ServeToolsParse, ToolsChoiceAndToolMessages) {
    const ServeRequest r = parse_request(Endpoint::Chat, R"({"messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": 2}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "3"}], )" + kTools +
                                                             R"(, "tool_choice": "none", "parallel_tool_calls": false})");
    // Key order as sent: the template's tojson renders it.
    EXPECT_NE(r.tools.find(R"("properties":{"z":{},"a":{}})"), std::string::npos) << r.tools;
    EXPECT_EQ(r.tool_choice, ToolChoice::None);
    EXPECT_FALSE(r.parallel_tool_calls);
    ASSERT_EQ(r.messages.size(), 3u);
    ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
    EXPECT_EQ(r.messages[1].tool_calls[0].name, "f");
    EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"z": 1, "a": 2})");
    EXPECT_EQ(r.messages[1].content, "");
    EXPECT_EQ(r.messages[2].role, "tool");
    EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
    // Arguments as an object (the Hugging Face convention) are taken too; an empty list is no tools.
    const ServeRequest o = parse_request(Endpoint::Chat, R"({"messages": [{"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": 2}}}]}], "tools": [], "tool_choice": "auto"})");
    EXPECT_EQ(o.messages[0].tool_calls[0].arguments, R"({"b":1,"a":2})");
    EXPECT_TRUE(o.tools.empty());
    EXPECT_EQ(o.tool_choice, ToolChoice::Auto);
}

TEST(ServeToolsParse, RefusalsNameTheField) {
    const std::string call = R"({"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": )";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{" + kMsgs + R"(, "tool_choice": "required"})", "tool_choice"},
        {"{" + kMsgs + ", " + kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}}})",
         "tool_choice.function.name"},
        {"{" + kMsgs + ", " + kTools + R"(, "tool_choice": {"type": "function"}})", "tool_choice.function"},
        {"{" + kMsgs + ", " + kTools + R"(, "tool_choice": "sometimes"})", "tool_choice"},
        {"{" + kMsgs + R"(, "tools": {"type": "function"}})", "tools"},
        {"{" + kMsgs + R"(, "tools": [{"type": "retrieval"}]})", "tools[0].type"},
        {"{" + kMsgs + R"(, "tools": [{"type": "function", "function": {"description": "d"}}]})", "tools[0].function.name"},
        {"{" + kMsgs + R"(, "parallel_tool_calls": "yes"})", "parallel_tool_calls"},
        {R"({"messages": [)" + call + R"("{\"a\": "}}]}]})", "messages[0].tool_calls[0].function.arguments"},
        {R"({"messages": [)" + call + R"("[1]"}}]}]})", "messages[0].tool_calls[0].function.arguments"},
        {R"({"messages": [)" + call + R"(null}}]}]})", "messages[0].tool_calls[0].function.arguments"},
        {R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", "messages[0].tool_calls"},
        {R"({"messages": [{"role": "tool", "content": "x", "tool_call_id": 5}]})", "messages[0].tool_call_id"},
        {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}]})",
         "messages[0].tool_calls[0].function.name"},
    };
    for (const auto& [body, param] : cases) {
        const auto [status, got] = refusal(Endpoint::Chat, body);
        EXPECT_EQ(status, 400) << body;
        EXPECT_EQ(got, param) << body;
    }
    EXPECT_EQ(refusal(Endpoint::Completions, R"({"prompt": "x", )" + kTools + "}").second, "tools");
}

// Every cut of an answer into three pieces streams to the whole answer's content and calls.
void expect_stream_equals_whole(const std::string& answer, bool parallel) {
    const ChatFormat f = parse_chat_format_name("qwen2.5");
    const ParsedToolCalls whole = split_tool_calls(f, answer, "call_", parallel);
    for (size_t a = 0; a <= answer.size(); ++a) {
        for (size_t b = a; b <= answer.size(); b += 3) {
            ToolCallStream s(f, "call_", parallel);
            std::string content = s.push(answer.substr(0, a));
            content += s.push(answer.substr(a, b - a));
            content += s.push(answer.substr(b));
            const ParsedToolCalls end = s.finish();
            content += end.content;
            ASSERT_EQ(content, whole.content) << "cut at " << a << ", " << b;
            ASSERT_EQ(end.calls.size(), whole.calls.size());
            for (size_t i = 0; i < whole.calls.size(); ++i) {
                EXPECT_EQ(end.calls[i].id, whole.calls[i].id);
                EXPECT_EQ(end.calls[i].name, whole.calls[i].name);
                EXPECT_EQ(end.calls[i].arguments, whole.calls[i].arguments);
            }
        }
    }
}

TEST(ServeToolStream, ChunksReassembleToTheWholeAnswer) {
    const std::string two = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n"
                            "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
    expect_stream_equals_whole("Let me look. \n" + two, true);
    expect_stream_equals_whole(two, true);
    expect_stream_equals_whole("Sure.\n" + two, false); // one call kept
    expect_stream_equals_whole("a <tool and <tool_call> not closed", true);
    expect_stream_equals_whole("plain text < with \n trailing space \n", true);
    const ParsedToolCalls one = split_tool_calls(parse_chat_format_name("qwen3"), two, "call_7_", false);
    ASSERT_EQ(one.calls.size(), 1u);
    EXPECT_EQ(one.calls[0].id, "call_7_0");
}

// The server in this process with Qwen2.5's format, over loopback.
class ServeToolsLoopback : public ::testing::Test {
protected:
    void SetUp() override { start("qwen2.5"); }
    void start(const std::string& chat_template) {
        if (server) TearDown();
        ServerOptions o;
        o.model_path = kModel;
        o.port = 0;
        o.chat_template = chat_template;
        o.parallel = 2;
        loop = std::make_unique<LoopbackServer>(o);
        server = &loop->server();
        client = &loop->client();
    }
    void TearDown() override {
        loop.reset();
        server = nullptr;
        client = nullptr;
    }
    httplib::Result post(const std::string& path, const std::string& body) {
        return client->Post(path.c_str(), body, "application/json");
    }
    std::unique_ptr<LoopbackServer> loop;
    Server* server = nullptr;          // loop's
    httplib::Client* client = nullptr; // loop's
};

// Qwen2.5's tool goldens, their arguments turned into OpenAI's JSON strings, rendered by the server.
TEST_F(ServeToolsLoopback, ToolTurnsRenderAsTheGoldens) {
    REWIND_NEED_FIXTURE(std::string(REWIND_SHARED_DIR) + "/chat/tool_goldens.jsonl");
    std::ifstream f(std::string(REWIND_SHARED_DIR) + "/chat/tool_goldens.jsonl");
    ASSERT_TRUE(f);
    size_t compared = 0;
    for (std::string line; std::getline(f, line);) {
        const json g = json::parse(line);
        if (g["template"] != "qwen2_5" || !g["add_generation_prompt"].get<bool>()) continue;
        json req = {{"messages", g["messages"]}, {"tools", g["tools"]}};
        for (json& m : req["messages"])
            if (m.contains("tool_calls"))
                for (json& c : m["tool_calls"]) c["function"]["arguments"] = c["function"]["arguments"].dump();
        auto r = post("/apply-template", req.dump());
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        EXPECT_EQ(json::parse(r->body)["prompt"], g["text"]);
        ++compared;
    }
    EXPECT_EQ(compared, 5u);
}

TEST_F(ServeToolsLoopback, StreamedAnswerEqualsTheWholeOne) {
    const json req = {{"messages", {{{"role", "user"}, {"content", "def f(x):"}}}},
                      {"tools", json::parse("{" + kTools + "}")["tools"]},
                      {"max_tokens", 24},
                      {"seed", 3}};
    auto whole = post("/v1/chat/completions", req.dump());
    ASSERT_TRUE(whole);
    ASSERT_EQ(whole->status, 200) << whole->body;
    const json w = json::parse(whole->body)["choices"][0];
    json s = req;
    s["stream"] = true;
    auto streamed = post("/v1/chat/completions", s.dump());
    ASSERT_TRUE(streamed);
    std::string content;
    json calls = json::array();
    std::string finish;
    for (size_t pos = 0; (pos = streamed->body.find("data: {", pos)) != std::string::npos;) {
        const size_t end = streamed->body.find("\n\n", pos);
        const json chunk = json::parse(streamed->body.substr(pos + 6, end - pos - 6));
        pos = end;
        const json& c = chunk["choices"][0];
        if (c["delta"].contains("content")) content += c["delta"]["content"].get<std::string>();
        if (c["delta"].contains("tool_calls"))
            for (json call : c["delta"]["tool_calls"]) {
                call.erase("index");
                calls.push_back(call);
            }
        if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
    EXPECT_EQ(content, w["message"]["content"].is_null() ? "" : w["message"]["content"].get<std::string>());
    EXPECT_EQ(calls, w["message"].value("tool_calls", json::array()));
    EXPECT_EQ(finish, w["finish_reason"]);
}

TEST_F(ServeToolsLoopback, RefusedByFormatsWithoutTools) {
    // tool_choice required: the grammar opens a call of the one tool at once (whole or cut by length).
    auto required = post("/v1/chat/completions", "{" + kMsgs + ", " + kTools + R"(, "tool_choice": "required", "max_tokens": 40})");
    ASSERT_EQ(required->status, 200) << required->body;
    const json m = json::parse(required->body)["choices"][0]["message"];
    const std::string text = m["content"].is_null() ? std::string() : m["content"].get<std::string>();
    EXPECT_TRUE(m.contains("tool_calls") || text.rfind("<tool_call>\n{\"name\": \"f\", \"arguments\": {", 0) == 0) << text;
    start("chatml");
    auto r = post("/v1/chat/completions", "{" + kMsgs + ", " + kTools + "}");
    EXPECT_EQ(r->status, 400);
    EXPECT_EQ(json::parse(r->body)["error"]["param"], "tools");
    EXPECT_NE(r->body.find("'chatml'"), std::string::npos) << r->body;
}

} // namespace
