// `rewind tokenize`: prints the token ids (or ids with their pieces) of a text, read from -p, a
// file or standard input, or of a conversation formatted by its chat template (--chat). Needs only
// the tokenizer, so vocabulary-only GGUF files work too.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "options.h"
#include "rewind/chat.h"
#include "rewind/error.h"
#include "rewind/file_io.h"
#include "rewind/gguf.h"
#include "rewind/tokenizer.h"

namespace rwd::cli {

namespace {

struct TokenizeOptions {
    std::string model;
    std::string prompt;
    std::string file;
    bool have_prompt = false;
    bool no_bos = false;
    bool pieces = false;
    bool special = false;
    std::string chat;               // a conversation as JSON (the shape of shared/chat's records)
    bool text_only = false;         // --text: the formatted conversation, not its ids
    ChatFlags chat_flags;           // --chat-template NAME or @FILE
    std::string chat_template_file; // --chat-template-file FILE: a template's text
};


// Length of the well-formed UTF-8 sequence at `i`, or 0 if there is none.
size_t utf8_at(const std::string& s, size_t i) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
    return n;
}

// A piece as a quoted, one-line string: control characters and bytes that are not (complete)
// UTF-8, such as a lone byte-fallback token, are written as escapes.
std::string quote(const std::string& s) {
    std::string out = "'";
    char buf[8];
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\\' || c == '\'') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c >= 0x20 && c < 0x7F) {
            out += static_cast<char>(c);
        } else if (const size_t n = c >= 0x80 ? utf8_at(s, i) : 0; n > 0) {
            out.append(s, i, n);
            i += n;
            continue;
        } else {
            std::snprintf(buf, sizeof buf, "\\x%02X", c);
            out += buf;
        }
        ++i;
    }
    return out + "'";
}

// The ids on one line, or (pieces) one token a line: id and its quoted piece.
void print_ids(const Tokenizer& tok, const std::vector<TokenId>& ids, bool pieces) {
    std::ostringstream out;
    if (pieces) {
        for (TokenId id : ids) out << id << '\t' << quote(tok.token_to_piece(id, true)) << '\n';
    } else {
        for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
        out << '\n';
    }
    const std::string s = out.str();
    std::fwrite(s.data(), 1, s.size(), stdout);
}

// A conversation file: {"messages": [{"role", "content"}...], "tools": [...],
// "add_generation_prompt": bool, "kwargs": {"enable_thinking": bool, "date_string": "..."},
// "bos_token": "...", "eos_token": "..."}. Assistant messages may carry "tool_calls" (arguments as
// a JSON object, or OpenAI's JSON string); "tool" messages carry "tool_call_id". A message whose
// content is not one string is kept marked as unsupported, so that formatting refuses it by name
// rather than flattening it. Parsed keeping key order: tools render in the order written.
struct Conversation {
    std::vector<ChatMessage> messages;
    ChatOptions options;
    bool has_bos = false, has_eos = false;
};

using ojson = nlohmann::ordered_json;

ChatMessage read_message(const ojson& m, const std::string& where) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        throw Error(ErrorCode::format, where + " has no \"role\" string");
    ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    const auto content = m.find("content");
    const bool calls = m.contains("tool_calls") && m["tool_calls"].is_array();
    if (content == m.end() || content->is_null()) {
        if (!calls) msg.unsupported = "no content";
    } else if (content->is_array()) msg.unsupported = "a list of content parts";
    else if (!content->is_string()) msg.unsupported = std::string("content that is a ") + content->type_name();
    else msg.content = content->get<std::string>();
    if (m.contains("tool_call_id") && m["tool_call_id"].is_string()) msg.tool_call_id = m["tool_call_id"].get<std::string>();
    if (!calls) return msg;
    for (const ojson& c : m["tool_calls"]) {
        const ojson& fn = c.contains("function") ? c["function"] : c;
        if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string() || !fn.contains("arguments"))
            throw Error(ErrorCode::format, where + ": a tool call needs a \"name\" and \"arguments\"");
        const ojson& args = fn["arguments"];
        msg.tool_calls.push_back({c.value("id", std::string()), fn["name"].get<std::string>(),
                                  args.is_string() ? args.get<std::string>() : args.dump()});
    }
    return msg;
}

