// SpeculativeDecoder: propose -> one forward pass over [pending token, guesses] -> judge rows in
// order through the shared StopChecker -> truncate the cache to the emitted prefix.
#include "rewind/speculate/decoder.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "k_controller.h"
#include "rewind/error.h"

namespace rwd::speculate {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

} // namespace

const char* k_policy_name(KPolicy p) {
    switch (p) {
    case KPolicy::Fixed: return "fixed";
    case KPolicy::Adaptive: return "adaptive";
    }
    return "?";
}

std::string format_stats(const SpecStats& s) {
    char buf[512];
    std::string out;
    std::snprintf(buf, sizeof buf,
                  "speculation: %lld passes, %lld tokens (%.2f per pass), %lld/%lld guesses accepted (%.1f%%), "
                  "%lld passes without a guess\n",
                  static_cast<long long>(s.passes), static_cast<long long>(s.emitted), s.tokens_per_pass(),
                  static_cast<long long>(s.accepted), static_cast<long long>(s.proposed), 100.0 * s.acceptance_rate(),
                  static_cast<long long>(s.empty_passes));
    out += buf;
    std::snprintf(buf, sizeof buf, "time: propose %.2f ms, verify %.2f ms, prompt %.2f ms, total %.2f ms\n",
                  1e3 * s.propose_seconds, 1e3 * s.verify_seconds, 1e3 * s.prompt_seconds, 1e3 * s.total_seconds);
    out += buf;
    out += "accepted by guess index:";
    for (size_t i = 0; i < s.proposed_at.size() && s.proposed_at[i] > 0; ++i) {
        std::snprintf(buf, sizeof buf, " %zu:%lld/%lld", i + 1, static_cast<long long>(s.accepted_at[i]),
                      static_cast<long long>(s.proposed_at[i]));
        out += buf;
    }
    out += '\n';
    return out;
}

SpeculativeDecoder::SpeculativeDecoder(Context& target, KvCache& cache, GuessSource& source, SpeculativeOptions opts)
    : ctx_(target), cache_(cache), source_(source), opts_(std::move(opts)),
      sampler_(opts_.generate.sampler, target.model().n_vocab()) {
    if (opts_.k < 1 || opts_.k > SpeculativeOptions::kMaxK)
        throw Error("speculative decoding: k must be in [1, " + std::to_string(SpeculativeOptions::kMaxK) + "], got " +
                    std::to_string(opts_.k));
    if (!cache_.belongs_to(target.model()))
        throw Error(ErrorCode::state, "speculative decoding: the KV cache was built for another model");
    // Lossless means a verified token's logits equal those of plain decoding; only Exact
    // numerics give the same bits whatever the pass size.
    if (target.options().numerics != Numerics::Exact)
        throw Error(ErrorCode::state, "speculative decoding: the target context uses Numerics::LlamaCpp, whose results change "
                    "with the pass size; speculation needs Numerics::Exact");
}

bool SpeculativeDecoder::judge(const float* row, int64_t pos, int i, TokenId& out) {
    const int m = static_cast<int>(batch_.size()) - 1;
    if (i >= m || opts_.verify == VerifyMode::Exact) {
        out = sampler_.sample(row, pos, tokens_);
        return i < m && out == proposal_.tokens[static_cast<size_t>(i)];
    }
    // Speculative sampling: keep guess x with probability min(1, p(x)/q(x)); otherwise draw from
    // normalise(max(0, p - q)). A source without distributions proposed x with q = one-hot(x).
    const TokenId x = proposal_.tokens[static_cast<size_t>(i)];
    const auto n_vocab = static_cast<size_t>(ctx_.model().n_vocab());
    sampler_.distribution(row, tokens_, p_);
    const float* q = proposal_.probs.empty() ? nullptr : proposal_.probs.data() + static_cast<size_t>(i) * n_vocab;
    const double px = p_[static_cast<size_t>(x)];
    const double qx = q ? q[x] : 1.0;
    const double u = counter_uniform(opts_.generate.sampler.seed, static_cast<uint64_t>(pos), kAcceptStream);
    if (qx > 0 && u * qx < px) {
        out = x;
        return true;
    }
    residual_.resize(n_vocab);
    double total = 0;
    for (size_t v = 0; v < n_vocab; ++v) {
        const float qv = q ? q[v] : (v == static_cast<size_t>(x) ? 1.0f : 0.0f);
        residual_[v] = std::max(0.0f, p_[v] - qv);
        total += residual_[v];
    }
    // p == q up to rounding: acceptance was (nearly) certain, so p itself is the right fallback.
    out = sampler_.sample_from(total > 0 ? std::span<const float>(residual_) : std::span<const float>(p_), pos,
                               kResidualStream);
    return false;
}

