// generate_speculative: propose -> one forward pass over [pending token, guesses] -> DecodeState
// judges the rows in order and rolls the cache back to the emitted prefix.
#include "rewind/speculate/decoder.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "rewind/error.h"
#include "rewind/speculate/forced_source.h"
#include "tree_budget.h"

namespace rwd::speculate {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

} // namespace

std::string format_stats(const DecodeStats& s) {
    char buf[512];
    std::string out;
    std::snprintf(buf, sizeof buf,
                  "speculation: %lld passes, %lld tokens (%.2f per pass), %lld/%lld guesses accepted (%.1f%%), "
                  "%lld passes without a guess\n",
                  static_cast<long long>(s.passes), static_cast<long long>(s.emitted), s.tokens_per_pass(),
                  static_cast<long long>(s.accepted), static_cast<long long>(s.proposed), 100.0 * s.acceptance_rate(),
                  static_cast<long long>(s.empty_passes));
    out += buf;
    if (s.tree_passes > 0) {
        std::snprintf(buf, sizeof buf, "trees: %lld of %lld passes branched, %.2f guesses verified and %.2f deep per pass\n",
                      static_cast<long long>(s.tree_passes), static_cast<long long>(s.passes), s.guesses_per_pass(),
                      s.mean_depth());
        out += buf;
    }
    if (s.forced_proposed > 0) {
        std::snprintf(buf, sizeof buf, "forced text: %lld/%lld forced guesses accepted\n",
                      static_cast<long long>(s.forced_accepted), static_cast<long long>(s.forced_proposed));
        out += buf;
    }
    std::snprintf(buf, sizeof buf, "time: propose %.2f ms, verify %.2f ms, prompt %.2f ms, total %.2f ms\n",
                  1e3 * s.propose_seconds, 1e3 * s.verify_seconds, 1e3 * s.prompt_seconds, 1e3 * s.total_seconds);
    out += buf;
    out += "accepted by depth:";
    for (size_t i = 0; i < s.proposed_at.size() && s.proposed_at[i] > 0; ++i) {
        std::snprintf(buf, sizeof buf, " %zu:%lld/%lld", i + 1, static_cast<long long>(s.accepted_at[i]),
                      static_cast<long long>(s.proposed_at[i]));
        out += buf;
    }
    out += '\n';
    return out;
}

