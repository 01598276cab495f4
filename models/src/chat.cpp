// Chat formatting per family (the segments every template writes, their concatenation) and the
// tokenization of a conversation with markers as control tokens and message text as text.
// The family rules mirror the publishers' Jinja templates; tests/test_chat.cpp checks them byte for byte.
#include "rewind/chat.h"

#include <cstdint>
#include <string_view>
#include <utility>

#include "chat_json.h"
#include "rewind/error.h"

namespace rwd {

namespace {

// Jinja's `trim` as @huggingface/jinja runs it (JavaScript's String.prototype.trim): white space
// and line terminators, including the Unicode spaces (Zs), U+2028/2029 and U+FEFF.
bool is_js_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

// The code point of the well-formed UTF-8 sequence at s[i..] and its length; {0xFFFFFFFF, 1} otherwise.
std::pair<uint32_t, size_t> decode_at(std::string_view s, size_t i) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char c = b(i);
    if (c < 0x80) return {c, 1};
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || i + n > s.size()) return {0xFFFFFFFF, 1};
    uint32_t cp = c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
        if ((b(i + k) & 0xC0) != 0x80) return {0xFFFFFFFF, 1};
        cp = (cp << 6) | (b(i + k) & 0x3F);
    }
    return {cp, n};
}

std::string js_trim(std::string_view s) {
    size_t begin = 0;
    while (begin < s.size()) {
        const auto [cp, n] = decode_at(s, begin);
        if (!is_js_space(cp)) break;
        begin += n;
    }
    size_t end = s.size();
    while (end > begin) {
        // Step back to the start of the last character.
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
        const auto [cp, n] = decode_at(s, start);
        if (start + n != end || !is_js_space(cp)) break;
        end = start;
    }
    return std::string(s.substr(begin, end - begin));
}

// Python's str.lstrip/rstrip/strip with the argument '\n'.
std::string_view lstrip_nl(std::string_view s) {
    while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
    return s;
}
std::string_view rstrip_nl(std::string_view s) {
    while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
    return s;
}

std::string where(size_t i, const ChatMessage& m) {
    return "chat message " + std::to_string(i) + " ('" + m.role + "')";
}

// The format's name for messages: its built-in name, else its family.
std::string format_label(const ChatFormat& f) {
    const std::string name = chat_format_name(f);
    if (!name.empty()) return "'" + name + "'";
    switch (f.family) {
    case ChatFamily::Llama3: return "Llama 3";
    case ChatFamily::ChatMl: return "ChatML";
    case ChatFamily::Phi3: return "Phi-3";
    case ChatFamily::Gemma: return "Gemma";
    }
    return "this";
}

Error no_tools(const ChatFormat& f, const std::string& what) {
    return Error(ErrorCode::unsupported, what + ": the chat format " + format_label(f) +
                                             " has no tool support (its template renders no tools; Qwen2.5's and "
                                             "Qwen3's do)");
}

// Checks what every family requires of a conversation.
void validate(const ChatFormat& f, std::span<const ChatMessage> messages) {
    if (messages.empty()) throw Error(ErrorCode::argument, "chat: the conversation has no messages");
    const bool tools = f.family == ChatFamily::ChatMl && f.qwen_tools;
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (!m.unsupported.empty())
            throw Error(ErrorCode::unsupported,
                        where(i, m) + ": holds " + m.unsupported + ", which rewind does not format (plain text only)");
        if (!m.tool_calls.empty() && m.role != "assistant")
            throw Error(ErrorCode::argument, where(i, m) + ": only assistant messages carry tool_calls");
        if (!m.tool_calls.empty() && !tools) throw no_tools(f, where(i, m) + " holds tool_calls");
        if (m.role == "system" || m.role == "user" || m.role == "assistant") continue;
        if (m.role == "tool") {
            if (!tools) throw no_tools(f, where(i, m));
            continue;
        }
        if (m.role == "ipython" || m.role == "function")
            throw Error(ErrorCode::unsupported, where(i, m) + ": this role is not supported (use \"tool\")");
        throw Error(ErrorCode::argument, where(i, m) + ": unknown role (expected system, user, assistant or tool)");
    }
}

