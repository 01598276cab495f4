// Tools in the chat formats: the 18 tool renderings of Qwen2.5's and Qwen3's templates byte for
// byte, refusals by formats without tool support, the Python-style `tojson` details, and reading
// the model's <tool_call> blocks back into calls.
#include <gtest/gtest.h>

#include "fixtures.h"

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf_test_util.h"
#include "rewind/chat.h"
#include "rewind/chat_tools.h"
#include "rewind/error.h"

using namespace rwd;
using ojson = nlohmann::ordered_json;

namespace {

const std::string kChat = std::string(REWIND_SHARED_DIR) + "/chat";

// A golden message as a JSON caller builds it: tool calls keep their arguments' JSON text.
ChatMessage from_json(const ojson& m) {
    ChatMessage out;
    out.role = m.at("role").get<std::string>();
    if (m.contains("content") && m["content"].is_string()) out.content = m["content"].get<std::string>();
    if (m.contains("tool_call_id")) out.tool_call_id = m["tool_call_id"].get<std::string>();
    for (const ojson& c : m.value("tool_calls", ojson::array())) {
        const ojson& fn = c.at("function");
        out.tool_calls.push_back({c.value("id", ""), fn.at("name").get<std::string>(), fn.at("arguments").dump()});
    }
    return out;
}

Error error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e;
    }
    ADD_FAILURE() << "no rwd::Error thrown";
    return Error("none");
}

std::vector<ChatMessage> weather_turns() {
    std::vector<ChatMessage> msgs(3);
    msgs[0] = {.role = "user", .content = "Weather in Oslo?"};
    msgs[1] = {.role = "assistant", .content = ""};
    msgs[1].tool_calls.push_back({"call_0", "get_weather", R"({"city": "Oslo"})"});
    msgs[2] = {.role = "tool", .content = "{\"temp\": -3}"};
    msgs[2].tool_call_id = "call_0";
    return msgs;
}

const char* kTool = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])";

TEST(ChatTools, GoldensByteForByte) {
    REWIND_NEED_FIXTURE(kChat + "/tool_goldens.jsonl");
    std::ifstream f(kChat + "/tool_goldens.jsonl");
    ASSERT_TRUE(f) << "cannot open tool_goldens.jsonl";
    size_t compared = 0;
    for (std::string line; std::getline(f, line);) {
        if (line.empty()) continue;
        const ojson r = ojson::parse(line);
        const std::string name = r.at("template").get<std::string>();
        SCOPED_TRACE("tool_goldens.jsonl record " + std::to_string(compared) + " (" + name + ")");
        const ChatFormat format = detect_chat_format(gguf_test::read_file(kChat + "/templates/" + name + ".jinja"));
        EXPECT_TRUE(format.qwen_tools);
        ChatOptions o;
        o.add_generation_prompt = r.at("add_generation_prompt").get<bool>();
        o.bos_token = r.value("bos_token", "");
        o.eos_token = r.value("eos_token", "");
        o.tools = r.at("tools").dump();
        const ojson kwargs = r.value("kwargs", ojson::object());
        if (kwargs.contains("enable_thinking")) o.enable_thinking = kwargs["enable_thinking"].get<bool>();
        std::vector<ChatMessage> msgs;
        for (const ojson& m : r.at("messages")) msgs.push_back(from_json(m));
        EXPECT_EQ(format_chat(format, msgs, o), r.at("text").get<std::string>());
        ++compared;
    }
    EXPECT_EQ(compared, 18u);
}

TEST(ChatTools, FormatsWithoutToolsRefuseNamingTheFormat) {
    for (const char* name : {"llama3", "llama3.1", "chatml", "qwen2", "phi3", "gemma"}) {
        SCOPED_TRACE(name);
        const ChatFormat f = parse_chat_format_name(name);
        EXPECT_FALSE(f.qwen_tools);
        ChatOptions o;
        o.tools = kTool;
        const std::vector<ChatMessage> hi = {{.role = "user", .content = "hi"}};
        const Error e = error_of([&] { format_chat(f, hi, o); });
        EXPECT_EQ(e.code(), ErrorCode::unsupported);
        EXPECT_NE(std::string(e.what()).find(std::string("'") + name + "' has no tool support"), std::string::npos)
            << e.what();
        const Error t = error_of([&] { format_chat(f, weather_turns()); });
        EXPECT_EQ(t.code(), ErrorCode::unsupported);
        EXPECT_NE(std::string(t.what()).find("chat message 1 ('assistant') holds tool_calls"), std::string::npos)
            << t.what();
        // An empty list is no tools: the template's `if tools` is false for it.
        o.tools = "[]";
        EXPECT_NO_THROW(format_chat(f, hi, o));
    }
}

