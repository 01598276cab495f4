// Guidance-style use: text, tokens and KV cache kept together, so a caller can append a prompt,
// generate, append more text, generate again, and the processed prefix is reused every time.
// The newest token is held back from the cache until the next generate() (its logits are what
// generation starts from), so no token is ever run twice.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/context.h"
#include "rewind/generate.h"
#include "rewind/kv_cache.h"

namespace rwd {

struct SessionOptions {
    ContextOptions context;
    KvCacheOptions cache;
};

class Session {
public:
    Session(std::shared_ptr<const Model> model, SessionOptions opts = {});

    // Tokenizes `text` (BOS only if the session is empty and the model adds one) and runs it.
    // The text is tokenized on its own: a token boundary always falls where it joins the
    // earlier text. Throws rwd::Error, nothing changed, if it would not fit in the cache.
    void append_text(std::string_view text);
    // Runs the held-back token and all of `tokens` but the last (held back in its turn).
    // Throws rwd::Error, nothing changed, on an id outside the vocabulary or overflow.
    void append_tokens(const std::vector<TokenId>& tokens);
    // Generates from the current state (generate_plain over tokens()); generated tokens become
    // part of the session. Throws rwd::Error if the session is empty.
    GenerateResult generate(const GenerateOptions& opts, const TokenCallback& on_token = {});

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
