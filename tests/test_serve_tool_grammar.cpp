// The grammar of forced tool calls (tool_choice required / named): rule names renamed apart
// without touching literals, classes or counts; the language is Qwen's <tool_call> blocks whose
// arguments are instances of the function's parameters, one call or (parallel) several.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "rewind/grammar/gbnf.h"
#include "rewind/grammar/matcher.h"
#include "rewind/serve/api.h"
#include "tool_grammar.h"

using namespace rwd;
using namespace rwd::serve;

namespace {

bool matches(const std::string& gbnf, const std::string& text) {
    grammar::Matcher m(std::make_shared<const grammar::CompiledGrammar>(grammar::parse_gbnf(gbnf)));
    return m.accept_bytes(text) && m.is_complete();
}

const std::string kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "additionalProperties": false,
    "required": ["city"], "properties": {"city": {"type": "string", "maxLength": 5}, "days": {"type": "integer", "minimum": 1}}}}},
  {"type": "function", "function": {"name": "now"}}])";

} // namespace

TEST(ServeToolGrammar, PrefixesRuleNamesOnly) {
    EXPECT_EQ(prefix_gbnf_rules(R"(root ::= a-b "root x" [a-z]{1,3} # root
a-b ::= "\"q\"" [\]root])", "p-"),
              R"(p-root ::= p-a-b "root x" [a-z]{1,3} # root
p-a-b ::= "\"q\"" [\]root])");
}

TEST(ServeToolGrammar, ForcesCallsWithValidArguments) {
    const std::string one = tool_call_gbnf(kTools, "", false);
    const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\",\"days\":2}}\n</tool_call>";
    const std::string other = "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"x\":[1]}}\n</tool_call>";
    EXPECT_TRUE(matches(one, call));
    EXPECT_TRUE(matches(one, other)); // no parameters: any object
    EXPECT_FALSE(matches(one, call + "\n" + other)); // one call only
    EXPECT_FALSE(matches(one, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\":2}}\n</tool_call>")); // city required
    EXPECT_FALSE(matches(one, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Bergen\"}}\n</tool_call>"));
    EXPECT_FALSE(matches(one, "hello " + call));
    const std::string many = tool_call_gbnf(kTools, "", true);
    EXPECT_TRUE(matches(many, call + "\n" + other + "\n" + call));
    const std::string named = tool_call_gbnf(kTools, "now", false);
    EXPECT_TRUE(matches(named, other));
    EXPECT_FALSE(matches(named, call));
}

TEST(ServeToolGrammar, RefusesUnknownFunctionsAndUnsupportedKeywords) {
    try {
        tool_call_gbnf(kTools, "nope", false);
        FAIL();
    } catch (const ApiError& e) {
        EXPECT_EQ(e.param, "tool_choice");
    }
    try {
        tool_call_gbnf(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "string", "format": "uri-template"}}}])", "",
                       false);
        FAIL();
    } catch (const ApiError& e) {
        EXPECT_EQ(e.param, "tools[0].function.parameters");
    }
}
