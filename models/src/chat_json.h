// The JSON a chat template's `tojson` writes (Python's json.dumps with ensure_ascii=False) for the
// tools list and tool-call arguments, from the JSON texts the chat API carries.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace rwd::chat_json {

// Each tool of `tools_json` (a JSON list of objects; empty text: none) as `tojson` writes it.
// Throws rwd::Error (argument) naming `where` for text that is not JSON or not a list of objects.
std::vector<std::string> tool_texts(std::string_view tools_json, const std::string& where);

// Tool-call arguments as a template writes them: `tojson` of the parsed JSON, or, when
// `string_as_is` and the JSON is a string, that string's own text (Qwen3's template). Throws
// rwd::Error (argument) naming `where` for text that is not JSON.
std::string arguments_text(std::string_view arguments_json, bool string_as_is, const std::string& where);

} // namespace rwd::chat_json
