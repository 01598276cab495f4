// Tool calls out of an answer, whole or streamed: what is sent before the end is always a prefix of
// the content the whole answer gives, so the stream's chunks reassemble to the JSON answer.
#include "tool_stream.h"

#include <algorithm>

namespace rwd::serve {

ParsedToolCalls split_tool_calls(const ChatFormat& format, const std::string& answer, const std::string& id_prefix,
                                 bool parallel) {
    ParsedToolCalls p = parse_tool_calls(format, answer, id_prefix);
    if (!parallel && p.calls.size() > 1) p.calls.resize(1);
    return p;
}

ToolCallStream::ToolCallStream(ChatFormat format, std::string id_prefix, bool parallel)
    : format_(std::move(format)), id_prefix_(std::move(id_prefix)), parallel_(parallel) {}

std::string ToolCallStream::push(const std::string& fresh) {
    text_ += fresh;
    const size_t open = text_.find(kToolCallOpen);
    size_t safe = open != std::string::npos ? open : text_.size() - tool_call_open_suffix(text_);
    while (safe > sent_ && (text_[safe - 1] == ' ' || text_[safe - 1] == '\n' || text_[safe - 1] == '\r' ||
                            text_[safe - 1] == '\t'))
        --safe;
    if (safe <= sent_) return {};
    std::string out = text_.substr(sent_, safe - sent_);
    sent_ = safe;
    return out;
}

ParsedToolCalls ToolCallStream::finish() {
    ParsedToolCalls p = split_tool_calls(format_, text_, id_prefix_, parallel_);
    // sent_ never passes the content's end: the content is the text before the first tag, trimmed.
    p.content = p.content.substr(std::min(sent_, p.content.size()));
    sent_ = text_.size();
    return p;
}

} // namespace rwd::serve
