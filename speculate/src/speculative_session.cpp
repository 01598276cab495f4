// generate_speculative(Context&, Session&): generate_speculative over the session's own cache,
// plugged into Session::generate through rwd::Continuation.
#include "rewind/speculate/speculative_session.h"

namespace rwd::speculate {
namespace {

class SpeculativeContinuation final : public Continuation {
public:
    SpeculativeContinuation(GuessSource& source, const SpeculativeOptions& opts) : source_(source), opts_(opts) {}

    GenerateResult continue_tokens(Context& ctx, KvCache& cache, const std::vector<TokenId>& tokens,
                                   const TokenCallback& on_token, TokenConstraint* constraint) override {
        result = generate_speculative(ctx, cache, tokens, source_, opts_, on_token, constraint); // validates first
        return result;
    }

    SpeculativeResult result;

private:
    GuessSource& source_;
    const SpeculativeOptions& opts_;
};

} // namespace

SpeculativeResult generate_speculative(Context& target, Session& session, GuessSource& source,
                                       const SpeculativeOptions& opts, const TokenCallback& on_token,
                                       TokenConstraint* constraint) {
    SpeculativeContinuation how(source, opts);
    session.generate(target, how, on_token, constraint);
    return std::move(how.result);
}

} // namespace rwd::speculate
