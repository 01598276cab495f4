// Session: tokens and KV cache kept together so appended text and generated tokens are each run
// exactly once. Invariant: the cache holds tokens_ minus the newest token (held back).
#include "rewind/session.h"

#include <string>

#include "rewind/error.h"

namespace rwd {

Session::Session(std::shared_ptr<const Model> model, SessionOptions opts)
    : ctx_(model, opts.context), cache_(ctx_.model(), opts.cache) {}

void Session::append_text(std::string_view text) {
    const AddBos bos = tokens_.empty() ? AddBos::Default : AddBos::No;
    append_tokens(ctx_.model().tokenizer().encode(text, bos, SpecialTokens::AsText));
}

void Session::append_tokens(const std::vector<TokenId>& tokens) {
    if (tokens.empty()) return;
    const int64_t n_vocab = ctx_.model().n_vocab();
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
    if (!run.empty()) ctx_.forward(cache_, run, Logits::None);
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

namespace {

class PlainContinuation final : public Continuation {
public:
    explicit PlainContinuation(const GenerateOptions& opts) : opts_(opts) {}
    GenerateResult continue_tokens(Context& ctx, KvCache& cache, const std::vector<TokenId>& tokens,
                                   const TokenCallback& on_token) override {
        return generate_plain(ctx, cache, tokens, opts_, on_token);
    }

private:
    const GenerateOptions& opts_;
};

} // namespace

GenerateResult Session::generate(const GenerateOptions& opts, const TokenCallback& on_token) {
    PlainContinuation plain(opts);
    return generate(plain, on_token);
}

GenerateResult Session::generate(Continuation& how, const TokenCallback& on_token) {
    if (tokens_.empty()) throw Error(ErrorCode::state, "session: nothing to generate from (append a prompt first)");
    GenerateResult r = how.continue_tokens(ctx_, cache_, tokens_, on_token);
    tokens_.insert(tokens_.end(), r.tokens.begin(), r.tokens.end());
    return r;
}

std::string Session::text() const { return ctx_.model().tokenizer().decode(tokens_); }

} // namespace rwd