SpeculativeResult SpeculativeDecoder::generate(const std::vector<TokenId>& prompt, const TokenCallback& on_token) {
    const auto t_start = Clock::now();
    const Model& model = ctx_.model();
    const Tokenizer& tok = model.tokenizer();
    const auto P = static_cast<int64_t>(prompt.size());
    const int64_t n0 = cache_.size();
    const int64_t capacity = cache_.capacity();
    if (P == 0) throw Error("speculative decoding: the prompt is empty");
    if (n0 >= P)
        throw Error(ErrorCode::state, "speculative decoding: the cache already holds " + std::to_string(n0) +
                    " positions for a prompt of " + std::to_string(P) +
                    " tokens (at least the last prompt token must be run)");
    if (P > capacity)
        throw Error(ErrorCode::capacity, "speculative decoding: the prompt of " + std::to_string(P) +
                    " tokens does not fit the KV cache capacity " + std::to_string(capacity));
    for (int64_t i = 0; i < P; ++i) {
        const TokenId id = prompt[static_cast<size_t>(i)];
        if (!tok.valid(id) || id >= model.n_vocab())
            throw Error("speculative decoding: prompt token " + std::to_string(i) + " has id " + std::to_string(id) +
                        ", outside the vocabulary");
    }
    const GenerateOptions& gen = opts_.generate;
    StopChecker checker(gen, tok, capacity);

    SpeculativeResult res;
    SpecStats& st = res.stats;
    const int k_max = static_cast<int>(std::min<int64_t>(opts_.k, ctx_.options().max_batch - 1));
    st.proposed_at.assign(static_cast<size_t>(std::max(k_max, 0)), 0);
    st.accepted_at.assign(st.proposed_at.size(), 0);

    // Prefill all but the last prompt token: that one rides along with the first guesses.
    if (P - n0 > 1) ctx_.forward(cache_, std::span<const TokenId>(prompt).subspan(static_cast<size_t>(n0), static_cast<size_t>(P - n0 - 1)), Logits::None);
    res.prompt_tokens = P - n0;
    res.prompt_seconds = st.prompt_seconds = seconds_since(t_start);
    if (gen.max_tokens == 0 || P == capacity) { // as generate_plain: nothing can be generated
        res.prompt_tokens = P - n0 - 1;
        res.stop = gen.max_tokens == 0 ? StopReason::MaxTokens : StopReason::ContextFull;
        st.total_seconds = seconds_since(t_start);
        return res;
    }
    const auto t_gen = Clock::now();

    tokens_.assign(prompt.begin(), prompt.end());
    tokens_.reserve(static_cast<size_t>(std::min(P + gen.max_tokens, capacity) + k_max + 1));
    res.tokens.reserve(static_cast<size_t>(std::min(gen.max_tokens, capacity - P + 1)));
    {
        const auto t = Clock::now();
        source_.reset(GenerationStart{tokens_, opts_.verify, gen.sampler});
        st.propose_seconds += seconds_since(t);
    }
    const auto n_vocab = static_cast<size_t>(model.n_vocab());
    KController kc(opts_.k_policy, k_max);
    for (bool done = false; !done;) {
        const int64_t pc = cache_.size(); // the pending token tokens_.back() goes here
        const int64_t generated = static_cast<int64_t>(res.tokens.size());
        // Every guess must land on a position inside the cache, and a pass emits at most m + 1.
        const int room = static_cast<int>(std::min<int64_t>({kc.next(), capacity - 1 - pc, gen.max_tokens - generated - 1}));
        proposal_.clear();
        if (room >= 1) {
            const auto t = Clock::now();
            source_.propose(tokens_, room, proposal_);
            st.propose_seconds += seconds_since(t);
        }
        size_t m = std::min(proposal_.tokens.size(), static_cast<size_t>(std::max(room, 0)));
        if (!proposal_.probs.empty() && proposal_.probs.size() != proposal_.tokens.size() * n_vocab)
            throw Error(ErrorCode::shape, "speculative decoding: source '" + std::string(source_.name()) + "' returned " +
                        std::to_string(proposal_.probs.size()) + " probabilities for " +
                        std::to_string(proposal_.tokens.size()) + " guesses");
        for (size_t i = 0; i < m; ++i) {
            const TokenId g = proposal_.tokens[i];
            if (!tok.valid(g) || g >= model.n_vocab()) m = i; // a guess the model cannot run ends the run
        }

        const auto t_verify = Clock::now();
        batch_.clear();
        batch_.push_back(tokens_.back());
        batch_.insert(batch_.end(), proposal_.tokens.begin(), proposal_.tokens.begin() + static_cast<std::ptrdiff_t>(m));
        const std::span<const float> logits = ctx_.forward(cache_, batch_, Logits::All);
        ++st.passes;
        st.proposed += static_cast<int64_t>(m);
        if (m == 0) ++st.empty_passes;
        for (size_t i = 0; i < m; ++i) ++st.proposed_at[i];

        int accepted = 0;
        int64_t emitted = 0;
        for (size_t i = 0; i <= m; ++i) {
            const auto pos = static_cast<int64_t>(tokens_.size());
            TokenId t;
            const bool stands = judge(logits.data() + i * n_vocab, pos, static_cast<int>(i), t);
            if (stands) {
                ++accepted;
                ++st.accepted_at[i];
            }
            tokens_.push_back(t);
            res.tokens.push_back(t);
            ++emitted;
            const bool stop = checker.push(t, pos);
            const bool go_on = on_token ? on_token(t) : true;
            if (stop || !go_on) {
                res.stop = stop ? checker.reason() : StopReason::Callback;
                done = true;
                break;
            }
            if (!stands) break;
        }
        // Keep the emitted tokens but the last (it is the next pass's pending token); drops the
        // rejected guesses' K/V and anything computed past a stop.
        cache_.truncate(pc + emitted);
        st.accepted += accepted;
        st.emitted += emitted;
        st.verify_seconds += seconds_since(t_verify);

        if (!done) {
            const auto t = Clock::now();
            source_.accept(tokens_);
            st.propose_seconds += seconds_since(t);
        }
        kc.observe(static_cast<int>(m), accepted);
        if (observer_) observer_(PassReport{cache_, tokens_, static_cast<int>(m), accepted, room});
    }
    res.generate_seconds = seconds_since(t_gen);
    st.total_seconds = seconds_since(t_start);
    return res;
}

SpeculativeResult generate_speculative(Context& target, KvCache& cache, const std::vector<TokenId>& prompt,
                                       GuessSource& source, const SpeculativeOptions& opts,
                                       const TokenCallback& on_token) {
    SpeculativeDecoder dec(target, cache, source, opts);
    return dec.generate(prompt, on_token);
}

} // namespace rwd::speculate