TEST(ChatTools, BadToolsAndArgumentsAreArgumentErrors) {
    const ChatFormat f = parse_chat_format_name("qwen2.5");
    const std::vector<ChatMessage> hi = {{.role = "user", .content = "hi"}};
    for (const char* tools : {"{", R"({"type": "function"})", "[1]"}) {
        ChatOptions o;
        o.tools = tools;
        EXPECT_EQ(error_of([&] { format_chat(f, hi, o); }).code(), ErrorCode::argument) << tools;
    }
    std::vector<ChatMessage> msgs = weather_turns();
    msgs[1].tool_calls[0].arguments = "{\"city\": ";
    const Error e = error_of([&] { format_chat(f, msgs); });
    EXPECT_EQ(e.code(), ErrorCode::argument);
    EXPECT_NE(std::string(e.what()).find("chat message 1 ('assistant') tool call 0"), std::string::npos) << e.what();
    msgs = weather_turns();
    msgs[0].tool_calls = msgs[1].tool_calls;
    EXPECT_EQ(error_of([&] { format_chat(f, msgs); }).code(), ErrorCode::argument);
}

TEST(ChatTools, TojsonIsPythonJsonDumps) {
    const ChatFormat q25 = parse_chat_format_name("qwen2.5"), q3 = parse_chat_format_name("qwen3");
    std::vector<ChatMessage> msgs = weather_turns();
    // Key order as given, ", " and ": ", non-ASCII kept, control characters escaped, numbers as written.
    msgs[1].tool_calls[0].arguments = R"({"z": "Zürich\n\u0001\"", "a": [1, 2.5, true, null], "e": {}})";
    const std::string want = R"({"z": "Zürich\n\u0001\"", "a": [1, 2.5, true, null], "e": {}})";
    EXPECT_NE(format_chat(q25, msgs).find("\"arguments\": " + want + "}\n</tool_call>"), std::string::npos);
    // An argument string: Qwen2.5 quotes it (tojson), Qwen3 writes it as is.
    msgs[1].tool_calls[0].arguments = R"("{\"city\": \"Oslo\"}")";
    EXPECT_NE(format_chat(q25, msgs).find(R"("arguments": "{\"city\": \"Oslo\"}"})"), std::string::npos);
    EXPECT_NE(format_chat(q3, msgs).find(R"("arguments": {"city": "Oslo"}})"), std::string::npos);
}

TEST(ChatToolParse, QwenBlocksIntoCalls) {
    const ChatFormat f = parse_chat_format_name("qwen2.5");
    const ParsedToolCalls p = parse_tool_calls(
        f,
        "Sure.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"b\": 2, \"a\": \"\u00e9\"}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n",
        "call_x");
    EXPECT_EQ(p.content, "Sure.");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].id, "call_x0");
    EXPECT_EQ(p.calls[0].name, "add");
    EXPECT_EQ(p.calls[0].arguments, "{\"b\":2,\"a\":\"\u00e9\"}"); // compact, key order kept, UTF-8 as is
    EXPECT_EQ(p.calls[1].id, "call_x1");
    EXPECT_EQ(p.calls[1].arguments, "{}");
    // Calls alone: no content.
    EXPECT_EQ(parse_tool_calls(f, "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>", "c").content, "");
    // What the calls render back to is what the model wrote (the next turn's prompt).
    std::vector<ChatMessage> msgs = {{.role = "user", .content = "q"}, {.role = "assistant", .content = p.content}};
    msgs[1].tool_calls = p.calls;
    EXPECT_NE(format_chat(f, msgs).find("Sure.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"b\": 2, \"a\": "
                                        "\"\u00e9\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\""),
              std::string::npos);
}

TEST(ChatToolParse, AnythingElseStaysText) {
    const ChatFormat f = parse_chat_format_name("qwen3");
    for (const char* text : {
             "no calls here",
             "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}",              // cut short
             "<tool_call>{\"name\": \"a\", \"arguments\": {}</tool_call>",      // not JSON
             "<tool_call>{\"name\": \"a\", \"arguments\": \"{}\"}</tool_call>", // arguments not an object
             "<tool_call>{\"arguments\": {}}</tool_call>",                      // no name
             "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> and then text",
         }) {
        const ParsedToolCalls p = parse_tool_calls(f, text, "c");
        EXPECT_TRUE(p.calls.empty()) << text;
        EXPECT_EQ(p.content, text);
    }
    // A format without tool support reads no calls.
    const std::string call = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>";
    EXPECT_TRUE(parse_tool_calls(parse_chat_format_name("llama3"), call, "c").calls.empty());
    EXPECT_EQ(parse_tool_calls(f, call, "c").calls.size(), 1u);
}

TEST(ChatToolParse, OpenTagSuffix) {
    EXPECT_EQ(tool_call_open_suffix("hello"), 0u);
    EXPECT_EQ(tool_call_open_suffix("hello <"), 1u);
    EXPECT_EQ(tool_call_open_suffix("a <tool_"), 6u);
    EXPECT_EQ(tool_call_open_suffix("<tool_call"), 10u);
    EXPECT_EQ(tool_call_open_suffix("<tool_call>"), 0u); // complete: no longer a prefix
    EXPECT_EQ(tool_call_open_suffix(""), 0u);
}

} // namespace
