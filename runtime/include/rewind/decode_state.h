// The one verification core: a sequence's decoding state (tokens, sampler, stop rules, guess
// budget, statistics) and its judge-then-commit step. Plain, speculative and batched decoding
// all decode through it, so they decide, stop and count exactly alike.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rewind/constraint.h"
#include "rewind/generate.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "rewind/sampler.h"

namespace rwd {

// How guesses are judged.
enum class VerifyMode {
    Exact,     // a guess stands iff it is the token the target's sampler picks there: output is
               // bit-identical to plain decoding
    Rejection, // speculative sampling (accept x with probability min(1, p(x)/q(x))): output has
               // the target's distribution, not plain decoding's exact tokens
};
const char* verify_mode_name(VerifyMode m);

// How many guesses each pass asks for. Only the pass structure depends on it, never the output.
enum class KPolicy {
    Fixed,     // always k
    Adaptive,  // starts at 1; a pass that accepts all k_cur guesses grows k_cur by 1; a miss
               // after a accepted guesses sets k_cur to a + 1 (what would have sufficed);
               // always within [1, k]. Passes where the source ran out of guesses (fewer than
               // k_cur) leave k_cur alone: they say nothing about acceptance. Deterministic. A
               // tree counts as the chain of its depth.
    Cost,      // up to k, as many of the source's guesses (chain or tree) as pay for the pass
               // time their rows add: the speculative decoder ranks them by their chance to stand
               // (the source's weights, or the run's acceptance by depth) and keeps the best
               // ones that maximise expected tokens per second of a pass, from the cost of a pass
               // over n rows (given, or measured as it runs). Only the pass structure changes.
               // The batch decoder sizes passes with BatchOptions::cost_model instead (Fixed here).
};
const char* k_policy_name(KPolicy p);

// Per-generation statistics. A "pass" is one forward pass after the prompt that yields tokens.
struct DecodeStats {
    int64_t passes = 0;
    int64_t proposed = 0;       // guesses verified
    int64_t accepted = 0;       // guesses the target agreed with
    int64_t emitted = 0;        // tokens output (accepted guesses + the target's own), after stops
    int64_t empty_passes = 0;   // passes with no guess (the source had none): plain decode steps
    std::vector<int64_t> proposed_at; // [i]: passes that verified a guess at depth i + 1 (index i of a chain)
    std::vector<int64_t> accepted_at; // [i]: passes that accepted a guess at depth i + 1
    int64_t tree_passes = 0;    // passes whose guesses branched (a tree, not a chain)
    int64_t depth_sum = 0;      // over passes: the depth of the verified guesses (a chain's length)
    int64_t forced_proposed = 0; // of `proposed`: guesses that were text a constraint forces
    int64_t forced_accepted = 0; // of `accepted`: forced guesses that stood
    double prompt_seconds = 0;  // prompt prefill (all but the last prompt token)
    double propose_seconds = 0; // inside the guess source (propose + accept)
    double verify_seconds = 0;  // target forward passes and the accept/reject decisions
    double total_seconds = 0;   // the whole call, prompt included

    double acceptance_rate() const { return proposed ? static_cast<double>(accepted) / static_cast<double>(proposed) : 0.0; }
    double tokens_per_pass() const { return passes ? static_cast<double>(emitted) / static_cast<double>(passes) : 0.0; }
    double guesses_per_pass() const { return passes ? static_cast<double>(proposed) / static_cast<double>(passes) : 0.0; }
    double mean_depth() const { return passes ? static_cast<double>(depth_sum) / static_cast<double>(passes) : 0.0; }
};

// How a sequence speculates: at most k_max guesses a pass (0: plain decoding), how many of them
// each pass asks for, and how they are judged.
struct Speculation {
    int k_max = 0;
    KPolicy k_policy = KPolicy::Fixed;
    VerifyMode verify = VerifyMode::Exact;
};

// Throws rwd::Error, naming `who`, unless `prompt` can start a generation on a cache holding its
// first `cached` tokens with room for `capacity` positions: argument (empty, an id outside the
// vocabulary), state (cached >= prompt size: at least the last prompt token must be run),
// capacity (the prompt does not fit).
void check_prompt(const Model& model, std::span<const TokenId> prompt, int64_t cached, int64_t capacity,
                  const char* who);

// One sequence being decoded. A pass runs [pending token, guesses...] from position pc of the
// sequence's cache (the pending token is tokens().back(), the last token decided and not yet in
// the cache). The guesses are a chain (at pc + 1, pc + 2, ...) or a tree (parents(): each guess
// at pc + its depth, verified by Context::forward_tree); judge() walks down from the pending
// token, emitting the token decided at each position and moving to the guess that holds it,
// until no guess does (or a stop rule hits); commit() then keeps the emitted path in the cache
// (all but the newest emitted token, which is the next pass's pending one): a truncation for a
// chain, KvCache::keep_path for a tree. The first pass after a prompt may instead be the
// prompt's last row alone (Logits::Last): it is judged like a pass without guesses.
// Under a constraint (start()'s `constraint`), every position is decided among the tokens the
// constraint allows there (the sampler's step 0), the constraint advances with each emitted
// token (the accepted path only), and begin_pass cuts the guesses it forbids. An end-of-generation
// token (allowed where the text is complete) is never passed to TokenConstraint::accept: it ends
// the generation (StopReason::EndOfGeneration) even when stop_at_eog is off. Greedy decoding
// (without processed logprobs) builds the mask only where the constraint refuses the unmasked
// argmax: where it allows it, that token is the masked argmax too (Sampler::greedy_unmasked).
// Threads: belongs to one thread at a time. Allocates only while tokens() grows beyond what
// start() reserved.
class DecodeState {
public:
    // Throws rwd::Error (argument) on invalid sampler options, negative max_tokens, an empty stop
    // string, logprobs.top_n outside [0, LogprobOptions::kMaxTop], or spec.k_max outside [0, kMaxK].
    DecodeState(const Model& model, const GenerateOptions& opts, int64_t capacity, Speculation spec = {});

