// Which chat format: the built-in names, and detection from a template's text by the markers it
// contains (as llama.cpp does) plus the variant details within a family that change the text.
#include "rewind/chat.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <utility>

#include "rewind/error.h"
#include "rewind/gguf.h"

namespace rwd {

namespace {

constexpr std::string_view kQwen2System = "You are a helpful assistant.";
constexpr std::string_view kQwen25System = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

ChatFormat make(ChatFamily family, bool always_prompt = false, std::string_view default_system = {},
                bool thinking = false, bool date_preamble = false, bool tools = false) {
    ChatFormat f;
    f.family = family;
    f.always_generation_prompt = always_prompt;
    f.date_preamble = date_preamble;
    f.default_system = std::string(default_system);
    f.qwen3_thinking = thinking;
    f.qwen_tools = tools;
    return f;
}

bool has(std::string_view text, std::string_view what) { return text.find(what) != std::string_view::npos; }

// The first `n` characters (bytes, cut back to a UTF-8 boundary) with control characters escaped.
std::string quote_start(std::string_view text, size_t n) {
    size_t end = std::min(n, text.size());
    while (end < text.size() && end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
    std::string out = "\"";
    for (char c : text.substr(0, end)) {
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c == '\r') out += "\\r";
        else if (c == '"') out += "\\\"";
        else out += c;
    }
    out += end < text.size() ? "...\"" : "\"";
    return out;
}

// The default system message a ChatML template writes as one string literal:
// '<|im_start|>system\n' followed by literal text up to '<|im_end|>' (Qwen2, Qwen2.5). A system
// header followed by the end of the literal (the message's own content) does not count.
std::string chatml_default_system(std::string_view t) {
    constexpr std::string_view head = "<|im_start|>system";
    for (size_t pos = t.find(head); pos != std::string_view::npos; pos = t.find(head, pos + 1)) {
        size_t i = pos + head.size();
        if (t.substr(i, 2) == "\\n") i += 2;
        else if (t.substr(i, 1) == "\n") i += 1;
        else continue;
        std::string text;
        bool ok = false;
        while (i < t.size()) {
            if (t.substr(i, 10) == "<|im_end|>") {
                ok = true;
                break;
            }
            const char c = t[i];
            if (c == '\'' || c == '"' || c == '{' || c == '}') break; // the literal ends: not a fixed text
            if (c == '\\' && i + 1 < t.size()) {
                const char e = t[i + 1];
                text += e == 'n' ? '\n' : e == 't' ? '\t' : e;
                i += 2;
                continue;
            }
            text += c;
            ++i;
        }
        if (ok && !text.empty()) return text;
    }
    return {};
}

const std::array<std::pair<std::string_view, ChatFormat>, 15>& builtins() {
    static const std::array<std::pair<std::string_view, ChatFormat>, 15> table = {{
        {"llama3", make(ChatFamily::Llama3, true)},
        {"llama3.1", make(ChatFamily::Llama3, false, {}, false, true)},
        {"llama3.2", make(ChatFamily::Llama3, false, {}, false, true)},
        {"llama3.3", make(ChatFamily::Llama3, false, {}, false, true)},
        {"llama3-simple", make(ChatFamily::Llama3)},
        {"chatml", make(ChatFamily::ChatMl)},
        {"qwen2", make(ChatFamily::ChatMl, false, kQwen2System)},
        {"qwen2.5", make(ChatFamily::ChatMl, false, kQwen25System, false, false, true)},
        {"qwen2.5-coder", make(ChatFamily::ChatMl, false, kQwen25System, false, false, true)},
        {"qwen3", make(ChatFamily::ChatMl, false, {}, true, false, true)},
        {"phi3", make(ChatFamily::Phi3)},
        {"phi3.5", make(ChatFamily::Phi3)},
        {"gemma", make(ChatFamily::Gemma)},
        {"gemma2", make(ChatFamily::Gemma)},
        {"gemma3", make(ChatFamily::Gemma)},
    }};
    return table;
}

const ChatFormat* find_builtin(std::string_view name) {
    if (name.empty()) return nullptr;
    for (const auto& [n, f] : builtins())
        if (n == name) return &f;
    return nullptr;
}

} // namespace

ChatFormat parse_chat_format_name(std::string_view name) {
    if (const ChatFormat* f = find_builtin(name)) return *f;
    std::string list;
    for (const auto& [n, f] : builtins())
        list += (list.empty() ? "" : ", ") + std::string(n);
    throw Error(ErrorCode::argument, "unknown chat format " + quote_start(name, 40) + " (built-in: " + list + ")");
}

std::string chat_format_name(const ChatFormat& format) {
    for (const auto& [n, f] : builtins())
        if (f == format) return std::string(n);
    return {};
}

ChatFormat detect_chat_format(std::string_view t) {
    const auto unsupported = [&](const std::string& what) {
        return Error(ErrorCode::unsupported, "chat template " + quote_start(t, 40) + ": " + what +
                                                 " is not supported yet; pass a built-in chat format name");
    };
    if (has(t, "<|im_start|>")) {
        if (has(t, "<|im_sep|>")) throw unsupported("Phi-4's format");
        ChatFormat f = make(ChatFamily::ChatMl, false, chatml_default_system(t));
        f.qwen_tools = has(t, "<tool_call>"); // Qwen's tool format (Qwen2.5, Qwen3)
        if (has(t, "<think>") || has(t, "</think>")) {
            if (!has(t, "enable_thinking")) throw unsupported("a reasoning template other than Qwen3's");
            f.qwen3_thinking = true;
        }
        return f;
    }
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) {
        if (has(t, "Cutting Knowledge Date")) return make(ChatFamily::Llama3, false, {}, false, true);
        return make(ChatFamily::Llama3, !has(t, "add_generation_prompt"));
    }
    if (has(t, "<|assistant|>") && has(t, "<|end|>")) return make(ChatFamily::Phi3);
    if (has(t, "<start_of_turn>")) return make(ChatFamily::Gemma);
    throw Error(ErrorCode::unsupported, "unrecognised chat template " + quote_start(t, 40) +
                                            ": pass a built-in chat format name (llama3, llama3.1, llama3-simple, chatml, "
                                            "qwen2, qwen2.5, qwen3, phi3, gemma)");
}

ChatFormat resolve_chat_format(std::string_view override_name_or_template, std::string_view file_template) {
    if (!override_name_or_template.empty()) {
        // No Jinja tag: meant as a name (a typo gets the list of names, not "unrecognised template").
        if (!has(override_name_or_template, "{{") && !has(override_name_or_template, "{%"))
            return parse_chat_format_name(override_name_or_template);
        return detect_chat_format(override_name_or_template);
    }
    if (file_template.empty())
        throw Error(ErrorCode::unsupported,
                    "the file has no tokenizer.chat_template: pass a chat format name or a template");
    return detect_chat_format(file_template);
}

ChatFormat resolve_chat_format(std::string_view override_name_or_template, const GgufFile& file) {
    if (!override_name_or_template.empty()) return resolve_chat_format(override_name_or_template, std::string_view());
    const std::optional<std::string> t = file.get_string("tokenizer.chat_template");
    if (!t || t->empty())
        throw Error(ErrorCode::unsupported,
                    file.path() + ": no tokenizer.chat_template: pass a chat format name or a template");
    return detect_chat_format(*t);
}

} // namespace rwd
