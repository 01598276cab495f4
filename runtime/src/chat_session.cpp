// ChatSession: format the whole conversation each turn, keep the longest id prefix the cache
// already holds, run the rest, generate, and record the reply as an assistant message.
#include "rewind/chat_session.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "rewind/error.h"

namespace rwd {

ChatSession::ChatSession(std::shared_ptr<const Model> model, ChatFormat format, ChatSessionOptions opts)
    : model_(std::move(model)), format_(std::move(format)), chat_(std::move(opts.chat)),
      session_(model_, opts.cache) {
    const Tokenizer& tok = model_->tokenizer();
    if (chat_.bos_token.empty() && tok.bos() >= 0) chat_.bos_token = tok.token_to_piece(tok.bos(), true);
    if (chat_.eos_token.empty() && tok.eos() >= 0) chat_.eos_token = tok.token_to_piece(tok.eos(), true);
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

} // namespace rwd
