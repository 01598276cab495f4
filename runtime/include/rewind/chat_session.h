// A conversation with a chat model: its messages, formatted by the model's chat template, over a
// Session whose KV cache holds the conversation so far. Each turn runs only the ids the cache does
// not hold yet, so a reply costs its new user turn, not the whole history.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/chat.h"
#include "rewind/context.h"
#include "rewind/generate.h"
#include "rewind/session.h"

namespace rwd {

struct ChatSessionOptions {
    KvCacheOptions cache{};
    ChatOptions chat{};   // bos/eos texts (empty: the tokenizer's), Qwen3's enable_thinking, a date
    std::string system{}; // a system message first (empty: none)
};

// How a reply is generated on the session (plain decoding by default; speculate/'s
// generate_speculative(ctx, session, ...) for speculation): it must continue the session exactly as
// Session::generate does.
using ChatGenerate = std::function<GenerateResult(Session&)>;

// What a turn did: the reply, its tokens and stop, and how much of the prompt was reused.
struct ChatTurn {
    std::string reply;         // the assistant's text (the end-of-turn token left out)
    GenerateResult result;     // its tokens (end-of-turn included, as generated), stop, timings
    int64_t prompt_tokens = 0; // ids of the whole formatted conversation, generation prompt included
    int64_t reused_tokens = 0; // of them, held by the cache already: not run again
    int64_t run_tokens = 0;    // of them, run for this turn (prompt_tokens - reused_tokens)
    double prefill_seconds = 0; // running them, up to the reply's first token
};

class ChatSession {
public:
    // Throws rwd::Error as Session does for opts.cache.
    ChatSession(std::shared_ptr<const Model> model, ChatFormat format, ChatSessionOptions opts = {});

    // Adds `user` as the next user message, formats the whole conversation with a generation
    // prompt, keeps the longest prefix of its ids the cache holds (earlier turns; the tokens of a
    // reply are kept as generated, so the prefix ends where a reply's text would tokenize
    // differently), runs the rest and generates the reply with `generate` (default: plain decoding
    // with `opts`, stopping at end-of-generation tokens such as <|im_end|>). The reply becomes an
    // assistant message. The reply equals generating from the formatted conversation from scratch
    // (the same ids, and a token's logits do not depend on how its prefix was split into passes).
    // Throws rwd::Error with the messages unchanged: as format_chat for a bad message (argument,
    // unsupported), capacity when the conversation no longer fits the cache (nothing run), or as
    // the generation does (the cache then holds what was run; the next turn reuses what it can).
    ChatTurn say(Context& ctx, std::string_view user, const GenerateOptions& opts, const TokenCallback& on_token = {});
    ChatTurn say(Context& ctx, std::string_view user, const ChatGenerate& generate);

    // Forgets the conversation (messages and cache); the system message stays.
    void reset();

    // Saves the conversation across runs: the KV cache to `path` (KvCache::save's checked format)
    // and its messages and ids to `path` + ".chat" (magic, format version, counts and a checksum
    // over the whole), each replaced atomically. Throws rwd::Error (io) naming the file.
    void save(const std::string& path) const;
    // Replaces this conversation by the one saved at `path` (for this model; the chat format and
    // options stay this session's). Throws rwd::Error naming the file, this conversation
    // unchanged: as KvCache::load for the cache, format for a ".chat" file that is not one, is
    // truncated, corrupted (checksum) or disagrees with the cache (ids), capacity when it does not
    // fit this session's cache.
    void load(const std::string& path);

    const std::vector<ChatMessage>& messages() const { return messages_; }
    const ChatFormat& format() const { return format_; }
    Session& session() { return session_; }
    const Session& session() const { return session_; }

private:
    std::shared_ptr<const Model> model_;
    ChatFormat format_;
    ChatOptions chat_;
    std::vector<ChatMessage> messages_; // the system message (if any), then user/assistant turns
    size_t n_system_ = 0;
    Session session_;
};

} // namespace rwd