    static constexpr int kMaxK = 255;

    // A new generation from `prompt` (checked by the caller: check_prompt). Clears the stop
    // rules' progress and sizes the statistics; keeps the k controller's state only between the
    // passes of one generation. `constraint` (null: none; not owned, it must outlive the
    // generation) constrains the generated tokens from its present state (a fresh constraint
    // constrains the whole output; it is not reset here) and is advanced past each emitted token
    // but an end-of-generation one.
    void start(std::span<const TokenId> prompt, TokenConstraint* constraint = nullptr);

    // Nothing can be generated from the prompt (max_tokens 0, or a prompt filling the cache):
    // the stop reason then is final (MaxTokens or ContextFull) and done() is true.
    bool nothing_to_generate(int64_t prompt_size);

    // Guesses the next pass may verify when the pending token goes to position `pc`: the k
    // controller's choice, every guess landing inside the cache, and no more than the tokens
    // still allowed (a pass emits at most guesses + 1); also at most `limit`. 0 when done.
    int room(int64_t pc, int64_t limit) const;

    // The next pass: keeps the first `room` guesses (in the source's order, which puts parents
    // first) minus any whose id is outside the vocabulary or that the constraint forbids after
    // its ancestors (they could never stand), and their descendants, and returns the
    // pass's rows [pending, kept guesses...]. `parents` is empty (a chain) or one per guess in
    // [-1, i) (-1: follows the pending token); a tree's rows come in depth-first order (each
    // node's children in the source's order), so a path's rows are runs of consecutive rows. In
    // rejection mode only the first child of each node is kept (a chain). `probs`
    // ([guesses.size(), n_vocab], or empty for point masses) is what rejection mode judges them
    // by; it is read, not copied, so it must stay valid until judge() returns. `pc` is the cache
    // position of the pending token. Throws rwd::Error (shape) naming `source` if probs or
    // parents has another size or a parent is outside [-1, i). The span stays valid until the
    // next call. The first `forced` guesses are forced text (counted apart in the statistics).
    std::span<const TokenId> begin_pass(int64_t pc, std::span<const TokenId> guesses, std::span<const int32_t> parents,
                                        std::span<const float> probs, int room,
                                        std::string_view source = "guess source", int forced = 0);
    // Fewer guesses than begin_pass kept (a batch trims them): keeps the first `m` in the
    // source's order (a tree stays a tree).
    void keep_guesses(size_t m);
    size_t guesses() const { return rows_.size() - 1; }
    std::span<const TokenId> rows() const { return rows_; }
    // The rows' parents for Context::forward_tree ([rows], row 0's is -1), or empty when the
    // rows are a chain (Context::forward).
    std::span<const int32_t> parents() const {
        return chain_ ? std::span<const int32_t>() : std::span<const int32_t>(row_parent_);
    }

