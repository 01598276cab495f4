// The grammar of tool calls: Qwen's <tool_call> blocks as its template writes them, each one's
// arguments an instance of its function's `parameters` schema; the whole answer under
// tool_choice "required" or a named function, each call from its opening tag on under "auto".
#pragma once
#include <string>
#include <string_view>

namespace rwd::serve {

// GBNF (start rule root) of one call, or with `parallel` one or more separated by a new line, of
// the functions in `tools` (OpenAI's list, as JSON text): each block is
//   <tool_call>\n{"name": "<fn>", "arguments": <an instance of fn's parameters>}\n</tool_call>
// `only` non-empty: that function alone. A function without parameters takes any JSON object.
// Throws ApiError (400, naming tools[i].function.parameters) when a schema has a keyword the
// engine does not implement or is invalid; (400, tool_choice) when `only` names no tool.
std::string tool_call_gbnf(const std::string& tools, std::string_view only, bool parallel);

// `gbnf` with every rule name prefixed by `prefix` (string literals, character classes,
// repetition counts and comments left as they are), so that grammars can share one file.
std::string prefix_gbnf_rules(std::string_view gbnf, std::string_view prefix);

} // namespace rwd::serve
