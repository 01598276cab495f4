// generate_speculative(Session&): a SpeculativeDecoder over the session's own context and cache,
// plugged into Session::generate through rwd::Continuation.
#include "rewind/speculate/speculative_session.h"

namespace rwd::speculate {
namespace {

class SpeculativeContinuation final : public Continuation {
public:
    SpeculativeContinuation(GuessSource& source, const SpeculativeOptions& opts) : source_(source), opts_(opts) {}

    GenerateResult continue_tokens(Context& ctx, KvCache& cache, const std::vector<TokenId>& tokens,
                                   const TokenCallback& on_token) override {
        SpeculativeDecoder dec(ctx, cache, source_, opts_); // validates before anything runs
        result = dec.generate(tokens, on_token);
        return result;
    }

    SpeculativeResult result;

private:
    GuessSource& source_;
    const SpeculativeOptions& opts_;
};

} // namespace

SpeculativeResult generate_speculative(Context& target, Session& session, GuessSource& source,
                                       const SpeculativeOptions& opts, const TokenCallback& on_token) {
    SpeculativeContinuation how(source, opts);
    session.generate(target, how, on_token);
    return std::move(how.result);
}

} // namespace rwd::speculate