namespace {

// One speculative generation over a target context and cache (generate_speculative's body).
class SpeculativeDecoder {
public:
    // Keeps references to target, cache and source; all must outlive the decoder.
    SpeculativeDecoder(Context& target, KvCache& cache, GuessSource& source, const SpeculativeOptions& opts);
    SpeculativeResult generate(const std::vector<TokenId>& prompt, const TokenCallback& on_token,
                               TokenConstraint* constraint);

private:
    Context& ctx_;
    KvCache& cache_;
    GuessSource& given_;                   // the caller's source
    std::unique_ptr<ForcedSource> forced_; // given_ behind forced text, under a constraint
    const SpeculativeOptions& opts_;
    DecodeState seq_;   // the verification core
    Proposal proposal_; // reused: nothing is allocated per token once warm
    TreeBudget budget_; // KPolicy::Cost's pass sizing
};

// The decoder's guesses per pass: k, but never more than a pass of max_batch rows can verify.
Speculation speculation_of(const SpeculativeOptions& o, const Context& target) {
    if (o.k < 1 || o.k > SpeculativeOptions::kMaxK)
        throw Error("speculative decoding: k must be in [1, " + std::to_string(SpeculativeOptions::kMaxK) + "], got " +
                    std::to_string(o.k));
    const auto k_max = static_cast<int>(std::min<int64_t>(o.k, target.options().max_batch - 1));
    return Speculation{.k_max = std::max(k_max, 0), .k_policy = o.k_policy, .verify = o.verify};
}

SpeculativeDecoder::SpeculativeDecoder(Context& target, KvCache& cache, GuessSource& source,
                                       const SpeculativeOptions& opts)
    : ctx_(target), cache_(cache), given_(source), opts_(opts),
      seq_(target.model(), opts_.generate, cache.capacity(), speculation_of(opts_, target)),
      budget_(opts_.pass_seconds, ExpertShape{target.model().hparams().n_layer, target.model().hparams().n_expert,
                                              target.model().hparams().n_expert_used}) {
    if (!cache_.belongs_to(target.model()))
        throw Error(ErrorCode::state, "speculative decoding: the KV cache was built for another model");
    // Lossless means a verified token's logits equal those of plain decoding; only Exact
    // numerics give the same bits whatever the pass size.
    if (target.options().numerics != Numerics::Exact)
        throw Error(ErrorCode::state, "speculative decoding: the target context uses Numerics::LlamaCpp, whose results change "
                    "with the pass size; speculation needs Numerics::Exact");
}

SpeculativeResult SpeculativeDecoder::generate(const std::vector<TokenId>& prompt, const TokenCallback& on_token,
                                               TokenConstraint* constraint) {
    const auto t_start = Clock::now();
    const auto P = static_cast<int64_t>(prompt.size());
    const int64_t n0 = cache_.size();
    check_prompt(ctx_.model(), prompt, n0, cache_.capacity(), "speculative decoding");
    seq_.start(prompt, constraint);
    GuessSource& source = with_forced(given_, constraint, forced_);
    DecodeStats& st = seq_.stats();
    SpeculativeResult res;

    // Prefill all but the last prompt token: that one rides along with the first guesses.
    if (P - n0 > 1)
        ctx_.forward(cache_, std::span<const TokenId>(prompt).subspan(static_cast<size_t>(n0), static_cast<size_t>(P - n0 - 1)),
                     Logits::None);
    res.prompt_tokens = P - n0;
    res.prompt_seconds = st.prompt_seconds = seconds_since(t_start);
    if (seq_.nothing_to_generate(P)) { // as generate_plain: nothing can be generated
        res.prompt_tokens = P - n0 - 1;
        res.stop = seq_.stop();
        st.total_seconds = seconds_since(t_start);
        res.stats = st;
        return res;
    }
    const auto t_gen = Clock::now();
    {
        const auto t = Clock::now();
        source.reset(GenerationStart{seq_.tokens(), opts_.verify, opts_.generate.sampler, constraint});
        st.propose_seconds += seconds_since(t);
    }
    while (!seq_.done()) {
        const int64_t pc = cache_.size(); // the pending token seq_.tokens().back() goes here
        int room = seq_.room(pc, SpeculativeOptions::kMaxK);
        proposal_.clear();
        if (room >= 1) {
            const auto t = Clock::now();
            source.propose(seq_.tokens(), room, proposal_);
            if (opts_.k_policy == KPolicy::Cost) room = budget_.choose(proposal_, st, room);
            st.propose_seconds += seconds_since(t);
        }
        const auto t_verify = Clock::now();
        const auto rows = seq_.begin_pass(pc, proposal_.tokens, proposal_.parents, proposal_.probs, room, source.name(),
                                          proposal_.forced);
        const std::span<const float> logits =
            seq_.parents().empty() ? ctx_.forward(cache_, rows, Logits::All) : ctx_.forward_tree(cache_, rows, seq_.parents());
        const double t_pass = seconds_since(t_verify);
        const int accepted = seq_.judge(logits, on_token);
        seq_.commit(cache_);
        st.verify_seconds += seconds_since(t_verify);
        budget_.observe(static_cast<int>(rows.size()), t_pass, accepted, static_cast<double>(ctx_.experts_read()));
        {
            // After the last pass too: a source that remembers outputs (suffix) sees all of it.
            const auto t = Clock::now();
            source.accept(seq_.tokens());
            st.propose_seconds += seconds_since(t);
        }
        if (opts_.on_pass)
            opts_.on_pass(PassReport{cache_, seq_.tokens(), static_cast<int>(seq_.guesses()), accepted, room});
    }
    res.tokens.assign(seq_.generated().begin(), seq_.generated().end());
    res.logprobs.assign(seq_.logprobs().begin(), seq_.logprobs().end());
    res.stop = seq_.stop();
    res.generate_seconds = seconds_since(t_gen);
    st.total_seconds = seconds_since(t_start);
    res.stats = st;
    return res;
}

} // namespace

SpeculativeResult generate_speculative(Context& target, KvCache& cache, const std::vector<TokenId>& prompt,
                                       GuessSource& source, const SpeculativeOptions& opts,
                                       const TokenCallback& on_token, TokenConstraint* constraint) {
    SpeculativeDecoder dec(target, cache, source, opts);
    return dec.generate(prompt, on_token, constraint);
}

} // namespace rwd::speculate
