// A smaller model with the target's vocabulary guesses by decoding k tokens ahead on its own KV
// cache, which is rolled back with the target's to the accepted text.
#pragma once
#include <memory>
#include <vector>

#include "rewind/context.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "rewind/speculate/guess_source.h"

namespace rwd::speculate {

struct DraftSourceOptions {
    ContextOptions context; // threads of the draft's own context
    KvType cache_type = KvType::F32;
    // Drafting stops early once the draft's most likely next token has less than this
    // probability (softmax of its raw logits): an unsure draft mostly guesses wrong, and each
    // wrong guess costs a draft pass and a verified position. 0 drafts all k (README,
    // Performance: how the default was chosen).
    float min_confidence = 0.3f;
    // Token trees (exact verification only): > 1 adds, at each drafted position, the draft's
    // next most likely tokens (up to branches - 1 of them) as leaf siblings of its pick, so a
    // pass whose chain misses can still accept the draft's second choice. The chain is then
    // ceil(k / branches) deep and the k nodes are the most likely of chain and siblings (their
    // draft probabilities are the weights). The siblings cost no draft pass: their logits are
    // the chain's. 1: a chain of k (rejection mode always drafts a chain).
    int branches = 1;
};

class DraftSource final : public GuessSource {
public:
    // `target_capacity` is the target cache's capacity: the draft must reach every position the
    // target can. Throws rwd::Error, naming both files, unless the draft's vocabulary is the
    // target's (size, every token string and kind, BOS/EOS ids: state) and its training context
    // holds target_capacity positions (capacity). Vocabularies may differ in size by at most 128
    // entries of unused padding at the end of the larger one (as Qwen2.5's 0.5B and 7B files do,
    // and as llama.cpp allows): every id both have must agree. The draft then only ever proposes
    // ids both have; its logits over padding are ignored. A null draft or min_confidence outside
    // [0, 1] throws (argument); options the draft's Context or KvCache refuse throw their codes.
    DraftSource(std::shared_ptr<const Model> draft, const Model& target, int64_t target_capacity,
                DraftSourceOptions opts = {});

    std::string_view name() const override { return "draft"; }
    void reset(const GenerationStart& start) override;
    // Decodes up to k tokens one pass at a time (fewer if the draft is unsure, see
    // DraftSourceOptions::min_confidence). Exact verification: each pick is the one the
    // target's sampler would make from the draft's logits (same options, same position-keyed
    // randomness), so sampled drafts are coupled to the target's draws. Rejection verification:
    // draws from the draft's distribution q with a stream of its own and reports q.
    void propose(std::span<const TokenId> context, int k, Proposal& out) override;
    // Cuts the draft's cache back to its longest prefix that agrees with `context`; the rest is
    // fed at the next proposal.
    void accept(std::span<const TokenId> context) override;
    // DraftSourceOptions::branches for the proposals from now on (a draft shared by requests
    // that want chains and trees). Throws rwd::Error (argument) outside [1, 64].
    void set_branches(int branches);

    const KvCache& cache() const { return cache_; }
    const Model& model() const { return ctx_.model(); }
    uint64_t tokens_processed() const { return ctx_.tokens_processed(); }

    // The randomness stream of rejection-mode draft draws (the decoder uses others).
    static constexpr uint64_t kDrawStream = 0x6472616674ull; // "draft"

private:
    void rollback_to(std::span<const TokenId> context);
    void propose_tree(std::span<const float> logits, int k, Proposal& out);

    Context ctx_;
    KvCache cache_;
    Sampler sampler_;
    VerifyMode verify_ = VerifyMode::Exact;
    std::vector<TokenId> fed_;     // the tokens in cache_, in order
    std::vector<TokenId> history_; // context + guesses, for the sampler's repetition penalty
    std::vector<TokenId> pending_; // tokens to run in the next pass
    std::vector<float> q_;
    float min_confidence_;
    int branches_;
    // A tree's draft probability of reaching each candidate, and its best-first scratch.
    std::vector<double> cand_p_;
    BestFirstScratch best_first_;
    std::vector<std::pair<float, TokenId>> top_;
    int64_t n_common_;  // ids both vocabularies have (the draft samples among these)
    int64_t n_target_;  // the target's vocabulary size (rows of reported probabilities)
};

// The most padding entries by which a draft's and a target's vocabularies may differ (llama.cpp's
// SPEC_VOCAB_MAX_SIZE_DIFFERENCE).
constexpr int64_t kMaxVocabPadding = 128;

// Throws rwd::Error unless `draft` can guess for `target` (see DraftSource), naming the first
// differing token.
void check_draft_compatible(const Model& draft, const Model& target, int64_t target_capacity);

} // namespace rwd::speculate
