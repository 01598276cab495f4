// ChatSession: format the whole conversation each turn, keep the longest id prefix the cache
// already holds, run the rest, generate, and record the reply as an assistant message.
#include "rewind/chat_session.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <string>

#include "rewind/error.h"
#include "rewind/file_io.h"
#include "rewind/hash.h"

namespace rwd {

ChatSession::ChatSession(std::shared_ptr<const Model> model, ChatFormat format, ChatSessionOptions opts)
    : model_(std::move(model)), format_(std::move(format)), chat_(std::move(opts.chat)),
      session_(model_, opts.cache) {
    fill_token_texts(chat_, model_->tokenizer());
    chat_.add_generation_prompt = true;
    if (!opts.system.empty()) {
        messages_.push_back(ChatMessage{.role = "system", .content = std::move(opts.system)});
        n_system_ = 1;
    }
}

ChatTurn ChatSession::say(Context& ctx, std::string_view user, const GenerateOptions& opts,
                          const TokenCallback& on_token) {
    return say(ctx, user, [&](Session& s) { return s.generate(ctx, opts, on_token); });
}

ChatTurn ChatSession::say(Context& ctx, std::string_view user, const ChatGenerate& generate) {
    const Tokenizer& tok = model_->tokenizer();
    std::vector<ChatMessage> next = messages_;
    next.push_back(ChatMessage{.role = "user", .content = std::string(user)});
    // Formatting checks every message before anything runs.
    const std::vector<TokenId> ids = tokenize_chat(tok, format_, next, chat_);
    const auto n = static_cast<int64_t>(ids.size());
    if (n >= session_.cache().capacity())
        throw Error(ErrorCode::capacity, "chat: the conversation is " + std::to_string(n) +
                                             " tokens with its new turn, and the KV cache holds " +
                                             std::to_string(session_.cache().capacity()) +
                                             " positions (reset the conversation or give a longer context)");
    // The longest prefix the session holds; at least the last id runs (its logits start the reply).
    const std::vector<TokenId>& held = session_.tokens();
    int64_t keep = 0;
    const int64_t lim = std::min<int64_t>(static_cast<int64_t>(held.size()), n - 1);
    while (keep < lim && held[static_cast<size_t>(keep)] == ids[static_cast<size_t>(keep)]) ++keep;
    const auto t0 = std::chrono::steady_clock::now();
    session_.truncate(keep);
    session_.append_tokens(ctx, std::span<const TokenId>(ids).subspan(static_cast<size_t>(keep)));

    ChatTurn turn;
    turn.prompt_tokens = n;
    turn.reused_tokens = keep;
    turn.run_tokens = n - keep;
    const double append_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    turn.result = generate(session_);
    turn.prefill_seconds = append_seconds + turn.result.prompt_seconds;
    std::vector<TokenId> text_ids = turn.result.tokens;
    if (!text_ids.empty() && tok.is_eog(text_ids.back())) text_ids.pop_back();
    turn.reply = tok.decode(text_ids);
    next.push_back(ChatMessage{.role = "assistant", .content = turn.reply});
    messages_ = std::move(next);
    return turn;
}

void ChatSession::reset() {
    messages_.resize(n_system_);
    session_.truncate(0);
}

namespace {

constexpr std::string_view kChatMagic = "RWNDCHAT 1\n";
constexpr size_t kMaxChatFileBytes = size_t{256} << 20;

std::string hex64(uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

// A strict reader of the ".chat" text: every read names the file and what it expected.
struct ChatReader {
    const std::string& name;
    std::string_view s;
    size_t at = 0;

    [[noreturn]] void fail(const std::string& what) const {
        throw Error(ErrorCode::format, name + ": not a rewind conversation file (" + what + " at byte " +
                                           std::to_string(at) + ")");
    }
    std::string_view line() {
        const size_t end = s.find('\n', at);
        if (end == std::string_view::npos) fail("a truncated line");
        const std::string_view l = s.substr(at, end - at);
        at = end + 1;
        return l;
    }
    uint64_t number(std::string_view text, const char* what) const {
        uint64_t v = 0;
        if (text.empty() || text.size() > 19) fail(std::string("a bad ") + what);
        for (char c : text) {
            if (c < '0' || c > '9') fail(std::string("a bad ") + what);
            v = v * 10 + static_cast<uint64_t>(c - '0');
        }
        return v;
    }
    uint64_t field(std::string_view key) {
        const std::string_view l = line();
        if (l.substr(0, key.size()) != key || l.size() <= key.size() || l[key.size()] != ' ')
            fail("no \"" + std::string(key) + "\" line");
        return number(l.substr(key.size() + 1), "count");
    }
    std::string bytes(uint64_t n) {
        if (n > s.size() - at) fail("a truncated message");
        std::string out(s.substr(at, n));
        at += n;
        if (line() != "") fail("no end of message");
        return out;
    }
};

} // namespace

void ChatSession::save(const std::string& path) const {
    session_.cache().save(path);
    std::string out(kChatMagic);
    out += "messages " + std::to_string(messages_.size()) + "\n";
    for (const ChatMessage& m : messages_) out += m.role + "\n" + std::to_string(m.content.size()) + "\n" + m.content + "\n";
    const std::vector<TokenId>& ids = session_.tokens();
    out += "tokens " + std::to_string(ids.size()) + "\n";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out += ' ';
        out += std::to_string(ids[i]);
    }
    out += "\n";
    Fnv1a h;
    h.bytes(out.data(), out.size());
    out += "checksum " + hex64(h.value()) + "\n";
    write_file_atomic(path + ".chat", std::as_bytes(std::span<const char>(out.data(), out.size())));
}

void ChatSession::load(const std::string& path) {
    const std::string name = path + ".chat";
    const std::string text = read_file_limited(name, kMaxChatFileBytes, "conversation file");
    ChatReader r{name, text};
    if (text.substr(0, kChatMagic.size()) != kChatMagic) r.fail("no RWNDCHAT 1 header");
    r.at = kChatMagic.size();
    const uint64_t n_messages = r.field("messages");
    if (n_messages > text.size()) r.fail("a bad message count");
    std::vector<ChatMessage> messages;
    for (uint64_t i = 0; i < n_messages; ++i) {
        ChatMessage m;
        m.role = std::string(r.line());
        m.content = r.bytes(r.number(r.line(), "message length"));
        messages.push_back(std::move(m));
    }
    const uint64_t n_ids = r.field("tokens");
    if (n_ids > text.size()) r.fail("a bad token count");
    std::vector<TokenId> ids;
    ids.reserve(n_ids);
    const std::string_view id_line = r.line();
    for (size_t p = 0; p < id_line.size();) {
        const size_t q = std::min(id_line.find(' ', p), id_line.size());
        const uint64_t id = r.number(id_line.substr(p, q - p), "token id");
        if (id > static_cast<uint64_t>(INT32_MAX)) r.fail("a bad token id");
        ids.push_back(static_cast<TokenId>(id));
        p = q + 1;
    }
    if (ids.size() != n_ids) r.fail("a token count that disagrees with its ids");
    Fnv1a h;
    h.bytes(text.data(), r.at);
    if (r.line() != "checksum " + hex64(h.value())) r.fail("a checksum that does not match (corrupted)");
    if (r.at != text.size()) r.fail("trailing bytes");
    // The cache, then the session over it (which checks the ids against it), before anything changes.
    KvCache kv = KvCache::load(path, *model_, {.capacity = session_.cache().capacity(), .type = session_.cache().type()});
    try {
        Session loaded(model_, std::move(kv), std::move(ids));
        session_ = std::move(loaded);
    } catch (const Error& e) {
        throw Error(e.code(), name + ": " + e.what());
    }
    messages_ = std::move(messages);
    n_system_ = !messages_.empty() && messages_.front().role == "system" ? 1 : 0;
}

} // namespace rwd
