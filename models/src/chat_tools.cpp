// Reading a model's <tool_call> blocks back into calls: strict (every block a well-formed call, or
// none is taken), so a half-written or malformed call reaches the client as the text it was.
#include "rewind/chat_tools.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

namespace rwd {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kClose = "</tool_call>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim_end(std::string_view s) {
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

// One block's JSON as a call; nullopt unless it is {"name": string, "arguments": object}.
std::optional<ChatToolCall> read_call(std::string_view body) {
    const ojson j = ojson::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return std::nullopt;
    const auto name = j.find("name");
    const auto args = j.find("arguments");
    if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
    if (args == j.end() || !args->is_object()) return std::nullopt;
    return ChatToolCall{{}, name->get<std::string>(), args->dump(-1, ' ', false, ojson::error_handler_t::replace)};
}

} // namespace

ParsedToolCalls parse_tool_calls(const ChatFormat& format, std::string_view answer, std::string_view id_prefix) {
    ParsedToolCalls whole{std::string(answer), {}};
    const size_t first = answer.find(kToolCallOpen);
    if (!format.qwen_tools || first == std::string_view::npos) return whole;
    ParsedToolCalls out{std::string(trim_end(answer.substr(0, first))), {}};
    size_t pos = first;
    while (pos < answer.size()) {
        if (answer.substr(pos, kToolCallOpen.size()) != kToolCallOpen) return whole; // text after a call
        const size_t body = pos + kToolCallOpen.size();
        const size_t close = answer.find(kClose, body);
        if (close == std::string_view::npos) return whole; // unclosed: cut short
        std::optional<ChatToolCall> call = read_call(answer.substr(body, close - body));
        if (!call) return whole;
        call->id = std::string(id_prefix) + std::to_string(out.calls.size());
        out.calls.push_back(std::move(*call));
        pos = close + kClose.size();
        while (pos < answer.size() && is_space(answer[pos])) ++pos;
    }
    return out;
}

size_t tool_call_open_suffix(std::string_view text) {
    for (size_t n = std::min(text.size(), kToolCallOpen.size() - 1); n > 0; --n)
        if (text.substr(text.size() - n) == kToolCallOpen.substr(0, n)) return n;
    return 0;
}

} // namespace rwd