    // Judges the pass's rows from their logits ([rows, n_vocab], row 0 the pending token's) from
    // the pending token down: pushes each decided token (through the stop rules and `on_token`,
    // whose false ends the generation with StopReason::Cancelled) and moves to the guess holding
    // it, until none does or a stop hits. Updates the statistics and the k controller (a tree
    // counts as the chain of its depth). Returns the guesses accepted.
    int judge(std::span<const float> logits, const TokenCallback& on_token = {});
    // Keeps the emitted path of the last judged pass in `cache`: pc + emitted positions.
    void commit(KvCache& cache) const;
    // Tokens the last judged pass emitted.
    int64_t emitted_last() const { return emitted_; }

    // Ends the generation before its next pass (StopReason::Cancelled).
    void cancel();

    bool done() const { return done_; }
    StopReason stop() const { return stop_; }
    const std::vector<TokenId>& tokens() const { return tokens_; } // prompt + every emitted token
    std::span<const TokenId> generated() const {
        return std::span<const TokenId>(tokens_).subspan(prompt_size_);
    }
    // One per generated token when the options asked for log-probabilities, else empty.
    std::span<const TokenLogprob> logprobs() const { return logprobs_; }
    DecodeStats& stats() { return stats_; }
    const DecodeStats& stats() const { return stats_; }

    // Randomness streams of rejection mode, distinct from the sampler's and a draft's.
    static constexpr uint64_t kAcceptStream = 0x616363657074ull; // "accept"
    static constexpr uint64_t kResidualStream = 0x7265736964ull; // "resid"

private:
    // The token decided at position `pos` from logits `row` of row `cur`. Returns the child row
    // of `cur` that holds it, or -1 when no guess stands.
    int32_t decide(const float* row, int64_t pos, size_t cur, TokenId& out);
    // rows_ and its tree from the first m kept candidates.
    void build_rows(size_t m);
    // Drops the candidates the constraint refuses after their ancestors (and their descendants),
    // walking them depth first with snapshot/rollback; the constraint ends where it started.
    void cut_forbidden();
    // Fills mask_ from the constraint: the mask of the next position.
    std::span<const uint32_t> next_mask();
    // Greedy under a constraint without a full mask, when the unmasked argmax is allowed (see
    // decode_state.cpp); false, the constraint unchanged, when the mask must decide.
    bool decide_lazily(const float* row, int32_t first, TokenId& out);
    bool eog(TokenId t) const { return model_.tokenizer().is_eog(t); }
    bool push(TokenId t, int64_t pos, const TokenCallback& on_token);
    void observe_k(int proposed, int accepted);

    const Model& model_;
    int64_t max_tokens_;
    int64_t capacity_;
    Speculation spec_;
    Sampler sampler_;
    StopChecker checker_;
    std::vector<TokenId> tokens_;
    size_t prompt_size_ = 0;
    std::vector<TokenId> rows_;   // [1 + guesses] this pass
    std::span<const float> probs_; // [guesses, n_vocab] or empty: the caller's, valid through judge()
    // The usable guesses in the source's order: token, parent (-1: the pending token) and index
    // in the proposal (its probs row). Rebuilt into rows each pass.
    std::vector<TokenId> cand_tok_;
    std::vector<int32_t> cand_par_, cand_src_;
    // This pass's tree over rows: parent row (row 0: -1), first child and next sibling rows
    // (-1: none), each row's proposal index (row 0: -1) and depth; the accepted path's rows.
    std::vector<int32_t> row_parent_, first_child_, next_sibling_, row_src_, row_depth_, path_;
    std::vector<int32_t> stack_, cand_row_; // build_rows scratch
    bool chain_ = true;
    int max_depth_ = 0;
    int forced_ = 0; // this pass's guesses with a proposal index below it are forced text
    int64_t pc_ = 0, emitted_ = 0;
    int k_cur_ = 0;
    bool done_ = false;
    StopReason stop_ = StopReason::MaxTokens;
    DecodeStats stats_;
    std::vector<float> p_, residual_; // rejection mode scratch [n_vocab]
    TokenConstraint* constraint_ = nullptr;     // this generation's, or null
    std::vector<uint32_t> mask_;                // [(n_vocab + 31) / 32] the next position's allowed tokens
    std::vector<TokenConstraint::Snapshot> snap_; // cut_forbidden: each candidate's state after it
    std::vector<int32_t> alive_;                // cut_forbidden: candidate kept (1) or not, then its new index
    LogprobOptions lp_opts_;
    std::vector<TokenLogprob> logprobs_;        // [generated] when lp_opts_.enabled
    std::span<const uint32_t> last_mask_;       // the mask decide() used (logprobs of processed rows)
    bool lazy_ = false;     // greedy, no processed logprobs: masks only where the argmax is refused
    bool advanced_ = false; // decide() already advanced the constraint past the token it chose
    void record_logprob(const float* row, TokenId t);
};

} // namespace rwd