Conversation read_conversation(const std::string& path) {
    const std::string raw = read_file_limited(path, kMaxPromptFileBytes, "conversation file");
    ojson j;
    try {
        j = ojson::parse(raw);
    } catch (const ojson::exception& e) {
        throw Error(ErrorCode::format, path + ": not JSON (" + e.what() + ")");
    }
    if (!j.is_object() || !j.contains("messages") || !j["messages"].is_array())
        throw Error(ErrorCode::format, path + ": expected an object with a \"messages\" array");
    Conversation c;
    for (size_t i = 0; i < j["messages"].size(); ++i)
        c.messages.push_back(read_message(j["messages"][i], path + ": message " + std::to_string(i)));
    if (j.contains("tools") && !j["tools"].is_null()) c.options.tools = j["tools"].dump();
    if (j.contains("add_generation_prompt")) c.options.add_generation_prompt = j["add_generation_prompt"].get<bool>();
    if (j.contains("kwargs") && j["kwargs"].is_object()) {
        const ojson& k = j["kwargs"];
        if (k.contains("enable_thinking")) c.options.enable_thinking = k["enable_thinking"].get<bool>();
        if (k.contains("date_string")) c.options.date_string = k["date_string"].get<std::string>();
    }
    if (j.contains("bos_token") && j["bos_token"].is_string()) {
        c.options.bos_token = j["bos_token"].get<std::string>();
        c.has_bos = true;
    }
    if (j.contains("eos_token") && j["eos_token"].is_string()) {
        c.options.eos_token = j["eos_token"].get<std::string>();
        c.has_eos = true;
    }
    return c;
}

// --chat: the conversation's text (--text, written exactly, no newline added) or ids.
int run_tokenize_chat(const TokenizeOptions& o) {
    Conversation c = read_conversation(o.chat);
    const std::string override_template =
        !o.chat_template_file.empty() ? read_file_limited(o.chat_template_file, kMaxPromptFileBytes, "chat template")
                                      : o.chat_flags.template_text();
    // A model is needed for its tokenizer, and for its template when none is given.
    const bool need_model = !o.text_only || override_template.empty() || !c.has_bos || !c.has_eos;
    std::optional<GgufFile> gguf;
    std::unique_ptr<Tokenizer> tok;
    if (need_model) {
        gguf.emplace(GgufFile::open(o.model.empty() ? default_model_path() : o.model));
        tok = Tokenizer::from_gguf(*gguf);
    }
    const std::string file_template = gguf ? gguf->get_string("tokenizer.chat_template").value_or("") : "";
    const ChatFormat format = resolve_chat_format(override_template, file_template);
    if (tok && !c.has_bos && tok->bos() >= 0) c.options.bos_token = tok->token_to_piece(tok->bos(), true);
    if (tok && !c.has_eos && tok->eos() >= 0) c.options.eos_token = tok->token_to_piece(tok->eos(), true);
    if (o.text_only) {
        const std::string text = format_chat(format, c.messages, c.options);
        std::fwrite(text.data(), 1, text.size(), stdout);
        return 0;
    }
    const std::vector<TokenId> ids = tokenize_chat(*tok, format, c.messages, c.options);
    print_ids(*tok, ids, o.pieces);
    return 0;
}

int run_tokenize(const TokenizeOptions& o) {
    if (!o.chat.empty()) return run_tokenize_chat(o);
    std::string text;
    if (!o.file.empty()) {
        text = read_file_limited(o.file, kMaxPromptFileBytes, "text file");
    } else if (!o.have_prompt || o.prompt == "-") {
        text = read_file_limited("/dev/stdin", kMaxPromptFileBytes, "text on standard input");
    } else {
        text = o.prompt;
    }

    const std::string path = o.model.empty() ? default_model_path() : o.model;
    const GgufFile gguf = GgufFile::open(path);
    const auto tok = Tokenizer::from_gguf(gguf);
    const auto ids = tok->encode(text, o.no_bos ? AddBos::No : AddBos::Default,
                                 o.special ? SpecialTokens::Parse : SpecialTokens::AsText);

    print_ids(*tok, ids, o.pieces);
    return 0;
}

} // namespace

void register_tokenize(CLI::App& app, Runner& run) {
    auto o = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand(
        "tokenize", "Print the token ids of a text (-p, -f, or standard input when neither or -p - is given); "
                    "the model may be a vocabulary-only GGUF file");
    add_model_path_flag(*cmd, o->model);
    CLI::Option* p = add_prompt_flags(*cmd, o->prompt, &o->file);
    cmd->add_flag("--no-bos", o->no_bos, "Do not add the BOS token");
    cmd->add_flag("--pieces", o->pieces, "Print one token per line: id and piece");
    cmd->add_flag("--special", o->special, "Match control tokens written in the text (e.g. <s>) as those tokens");
    CLI::Option* chat = cmd->add_option("--chat", o->chat,
        "A conversation as JSON ({\"messages\": [...], \"add_generation_prompt\": true, \"kwargs\": {...}}, "
        "optionally \"bos_token\"/\"eos_token\"): print the ids of its text formatted by the chat template, "
        "markers as control tokens and message text as text");
    chat->excludes(p)->excludes("--file");
    cmd->add_flag("--text", o->text_only, "With --chat: print the formatted text itself, exactly, instead of ids")
        ->needs(chat);
    add_chat_flags(*cmd, o->chat_flags, chat, /*with_system=*/false);
    add_chat_template_file_flag(*cmd, o->chat_template_file)->needs(chat)->excludes("--chat-template");
    cmd->callback([o, p, &run] {
        o->have_prompt = p->count() > 0;
        run = [o] { return run_tokenize(*o); };
    });
}

} // namespace rwd::cli