class Builder {
public:
    void marker(std::string text) { add(ChatSegment::Kind::Marker, std::move(text)); }
    void content(std::string text) { add(ChatSegment::Kind::Content, std::move(text)); }
    void content(std::string_view text) { add(ChatSegment::Kind::Content, std::string(text)); }
    // Always kept, even when the text is empty: tokenize_chat reads "the template writes BOS" from it.
    void bos(const std::string& text) { out_.push_back({ChatSegment::Kind::Bos, text}); }
    void eos(const std::string& text) { out_.push_back({ChatSegment::Kind::Eos, text}); }
    std::vector<ChatSegment> take() { return std::move(out_); }

private:
    void add(ChatSegment::Kind kind, std::string text) {
        if (text.empty()) return;
        if (!out_.empty() && out_.back().kind == kind && kind == ChatSegment::Kind::Marker)
            out_.back().text += text; // adjacent markers merge: fewer, longer pieces
        else
            out_.push_back({kind, std::move(text)});
    }
    std::vector<ChatSegment> out_;
};

void llama3(Builder& b, const ChatFormat& f, std::span<const ChatMessage> msgs, const ChatOptions& o) {
    size_t first = 0;
    if (f.date_preamble) {
        b.bos(o.bos_token);
        b.marker("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
        b.content(o.date_string.empty() ? std::string("26 Jul 2024") : o.date_string);
        b.marker("\n\n");
        if (msgs[0].role == "system") {
            b.content(js_trim(msgs[0].content));
            first = 1;
        }
        b.marker("<|eot_id|>");
    }
    for (size_t i = first; i < msgs.size(); ++i) {
        if (i == 0 && !f.date_preamble) b.bos(o.bos_token); // else written before the preamble
        b.marker("<|start_header_id|>" + msgs[i].role + "<|end_header_id|>\n\n");
        b.content(js_trim(msgs[i].content));
        b.marker("<|eot_id|>");
    }
    if (o.add_generation_prompt || f.always_generation_prompt) b.marker("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Qwen3: the index of the last user message that is not a tool response wrapped as a user turn.
size_t last_query_index(std::span<const ChatMessage> msgs) {
    for (size_t i = msgs.size(); i-- > 0;) {
        const std::string& c = msgs[i].content;
        const bool tool_response = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
        if (msgs[i].role == "user" && !tool_response) return i;
    }
    return msgs.size() - 1;
}

// Qwen's tools block, the system turn a conversation with tools starts with: the first system
// message (else the default one) and the function signatures, one `tojson` line each.
void qwen_tools_header(Builder& b, const ChatFormat& f, std::span<const ChatMessage> msgs,
                       const std::vector<std::string>& tools) {
    b.marker("<|im_start|>system\n");
    if (msgs[0].role == "system") {
        b.content(msgs[0].content);
        b.marker("\n\n");
    } else if (!f.default_system.empty()) {
        b.marker(f.default_system + "\n\n");
    }
    b.marker("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
             "with function signatures within <tools></tools> XML tags:\n<tools>");
    for (const std::string& t : tools) {
        b.marker("\n");
        b.content(t);
    }
    b.marker("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
             "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
             "<args-json-object>}\n</tool_call><|im_end|>\n");
}

// An assistant turn's calls after its text, each in a <tool_call> block on a line of its own.
void qwen_tool_calls(Builder& b, const ChatFormat& f, size_t i, const ChatMessage& m, std::string_view content) {
    for (size_t c = 0; c < m.tool_calls.size(); ++c) {
        const ChatToolCall& call = m.tool_calls[c];
        if (c > 0 || !content.empty()) b.marker("\n");
        b.marker("<tool_call>\n{\"name\": \"");
        b.content(call.name);
        b.marker("\", \"arguments\": ");
        // Qwen3's template writes an argument string as is; Qwen2.5's `tojson`s whatever it gets.
        b.content(chat_json::arguments_text(call.arguments, f.qwen3_thinking,
                                            where(i, m) + " tool call " + std::to_string(c)));
        b.marker("}\n</tool_call>");
    }
}

// A tool result: consecutive ones share one user turn, each in a <tool_response> block.
void qwen_tool_result(Builder& b, std::span<const ChatMessage> msgs, size_t i) {
    if (i == 0 || msgs[i - 1].role != "tool") b.marker("<|im_start|>user");
    b.marker("\n<tool_response>\n");
    b.content(msgs[i].content);
    b.marker("\n</tool_response>");
    if (i + 1 == msgs.size() || msgs[i + 1].role != "tool") b.marker("<|im_end|>\n");
}

// An assistant turn; Qwen3's reasoning rules apply to the ones after the last user query.
void chatml_assistant(Builder& b, const ChatFormat& f, std::span<const ChatMessage> msgs, size_t i, size_t last_query) {
    const ChatMessage& m = msgs[i];
    std::string_view content = m.content, reasoning;
    if (f.qwen3_thinking) {
        if (const size_t first = content.find("</think>"); first != std::string_view::npos) {
            const std::string_view before = rstrip_nl(content.substr(0, first));
            const size_t open = before.rfind("<think>");
            reasoning = lstrip_nl(open == std::string_view::npos ? before : before.substr(open + 7));
            content = lstrip_nl(content.substr(content.rfind("</think>") + 8));
        }
    }
    if (f.qwen3_thinking && i > last_query && (i + 1 == msgs.size() || !reasoning.empty())) {
        b.marker("<|im_start|>assistant\n<think>\n");
        b.content(lstrip_nl(rstrip_nl(reasoning)));
        b.marker("\n</think>\n\n");
        b.content(lstrip_nl(content));
    } else {
        b.marker("<|im_start|>assistant\n");
        b.content(content);
    }
    qwen_tool_calls(b, f, i, m, content);
    b.marker("<|im_end|>\n");
}

void chatml(Builder& b, const ChatFormat& f, std::span<const ChatMessage> msgs, const ChatOptions& o) {
    const std::vector<std::string> tools = chat_json::tool_texts(o.tools, "chat tools");
    if (!tools.empty() && !f.qwen_tools) throw no_tools(f, "chat tools");
    size_t first = 0;
    if (!tools.empty()) {
        qwen_tools_header(b, f, msgs, tools);
        first = msgs[0].role == "system" ? 1 : 0;
    } else if (!f.default_system.empty() && msgs[0].role != "system") {
        b.marker("<|im_start|>system\n" + f.default_system + "<|im_end|>\n");
    }
    const size_t last_query = f.qwen3_thinking ? last_query_index(msgs) : 0;
    for (size_t i = first; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (m.role == "assistant") {
            chatml_assistant(b, f, msgs, i, last_query);
        } else if (m.role == "tool") {
            qwen_tool_result(b, msgs, i);
        } else {
            b.marker("<|im_start|>" + m.role + "\n");
            b.content(m.content);
            b.marker("<|im_end|>\n");
        }
    }
    if (o.add_generation_prompt) {
        b.marker("<|im_start|>assistant\n");
        if (f.qwen3_thinking && !o.enable_thinking) b.marker("<think>\n\n</think>\n\n");
    }
}

void phi3(Builder& b, std::span<const ChatMessage> msgs, const ChatOptions& o) {
    for (const ChatMessage& m : msgs) {
        if (m.role == "system" && m.content.empty()) continue; // the template skips an empty system text
        b.marker("<|" + m.role + "|>\n");
        b.content(m.content);
        b.marker("<|end|>\n");
    }
    if (o.add_generation_prompt)
        b.marker("<|assistant|>\n");
    else
        b.eos(o.eos_token);
}

void gemma(Builder& b, std::span<const ChatMessage> msgs, const ChatOptions& o) {
    b.bos(o.bos_token);
    const bool has_system = msgs[0].role == "system";
    const size_t start = has_system ? 1 : 0;
    for (size_t i = start; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        const bool user_turn = (i - start) % 2 == 0;
        if (m.role == "system" || (m.role == "user") != user_turn)
            throw Error(ErrorCode::argument,
                        where(i, m) + ": Gemma's roles must alternate user, assistant, user, ... after an optional "
                                      "first system message (expected " + (user_turn ? "user" : "assistant") + ")");
        b.marker(std::string("<start_of_turn>") + (m.role == "assistant" ? "model" : "user") + "\n");
        if (i == start && has_system) {
            b.content(msgs[0].content); // not trimmed, as the template does
            b.marker("\n\n");
        }
        b.content(js_trim(m.content));
        b.marker("<end_of_turn>\n");
    }
    if (o.add_generation_prompt) b.marker("<start_of_turn>model\n");
}

// A text spells a token that only special parsing matches (control or unknown).
bool spells_control(const Tokenizer& tok, std::string_view text) {
    for (TokenId id : tok.encode(text, AddBos::No, SpecialTokens::Parse))
        if (tok.is_control(id) || tok.kind(id) == TokenKind::Unknown) return true;
    return false;
}

} // namespace

std::vector<ChatSegment> chat_segments(const ChatFormat& format, std::span<const ChatMessage> messages,
                                       const ChatOptions& options) {
    validate(format, messages);
    if (format.family != ChatFamily::ChatMl && !chat_json::tool_texts(options.tools, "chat tools").empty())
        throw no_tools(format, "chat tools");
    Builder b;
    switch (format.family) {
    case ChatFamily::Llama3: llama3(b, format, messages, options); break;
    case ChatFamily::ChatMl: chatml(b, format, messages, options); break;
    case ChatFamily::Phi3: phi3(b, messages, options); break;
    case ChatFamily::Gemma: gemma(b, messages, options); break;
    }
    return b.take();
}

std::string format_chat(const ChatFormat& format, std::span<const ChatMessage> messages, const ChatOptions& options) {
    std::string out;
    for (const ChatSegment& s : chat_segments(format, messages, options)) out += s.text;
    return out;
}

void fill_token_texts(ChatOptions& options, const Tokenizer& tok) {
    if (options.bos_token.empty() && tok.bos() >= 0) options.bos_token = tok.token_to_piece(tok.bos(), true);
    if (options.eos_token.empty() && tok.eos() >= 0) options.eos_token = tok.token_to_piece(tok.eos(), true);
}

std::vector<TokenId> tokenize_chat(const Tokenizer& tok, const ChatFormat& format, std::span<const ChatMessage> messages,
                                   const ChatOptions& options) {
    const std::vector<ChatSegment> segs = chat_segments(format, messages, options);
    bool bos = tok.add_bos();
    // Runs of text encoded in one call each: everything with special parsing, except a message text
    // that spells a control token, which is a run of its own encoded as text.
    std::vector<std::pair<std::string, SpecialTokens>> runs(1, {std::string(), SpecialTokens::Parse});
    for (const ChatSegment& s : segs) {
        switch (s.kind) {
        case ChatSegment::Kind::Bos: bos = true; break;
        case ChatSegment::Kind::Eos:
            runs.back().first += !options.eos_token.empty() ? options.eos_token
                                 : tok.valid(tok.eos())     ? tok.token_to_piece(tok.eos(), true)
                                                            : std::string();
            break;
        case ChatSegment::Kind::Marker: runs.back().first += s.text; break;
        case ChatSegment::Kind::Content:
            if (spells_control(tok, s.text)) {
                runs.emplace_back(s.text, SpecialTokens::AsText);
                runs.emplace_back(std::string(), SpecialTokens::Parse);
            } else {
                runs.back().first += s.text;
            }
            break;
        }
    }
    std::vector<TokenId> ids;
    if (bos) {
        if (!tok.valid(tok.bos()))
            throw Error(ErrorCode::unsupported, "chat: the template writes a BOS token but the vocabulary has none");
        ids.push_back(tok.bos());
    }
    for (const auto& [text, special] : runs) {
        if (text.empty()) continue;
        const std::vector<TokenId> part = tok.encode(text, AddBos::No, special);
        ids.insert(ids.end(), part.begin(), part.end());
    }
    return ids;
}

} // namespace rwd
