// DecodeState: the judge-then-commit step every decoder shares (exact verification, speculative
// sampling, the stop rules, the k controller and the statistics), and the prompt checks.
#include "rewind/decode_state.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "rewind/error.h"

namespace rwd {

const char* verify_mode_name(VerifyMode m) {
    switch (m) {
    case VerifyMode::Exact: return "exact";
    case VerifyMode::Rejection: return "rejection";
    }
    return "?";
}

const char* k_policy_name(KPolicy p) {
    switch (p) {
    case KPolicy::Fixed: return "fixed";
    case KPolicy::Adaptive: return "adaptive";
    case KPolicy::Cost: return "cost";
    }
    return "?";
}

void check_prompt(const Model& model, std::span<const TokenId> prompt, int64_t cached, int64_t capacity,
                  const char* who) {
    const auto P = static_cast<int64_t>(prompt.size());
    if (P == 0) throw Error(std::string(who) + ": the prompt is empty");
    if (cached >= P)
        throw Error(ErrorCode::state, std::string(who) + ": the cache already holds " + std::to_string(cached) +
                                          " positions for a prompt of " + std::to_string(P) +
                                          " tokens (at least the last prompt token must be run)");
    if (P > capacity)
        throw Error(ErrorCode::capacity, std::string(who) + ": the prompt of " + std::to_string(P) +
                                             " tokens does not fit the KV cache capacity " + std::to_string(capacity));
    const Tokenizer& tok = model.tokenizer();
    for (int64_t i = 0; i < P; ++i) {
        const TokenId id = prompt[static_cast<size_t>(i)];
        if (!tok.valid(id) || id >= model.n_vocab())
            throw Error(std::string(who) + ": prompt token " + std::to_string(i) + " has id " + std::to_string(id) +
                        ", outside the vocabulary");
    }
}

namespace {
constexpr int kAdaptiveStart = 1;
} // namespace

DecodeState::DecodeState(const Model& model, const GenerateOptions& opts, int64_t capacity, Speculation spec)
    : model_(model), max_tokens_(opts.max_tokens), capacity_(capacity), spec_(spec),
      sampler_(opts.sampler, model.n_vocab()), checker_(opts, model.tokenizer(), capacity), lp_opts_(opts.logprobs) {
    if (lp_opts_.top_n < 0 || lp_opts_.top_n > LogprobOptions::kMaxTop)
        throw Error("decoding: logprobs.top_n must be in [0, " + std::to_string(LogprobOptions::kMaxTop) + "], got " +
                    std::to_string(lp_opts_.top_n));
    if (spec_.k_max < 0 || spec_.k_max > kMaxK)
        throw Error("decoding: k must be in [0, " + std::to_string(kMaxK) + "], got " + std::to_string(spec_.k_max));
    if (spec_.verify != VerifyMode::Exact && spec_.verify != VerifyMode::Rejection)
        throw Error("decoding: unknown VerifyMode value " + std::to_string(static_cast<int>(spec_.verify)));
    if (spec_.k_policy != KPolicy::Fixed && spec_.k_policy != KPolicy::Adaptive && spec_.k_policy != KPolicy::Cost)
        throw Error("decoding: unknown KPolicy value " + std::to_string(static_cast<int>(spec_.k_policy)));
    const auto R = static_cast<size_t>(spec_.k_max) + 1;
    rows_.reserve(R);
    for (auto* v : {&cand_par_, &cand_src_, &row_parent_, &first_child_, &next_sibling_, &row_src_, &row_depth_, &path_,
                    &stack_, &cand_row_})
        v->reserve(R);
    cand_tok_.reserve(R);
    snap_.reserve(R);
    alive_.reserve(R);
    mask_.resize(static_cast<size_t>((model.n_vocab() + 31) / 32));
    // Processed logprobs read the mask of every decided position, so they need it built.
    lazy_ = opts.sampler.greedy() && !(lp_opts_.enabled && lp_opts_.processed);
}

void DecodeState::start(std::span<const TokenId> prompt, TokenConstraint* constraint) {
    constraint_ = constraint;
    tokens_.assign(prompt.begin(), prompt.end());
    prompt_size_ = prompt.size();
    const auto P = static_cast<int64_t>(prompt.size());
    // (Written so that a huge max_tokens, e.g. INT64_MAX from the C API, cannot overflow.)
    const int64_t reach = max_tokens_ >= capacity_ - P ? capacity_ : P + max_tokens_;
    tokens_.reserve(static_cast<size_t>(std::max(reach, P) + spec_.k_max + 1));
    logprobs_.clear();
    if (lp_opts_.enabled) logprobs_.reserve(static_cast<size_t>(std::max<int64_t>(reach - P, 0) + spec_.k_max + 1));
    checker_.reset();
    done_ = false;
    stop_ = StopReason::MaxTokens;
    emitted_ = 0;
    stats_ = DecodeStats{};
    stats_.proposed_at.assign(static_cast<size_t>(spec_.k_max), 0);
    stats_.accepted_at.assign(static_cast<size_t>(spec_.k_max), 0);
    k_cur_ = spec_.k_policy == KPolicy::Adaptive ? std::min(spec_.k_max, kAdaptiveStart) : spec_.k_max;
}

bool DecodeState::nothing_to_generate(int64_t prompt_size) {
    if (max_tokens_ != 0 && prompt_size != capacity_) return false;
    stop_ = max_tokens_ == 0 ? StopReason::MaxTokens : StopReason::ContextFull;
    done_ = true;
    return true;
}

int DecodeState::room(int64_t pc, int64_t limit) const {
    if (done_) return 0;
    const auto generated = static_cast<int64_t>(tokens_.size() - prompt_size_);
    // Every guess must land on a position inside the cache, and a pass emits at most m + 1.
    const int64_t r = std::min<int64_t>({k_cur_, capacity_ - 1 - pc, max_tokens_ - generated - 1, limit});
    return static_cast<int>(std::max<int64_t>(r, 0));
}

std::span<const TokenId> DecodeState::begin_pass(int64_t pc, std::span<const TokenId> guesses,
                                                 std::span<const int32_t> parents, std::span<const float> probs,
                                                 int room, std::string_view source, int forced) {
    const auto n_vocab = static_cast<size_t>(model_.n_vocab());
    if (!probs.empty() && probs.size() != guesses.size() * n_vocab)
        throw Error(ErrorCode::shape, "decoding: " + std::string(source) + " returned " + std::to_string(probs.size()) +
                                          " probabilities for " + std::to_string(guesses.size()) + " guesses");
    if (!parents.empty() && parents.size() != guesses.size())
        throw Error(ErrorCode::shape, "decoding: " + std::string(source) + " returned " + std::to_string(parents.size()) +
                                          " parents for " + std::to_string(guesses.size()) + " guesses");
    const size_t m = std::min(guesses.size(), static_cast<size_t>(std::max(room, 0)));
    const Tokenizer& tok = model_.tokenizer();
    // Candidates: the first m guesses but those the model cannot run and their descendants (a
    // chain then ends at its first such guess). cand_row_[i]: guess i's candidate index, or -1.
    cand_tok_.clear();
    cand_par_.clear();
    cand_src_.clear();
    cand_row_.assign(m, -1);
    for (size_t i = 0; i < m; ++i) {
        const int32_t a = parents.empty() ? static_cast<int32_t>(i) - 1 : parents[i];
        if (a < -1 || a >= static_cast<int32_t>(i))
            throw Error(ErrorCode::shape, "decoding: " + std::string(source) + ": guess " + std::to_string(i) +
                                              " has parent " + std::to_string(a) + " (must be in [-1, " +
                                              std::to_string(i) + "))");
        const TokenId g = guesses[i];
        if (!tok.valid(g) || g >= model_.n_vocab()) continue;
        if (a >= 0 && cand_row_[static_cast<size_t>(a)] < 0) continue;
        cand_row_[i] = static_cast<int32_t>(cand_tok_.size());
        cand_tok_.push_back(g);
        cand_par_.push_back(a < 0 ? -1 : cand_row_[static_cast<size_t>(a)]);
        cand_src_.push_back(static_cast<int32_t>(i));
    }
    if (constraint_ && !cand_tok_.empty()) cut_forbidden();
    forced_ = forced;
    pc_ = pc;
    probs_ = probs;
    build_rows(cand_tok_.size());
    return rows_;
}

void DecodeState::cut_forbidden() {
    const size_t m = cand_tok_.size();
    // Children lists over candidates (node c + 1; 0 is the pending token).
    first_child_.assign(m + 1, -1);
    next_sibling_.assign(m + 1, -1);
    for (size_t c = m; c-- > 0;) {
        const auto p = static_cast<size_t>(cand_par_[c] + 1);
        next_sibling_[c + 1] = first_child_[p];
        first_child_[p] = static_cast<int32_t>(c + 1);
    }
    // Depth first: a popped node's parent is always the state reached last or one of its
    // ancestors, so every rollback goes back along the path that led to the present state.
    TokenConstraint& tc = *constraint_;
    const TokenConstraint::Snapshot s0 = tc.snapshot();
    snap_.assign(m, s0);
    alive_.assign(m, 0);
    stack_.clear();
    for (int32_t n = first_child_[0]; n >= 0; n = next_sibling_[static_cast<size_t>(n)]) stack_.push_back(n);
    while (!stack_.empty()) {
        const auto c = static_cast<size_t>(stack_.back() - 1);
        stack_.pop_back();
        const int32_t p = cand_par_[c];
        tc.rollback(p < 0 ? s0 : snap_[static_cast<size_t>(p)]);
        if (eog(cand_tok_[c])) { // allowed where the text is complete; nothing follows it (push)
            alive_[c] = tc.allows(cand_tok_[c]) ? 1 : 0;
            continue;
        }
        if (!tc.accept(cand_tok_[c])) continue; // forbidden: it and its subtree go
        alive_[c] = 1;
        snap_[c] = tc.snapshot();
        for (int32_t n = first_child_[c + 1]; n >= 0; n = next_sibling_[static_cast<size_t>(n)]) stack_.push_back(n);
    }
    tc.rollback(s0);
    // Compact in the source's order; alive_[c] becomes c's new index.
    size_t j = 0;
    for (size_t c = 0; c < m; ++c) {
        if (!alive_[c]) {
            alive_[c] = -1;
            continue;
        }
        const int32_t p = cand_par_[c];
        cand_tok_[j] = cand_tok_[c];
        cand_par_[j] = p < 0 ? -1 : alive_[static_cast<size_t>(p)];
        cand_src_[j] = cand_src_[c];
        alive_[c] = static_cast<int32_t>(j++);
    }
    cand_tok_.resize(j);
    cand_par_.resize(j);
    cand_src_.resize(j);
}

std::span<const uint32_t> DecodeState::next_mask() {
    if (!constraint_) return {};
    constraint_->fill_mask(mask_);
    return mask_;
}

void DecodeState::build_rows(size_t m) {
    // Children lists over candidates 0..m-1 (index c + 1; 0 is the pending token), in the
    // source's order: linked from the last candidate back.
    first_child_.assign(m + 1, -1);
    next_sibling_.assign(m + 1, -1);
    for (size_t c = m; c-- > 0;) {
        const auto p = static_cast<size_t>(cand_par_[c] + 1);
        next_sibling_[c + 1] = first_child_[p];
        first_child_[p] = static_cast<int32_t>(c + 1);
    }
    // Depth-first order from the pending token; in rejection mode the first children only.
    const bool branch = spec_.verify == VerifyMode::Exact;
    rows_.clear();
    rows_.push_back(tokens_.back());
    row_parent_.assign(1, -1);
    row_src_.assign(1, -1);
    row_depth_.assign(1, 0);
    cand_row_.assign(m + 1, 0); // candidate node (c + 1) -> its row
    stack_.clear();
    chain_ = true;
    max_depth_ = 0;
    for (int32_t node = first_child_[0];;) {
        if (node < 0) {
            if (stack_.empty()) break;
            node = stack_.back();
            stack_.pop_back();
            continue;
        }
        const auto c = static_cast<size_t>(node - 1);
        const int32_t prow = cand_row_[static_cast<size_t>(cand_par_[c] + 1)];
        const auto row = static_cast<int32_t>(rows_.size());
        cand_row_[static_cast<size_t>(node)] = row;
        rows_.push_back(cand_tok_[c]);
        row_parent_.push_back(prow);
        row_src_.push_back(cand_src_[c]);
        row_depth_.push_back(row_depth_[static_cast<size_t>(prow)] + 1);
        max_depth_ = std::max(max_depth_, row_depth_.back());
        chain_ = chain_ && prow == row - 1;
        if (branch && next_sibling_[static_cast<size_t>(node)] >= 0) stack_.push_back(next_sibling_[static_cast<size_t>(node)]);
        node = first_child_[static_cast<size_t>(node)];
    }
    // The same lists over rows for judge().
    const size_t R = rows_.size();
    first_child_.assign(R, -1);
    next_sibling_.assign(R, -1);
    for (size_t r = R; r-- > 1;) {
        const auto p = static_cast<size_t>(row_parent_[r]);
        next_sibling_[r] = first_child_[p];
        first_child_[p] = static_cast<int32_t>(r);
    }
}

void DecodeState::keep_guesses(size_t m) {
    if (m >= guesses()) return;
    // The first m candidates in the source's order: a parent always comes before its children.
    build_rows(std::min(m, cand_tok_.size()));
}

void DecodeState::cancel() {
    if (done_) return;
    stop_ = StopReason::Cancelled;
    done_ = true;
}

// Greedy decoding takes the argmax of the penalised logits over the allowed tokens. When the
// constraint allows the unmasked argmax, that token is the masked argmax too (Sampler::
// greedy_unmasked), so only that one token is checked; when it refuses it, the next tokens of
// greedy's ranking are checked in turn (Sampler::greedy_ranking), and the first allowed one is the
// masked argmax. A guess at this position was already checked from this very constraint state by
// cut_forbidden; an end-of-generation token is asked with allows() (it is never accepted), any
// other is accepted at once (judge then skips its accept; a refused accept changes nothing). A
// mask is built only where none of the first kRanked tokens is allowed.
bool DecodeState::decide_lazily(const float* row, int32_t first, TokenId& out) {
    auto take = [&](TokenId t) {
        bool guessed = false;
        for (int32_t c = first; c >= 0 && !guessed; c = next_sibling_[static_cast<size_t>(c)])
            guessed = rows_[static_cast<size_t>(c)] == t;
        if (!guessed) {
            if (eog(t) ? !constraint_->allows(t) : !constraint_->accept(t)) return false;
            advanced_ = !eog(t);
        }
        out = t;
        last_mask_ = {};
        return true;
    };
    const std::span<const float> values = sampler_.greedy_values(row, tokens_);
    const TokenId t = Sampler::greedy_argmax(values);
    const float value = values[static_cast<size_t>(t)];
    if (std::isnan(value) || value == -std::numeric_limits<float>::infinity()) return false; // the mask decides
    if (take(t)) return true;
    constexpr size_t kRanked = 16;
    std::array<TokenId, kRanked> ranked;
    const size_t n = Sampler::greedy_ranking(values, ranked);
    if (n == 0 || ranked[0] != t) return false; // NaN in the row: the mask decides
    for (size_t i = 1; i < n; ++i)
        if (take(ranked[i])) return true;
    return false;
}

int32_t DecodeState::decide(const float* row, int64_t pos, size_t cur, TokenId& out) {
    const int32_t first = first_child_[cur];
    advanced_ = false;
    const bool exact = first < 0 || spec_.verify == VerifyMode::Exact;
    if (exact && lazy_ && constraint_ && decide_lazily(row, first, out)) {
        for (int32_t c = first; c >= 0; c = next_sibling_[static_cast<size_t>(c)])
            if (rows_[static_cast<size_t>(c)] == out) return c;
        return -1;
    }
    const std::span<const uint32_t> mask = next_mask();
    last_mask_ = mask;
    if (exact) {
        out = sampler_.sample(row, pos, tokens_, mask);
        for (int32_t c = first; c >= 0; c = next_sibling_[static_cast<size_t>(c)])
            if (rows_[static_cast<size_t>(c)] == out) return c;
        return -1;
    }
    // Speculative sampling (a chain: one child): keep guess x with probability min(1, p(x)/q(x));
    // otherwise draw from normalise(max(0, p - q)). A source without distributions proposed x
    // with q = one-hot(x).
    const TokenId x = rows_[static_cast<size_t>(first)];
    const auto n_vocab = static_cast<size_t>(model_.n_vocab());
    sampler_.distribution(row, tokens_, p_, mask);
    const float* q =
        probs_.empty() ? nullptr : probs_.data() + static_cast<size_t>(row_src_[static_cast<size_t>(first)]) * n_vocab;
    const double px = p_[static_cast<size_t>(x)];
    const double qx = q ? q[x] : 1.0;
    const double u = counter_uniform(sampler_.options().seed, static_cast<uint64_t>(pos), kAcceptStream);
    if (qx > 0 && u * qx < px) {
        out = x;
        return first;
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
    return -1;
}

// Records t at `pos`; returns true when the generation ends after it.
bool DecodeState::push(TokenId t, int64_t pos, const TokenCallback& on_token) {
    tokens_.push_back(t);
    const bool stop = checker_.push(t, pos);
    // Under a constraint an end-of-generation token (allowed only where the text is complete)
    // always ends the generation: nothing of the language can follow it.
    const bool constrained_end = constraint_ && model_.tokenizer().is_eog(t);
    const bool go_on = on_token ? on_token(t) : true;
    if (!stop && !constrained_end && go_on) return false;
    stop_ = constrained_end ? StopReason::EndOfGeneration : stop ? checker_.reason() : StopReason::Cancelled;
    done_ = true;
    return true;
}

int DecodeState::judge(std::span<const float> logits, const TokenCallback& on_token) {
    const auto n_vocab = static_cast<size_t>(model_.n_vocab());
    const size_t m = guesses();
    if (logits.size() < (m + 1) * n_vocab)
        throw Error(ErrorCode::shape, "decoding: " + std::to_string(logits.size()) + " logits for a pass of " +
                                          std::to_string(m + 1) + " rows");
    ++stats_.passes;
    stats_.proposed += static_cast<int64_t>(m);
    if (m == 0) ++stats_.empty_passes;
    if (!chain_) ++stats_.tree_passes;
    stats_.depth_sum += max_depth_;
    for (int d = 0; d < max_depth_; ++d) ++stats_.proposed_at[static_cast<size_t>(d)];
    int accepted = 0;
    emitted_ = 0;
    path_.assign(1, 0);
    for (size_t cur = 0;;) {
        const auto pos = static_cast<int64_t>(tokens_.size());
        TokenId t;
        const int32_t next = decide(logits.data() + cur * n_vocab, pos, cur, t);
        if (lp_opts_.enabled) record_logprob(logits.data() + cur * n_vocab, t);
        // The constraint follows the emitted path (the token came from its mask, or was a guess
        // begin_pass checked against it); an end-of-generation token ends it instead (push).
        if (constraint_ && !eog(t) && !advanced_ && !constraint_->accept(t))
            throw Error(ErrorCode::state, "decoding: the constraint refused token " + std::to_string(t) +
                                              ", which its own mask allowed, at position " + std::to_string(pos));
        if (next >= 0) {
            ++stats_.accepted_at[static_cast<size_t>(accepted)];
            ++accepted;
            path_.push_back(next);
        }
        ++emitted_;
        if (push(t, pos, on_token) || next < 0) break;
        cur = static_cast<size_t>(next);
    }
    stats_.accepted += accepted;
    stats_.emitted += emitted_;
    if (forced_ > 0) {
        for (size_t r = 1; r < rows_.size(); ++r) stats_.forced_proposed += row_src_[r] < forced_ ? 1 : 0;
        for (size_t d = 1; d < path_.size(); ++d)
            stats_.forced_accepted += row_src_[static_cast<size_t>(path_[d])] < forced_ ? 1 : 0;
    }
    observe_k(max_depth_, accepted);
    return accepted;
}

// From the row that decided t (and, for the processed distribution, the mask and history it was
// decided with: tokens_ does not hold t yet).
void DecodeState::record_logprob(const float* row, TokenId t) {
    const auto n_vocab = static_cast<size_t>(model_.n_vocab());
    std::span<const float> r(row, n_vocab);
    double inv_t = 1.0;
    if (lp_opts_.processed) {
        r = sampler_.processed_logits(row, tokens_, last_mask_);
        const float temp = sampler_.options().temperature;
        if (temp > 0.0f) inv_t = 1.0 / static_cast<double>(temp);
    }
    logprobs_.emplace_back();
    compute_logprob(r, inv_t, t, lp_opts_.top_n, logprobs_.back());
}

void DecodeState::commit(KvCache& cache) const {
    // Keep the emitted tokens but the last (the next pass's pending token): drops the rejected
    // guesses' K/V and anything computed past a stop.
    if (chain_) cache.truncate(pc_ + emitted_);
    else cache.keep_path(pc_, std::span<const int32_t>(path_).first(static_cast<size_t>(emitted_)));
}

void DecodeState::observe_k(int proposed, int accepted) {
    if (spec_.k_policy != KPolicy::Adaptive || proposed == 0) return; // no guess: says nothing
    if (accepted == proposed && proposed >= k_cur_) k_cur_ = std::min(spec_.k_max, k_cur_ + 1);
    else if (accepted < proposed) k_cur_ = std::clamp(accepted + 1, 1, spec_.k_max);
}

} // namespace rwd
