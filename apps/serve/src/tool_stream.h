// The model's tool calls in an answer: read whole (one JSON answer), or as the answer streams,
// releasing text only once it cannot be part of a call, so that the chunks reassemble to the
// whole answer's content and calls.
#pragma once
#include <string>
#include <vector>

#include "rewind/chat.h"
#include "rewind/chat_tools.h"

namespace rwd::serve {

// The answer's calls for a request with tools (tool_choice auto): parse_tool_calls, keeping only the
// first call when the request says parallel_tool_calls: false. Ids are `id_prefix` + index.
ParsedToolCalls split_tool_calls(const ChatFormat& format, const std::string& answer, const std::string& id_prefix,
                                 bool parallel);

// One streamed answer's content, held back from the first "<tool_call>" on (and over a possible
// start of one, and trailing white space, which a call after it would drop).
class ToolCallStream {
public:
    ToolCallStream(ChatFormat format, std::string id_prefix, bool parallel);
    // The content newly safe to send after `fresh` was appended to the answer.
    std::string push(const std::string& fresh);
    // At the end: the content not yet sent and the calls (empty when the answer makes none).
    ParsedToolCalls finish();

private:
    ChatFormat format_;
    std::string id_prefix_;
    bool parallel_;
    std::string text_; // the answer so far
    size_t sent_ = 0;  // bytes of text_ released as content
};

} // namespace rwd::serve
