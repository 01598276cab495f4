// Session: tokens and KV cache kept together so appended text and generated tokens are each run
// exactly once. Invariant: the cache holds tokens_ minus the newest token (held back).
#include "rewind/session.h"

#include <algorithm>
#include <string>

#include "rewind/error.h"

namespace rwd {

namespace {
const Model& model_of(const std::shared_ptr<const Model>& m) {
    if (!m) throw Error("session: no model");
    return *m;
}
} // namespace

Session::Session(std::shared_ptr<const Model> model, KvCacheOptions cache)
    : model_(std::move(model)), cache_(model_of(model_), cache) {}

Session::Session(std::shared_ptr<const Model> model, KvCache kv, std::vector<TokenId> ids)
    : model_(std::move(model)), cache_(std::move(kv)), tokens_(std::move(ids)) {
    const Model& m = model_of(model_);
    const KvCache& cache = cache_;
    const std::vector<TokenId>& tokens = tokens_;
    const auto n = static_cast<int64_t>(tokens.size());
    if (!cache.belongs_to(m))
        throw Error(ErrorCode::state, "session: the KV cache belongs to another model than " + m.path());
    if (std::max<int64_t>(n - 1, 0) != cache.size() || n > cache.capacity())
        throw Error(ErrorCode::state, "session: the KV cache holds " + std::to_string(cache.size()) + " positions, which " +
                                          std::to_string(n) + " ids do not match (a sequence of n ids keeps n - 1)");
    for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] >= m.n_vocab())
            throw Error("session: id " + std::to_string(i) + " is outside the vocabulary");
}

void Session::check_context(const Context& ctx, const char* fn) const {
    if (!cache_.belongs_to(ctx.model()))
        throw Error(ErrorCode::state, std::string("session: ") + fn + ": the context runs " + ctx.model().path() +
                                          ", the session belongs to " + model_->path());
}

void Session::append_text(Context& ctx, std::string_view text) {
    const AddBos bos = tokens_.empty() ? AddBos::Default : AddBos::No;
    const std::vector<TokenId> ids = model_->tokenizer().encode(text, bos, SpecialTokens::AsText);
    append_tokens(ctx, ids);
}

void Session::append_tokens(Context& ctx, std::span<const TokenId> tokens) {
    check_context(ctx, "append");
    if (tokens.empty()) return;
    const int64_t n_vocab = model_->n_vocab();
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            throw Error("session: appended token " + std::to_string(i) + " has id " + std::to_string(tokens[i]) +
                        ", outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    }
    const auto total = static_cast<int64_t>(tokens_.size() + tokens.size());
    if (total > cache_.capacity())
        throw Error(ErrorCode::capacity, "session: " + std::to_string(tokens.size()) + " more tokens after " +
                    std::to_string(tokens_.size()) + " exceed the KV cache capacity " +
                    std::to_string(cache_.capacity()));
    // Run the previously held-back token and all new ones but the last, which is held back now.
    std::vector<TokenId> run;
    run.reserve(tokens.size());
    if (!tokens_.empty()) run.push_back(tokens_.back());
    run.insert(run.end(), tokens.begin(), tokens.end() - 1);
    tokens_.reserve(static_cast<size_t>(total));
    if (!run.empty()) ctx.forward(cache_, run, Logits::None);
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

namespace {

class PlainContinuation final : public Continuation {
public:
    explicit PlainContinuation(const GenerateOptions& opts) : opts_(opts) {}
    GenerateResult continue_tokens(Context& ctx, KvCache& cache, const std::vector<TokenId>& tokens,
                                   const TokenCallback& on_token, TokenConstraint* constraint) override {
        return generate_plain(ctx, cache, tokens, opts_, on_token, constraint);
    }

private:
    const GenerateOptions& opts_;
};

} // namespace

GenerateResult Session::generate(Context& ctx, const GenerateOptions& opts, const TokenCallback& on_token,
                                 TokenConstraint* constraint) {
    PlainContinuation plain(opts);
    return generate(ctx, plain, on_token, constraint);
}

GenerateResult Session::generate(Context& ctx, Continuation& how, const TokenCallback& on_token,
                                 TokenConstraint* constraint) {
    if (tokens_.empty()) throw Error(ErrorCode::state, "session: nothing to generate from (append a prompt first)");
    check_context(ctx, "generate");
    GenerateResult r = how.continue_tokens(ctx, cache_, tokens_, on_token, constraint);
    tokens_.insert(tokens_.end(), r.tokens.begin(), r.tokens.end());
    return r;
}

void Session::truncate(int64_t n) {
    const auto size = static_cast<int64_t>(tokens_.size());
    if (n < 0 || n > size)
        throw Error("session: cannot keep " + std::to_string(n) + " of " + std::to_string(size) + " tokens");
    cache_.truncate(std::max<int64_t>(n - 1, 0));
    tokens_.resize(static_cast<size_t>(n));
}

std::string Session::text() const { return model_->tokenizer().decode(tokens_); }

} // namespace rwd
