// The model's side of tool calling: the <tool_call> blocks of an answer in Qwen's tool format read
// back into calls (name, arguments as JSON text, an id) and the text before them.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "rewind/chat.h"

namespace rwd {

// An answer split into what it says and the calls it makes.
struct ParsedToolCalls {
    std::string content;            // the text before the first call, trailing white space dropped;
                                    // the whole answer when it makes no calls
    std::vector<ChatToolCall> calls; // in order; arguments as compact JSON text, key order kept
};

// The opening tag of a call in Qwen's tool format.
inline constexpr std::string_view kToolCallOpen = "<tool_call>";

// Splits `answer` for a format with tool support (format.qwen_tools): an answer that, from its
// first "<tool_call>" on, is only blocks "<tool_call>" JSON "</tool_call>" separated by white space,
// each JSON an object {"name": string, "arguments": object}, gives those calls (ids `id_prefix` +
// "0", "1", ...). Anything else (no tag, an unclosed or malformed block, text after the blocks, a
// format without tool support) gives no calls and the whole answer as content: never throws.
ParsedToolCalls parse_tool_calls(const ChatFormat& format, std::string_view answer, std::string_view id_prefix);

// How many bytes at the end of `text` could be the start of kToolCallOpen ("<", "<tool", ...): what a
// stream holds back until the next text says whether a call opens there. 0..10.
size_t tool_call_open_suffix(std::string_view text);

} // namespace rwd
