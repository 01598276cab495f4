// A session is one sequence being written: its tokens and the KV cache of all of them but the
// newest (held back: its logits are where the next generation starts, so no token is ever run
// twice). A caller appends text, generates, appends more and generates again, and the processed
// prefix is reused every time. A session borrows a Context for each call that runs the model, so
// many sessions share one context (a server, the C API) and a session outlives any context.
// Generation is plain decoding unless a Continuation is given: speculate/ supplies the
// speculative one (rewind/speculate/speculative_session.h), so the runtime never knows who guesses.
// Threads: a Session belongs to one thread at a time, as does the Context it borrows.
#pragma once
#include <memory>
#include <span>
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
    // but the last. `constraint` (null: none) restricts the generated tokens as generate_plain's
    // does. Throws rwd::Error, before running anything, on invalid options.
    virtual GenerateResult continue_tokens(Context& ctx, KvCache& cache, const std::vector<TokenId>& tokens,
                                           const TokenCallback& on_token, TokenConstraint* constraint) = 0;
};

class Session {
public:
    // An empty session. Throws rwd::Error as KvCache does for `cache` (and argument on a null model).
    Session(std::shared_ptr<const Model> model, KvCacheOptions cache = {});
    // A session over a cache that already holds `tokens` but the newest (a saved or imported
    // one). Throws rwd::Error (state) unless cache.size() == max(0, n - 1) for
    // the n tokens, the cache belongs to `model` and n fits its capacity; (argument) on an id
    // outside the vocabulary.
    Session(std::shared_ptr<const Model> model, KvCache cache, std::vector<TokenId> tokens);

    // Tokenizes `text` (BOS only if the session is empty and the model adds one) and runs it on
    // `ctx`. The text is tokenized on its own: a token boundary always falls where it joins the
    // earlier text. Throws rwd::Error (capacity), nothing changed, if it would not fit in the cache.
    void append_text(Context& ctx, std::string_view text);
    // Runs the held-back token and all of `tokens` but the last (held back in its turn).
    // Throws rwd::Error, nothing changed, on an id outside the vocabulary (argument), overflow
    // (capacity), or a context of another model (state).
    void append_tokens(Context& ctx, std::span<const TokenId> tokens);
    // Generates from the current state (generate_plain over tokens()); generated tokens become
    // part of the session. Throws rwd::Error if the session is empty or the context runs another
    // model (state), or as generate_plain. `constraint` (null: none; not owned) restricts the
    // generated tokens from its present state, as generate_plain's does (a guidance-style gen()).
    GenerateResult generate(Context& ctx, const GenerateOptions& opts, const TokenCallback& on_token = {},
                            TokenConstraint* constraint = nullptr);
    // The same, continued by `how` (e.g. speculative decoding) instead of generate_plain.
    GenerateResult generate(Context& ctx, Continuation& how, const TokenCallback& on_token = {},
                            TokenConstraint* constraint = nullptr);
    // Keeps the first n tokens (and their cache). Throws rwd::Error (argument) unless
    // 0 <= n <= tokens().size().
    void truncate(int64_t n);

    const Model& model() const { return *model_; }
    const std::vector<TokenId>& tokens() const { return tokens_; }
    std::string text() const;
    KvCache& cache() { return cache_; }
    const KvCache& cache() const { return cache_; }

private:
    void check_context(const Context& ctx, const char* fn) const;

    std::shared_ptr<const Model> model_;
    KvCache cache_;
    std::vector<TokenId> tokens_;
};

} // namespace rwd
