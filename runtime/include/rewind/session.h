// Guidance-style use: text, tokens and KV cache kept together, so a caller can append a prompt,
// generate, append more text, generate again, and the processed prefix is reused every time.
// The newest token is held back from the cache until the next generate() (its logits are what
// generation starts from), so no token is ever run twice. Generation is plain decoding unless a
// Continuation is given: speculate/ supplies a speculative one
// (rewind/speculate/speculative_session.h), so the runtime never knows who guesses.
// Threads: a Session (with its Context, KvCache and Continuation) belongs to one thread at a time.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/context.h"
#include "rewind/generate.h"
#include "rewind/kv_cache.h"

namespace rwd {

// One way to continue a token sequence on a context and cache, for Session::generate. Plain
// decoding is built in; speculative decoding (speculate/) implements this.
class Continuation {
public:
    virtual ~Continuation() = default;
    // Continues `tokens` under generate_plain's contract: the cache holds tokens[0, cache.size())
    // with cache.size() < tokens.size(); afterwards it holds `tokens` and every generated token
    // but the last. Throws rwd::Error, before running anything, on invalid options.
    virtual GenerateResult continue_tokens(Context& ctx, KvCache& cache, const std::vector<TokenId>& tokens,
                                           const TokenCallback& on_token) = 0;
};

struct SessionOptions {
    ContextOptions context;
    KvCacheOptions cache;
};

class Session {
public:
    // Throws rwd::Error as Context and KvCache do for opts.context and opts.cache.
    Session(std::shared_ptr<const Model> model, SessionOptions opts = {});

    // Tokenizes `text` (BOS only if the session is empty and the model adds one) and runs it.
    // The text is tokenized on its own: a token boundary always falls where it joins the
    // earlier text. Throws rwd::Error (capacity), nothing changed, if it would not fit in the cache.
    void append_text(std::string_view text);
    // Runs the held-back token and all of `tokens` but the last (held back in its turn).
    // Throws rwd::Error, nothing changed, on an id outside the vocabulary (argument) or overflow
    // (capacity).
    void append_tokens(const std::vector<TokenId>& tokens);
    // Generates from the current state (generate_plain over tokens()); generated tokens become
    // part of the session. Throws rwd::Error if the session is empty (state), or as
    // generate_plain.
    GenerateResult generate(const GenerateOptions& opts, const TokenCallback& on_token = {});
    // The same, continued by `how` (e.g. speculative decoding) instead of generate_plain.
    GenerateResult generate(Continuation& how, const TokenCallback& on_token = {});

    const std::vector<TokenId>& tokens() const { return tokens_; }
    std::string text() const;
    KvCache& cache() { return cache_; }
    Context& context() { return ctx_; }

private:
    Context ctx_;
    KvCache cache_;
    std::vector<TokenId> tokens_;
};

} // namespace rwd
