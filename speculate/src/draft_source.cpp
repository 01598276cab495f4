// DraftSource: a second model decodes ahead on its own cache. Its cache holds a prefix of the
// text (plus guesses); before each proposal it is cut back to what still agrees and fed the rest
// in one pass, so a draft that sat out some passes (inside a composite) catches up cheaply.
#include "rewind/speculate/draft_source.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "rewind/error.h"

namespace rwd::speculate {

void check_draft_compatible(const Model& draft, const Model& target, int64_t target_capacity) {
    const std::string who = "draft model " + draft.path() + " for target " + target.path() + ": ";
    const Tokenizer& dt = draft.tokenizer();
    const Tokenizer& tt = target.tokenizer();
    const int64_t nd = draft.n_vocab(), nt = target.n_vocab();
    if (dt.n_vocab() != nd || tt.n_vocab() != nt)
        throw Error(ErrorCode::state, who + "a model's tokenizer and embeddings disagree in size");
    if (std::abs(nd - nt) > kMaxVocabPadding)
        throw Error(ErrorCode::state, who + "vocabulary sizes differ (" + std::to_string(nd) + " vs " + std::to_string(nt) +
                    ") by more than the " + std::to_string(kMaxVocabPadding) + " padding entries allowed");
    if (dt.model() != tt.model()) throw Error(ErrorCode::state, who + "tokenizer kinds differ");
    const int64_t common = std::min(nd, nt);
    for (TokenId id = 0; id < static_cast<TokenId>(common); ++id) {
        if (dt.piece(id) != tt.piece(id) || dt.kind(id) != tt.kind(id))
            throw Error(ErrorCode::state, who + "token " + std::to_string(id) + " differs ('" + dt.piece(id) + "' vs '" +
                        tt.piece(id) + "')");
    }
    // The larger vocabulary's extra entries must be unused padding (never produced).
    const Tokenizer& larger = nd > nt ? dt : tt;
    for (TokenId id = static_cast<TokenId>(common); id < static_cast<TokenId>(std::max(nd, nt)); ++id) {
        if (larger.kind(id) != TokenKind::Unused || larger.is_eog(id))
            throw Error(ErrorCode::state, who + "token " + std::to_string(id) + " ('" + larger.piece(id) + "') exists only in the " +
                        (nd > nt ? "draft" : "target") + "'s vocabulary and is not unused padding");
    }
    if (dt.bos() != tt.bos() || dt.eos() != tt.eos())
        throw Error(ErrorCode::state, who + "special token ids differ (BOS " + std::to_string(dt.bos()) + " vs " +
                    std::to_string(tt.bos()) + ", EOS " + std::to_string(dt.eos()) + " vs " +
                    std::to_string(tt.eos()) + ")");
    for (TokenId id = 0; id < static_cast<TokenId>(common); ++id) {
        if (dt.is_eog(id) != tt.is_eog(id))
            throw Error(ErrorCode::state, who + "end-of-generation tokens differ at id " + std::to_string(id));
    }
    if (draft.hparams().n_ctx_train < target_capacity)
        throw Error(ErrorCode::capacity, who + "its context length " + std::to_string(draft.hparams().n_ctx_train) +
                    " is smaller than the target cache's capacity " + std::to_string(target_capacity));
}

namespace {

// The softmax probability of the largest logit.
float top_probability(std::span<const float> logits) {
    const float mx = *std::max_element(logits.begin(), logits.end());
    float sum = 0.0f;
    for (float l : logits) sum += std::exp(l - mx);
    return 1.0f / sum;
}

// Validates before any member is built, so a mismatched draft never allocates a cache.
std::shared_ptr<const Model> checked(std::shared_ptr<const Model> draft, const Model& target, int64_t capacity) {
    if (!draft) throw Error("draft source: no draft model");
    check_draft_compatible(*draft, target, capacity);
    return draft;
}
} // namespace

DraftSource::DraftSource(std::shared_ptr<const Model> draft, const Model& target, int64_t target_capacity,
                         DraftSourceOptions opts)
    : ctx_(checked(std::move(draft), target, target_capacity), opts.context),
      cache_(ctx_.model(), KvCacheOptions{target_capacity, opts.cache_type}),
      sampler_(SamplerOptions{}, std::min(ctx_.model().n_vocab(), target.n_vocab())),
      min_confidence_(opts.min_confidence), branches_(opts.branches), n_common_(std::min(ctx_.model().n_vocab(), target.n_vocab())),
      n_target_(target.n_vocab()) {
    if (!(min_confidence_ >= 0.0f && min_confidence_ <= 1.0f))
        throw Error("draft source: min_confidence must be in [0, 1], got " + std::to_string(min_confidence_));
    if (branches_ < 1 || branches_ > 64)
        throw Error("draft source: branches must be in [1, 64], got " + std::to_string(branches_));
    fed_.reserve(static_cast<size_t>(target_capacity));
    history_.reserve(static_cast<size_t>(target_capacity));
}

void DraftSource::reset(const GenerationStart& start) {
    verify_ = start.verify;
    // The target's settings over the ids both vocabularies have (a bias on an id only the target
    // has cannot apply to the draft's logits).
    SamplerOptions so = start.sampler;
    std::erase_if(so.logit_bias, [&](const auto& b) { return b.first >= n_common_; });
    sampler_ = Sampler(so, n_common_);
    // Keep whatever prefix of the cache the new prompt shares (a rerun of the same prompt
    // costs nothing).
    rollback_to(start.prompt);
}

void DraftSource::rollback_to(std::span<const TokenId> context) {
    const size_t n = std::min(fed_.size(), context.size());
    size_t common = static_cast<size_t>(std::mismatch(fed_.begin(), fed_.begin() + static_cast<std::ptrdiff_t>(n),
                                                      context.begin()).first - fed_.begin());
    // The last context token must be run again to give the logits of the next one.
    if (common == context.size() && common > 0) --common;
    cache_.truncate(static_cast<int64_t>(common));
    fed_.resize(common);
}

void DraftSource::propose(std::span<const TokenId> context, int k, Proposal& out) {
    check_k(name(), k);
    if (context.empty() || static_cast<int64_t>(context.size()) > cache_.capacity()) return;
    rollback_to(context);
    // Guess i (0-based) sits at position context.size() + i; every guess but the last is run.
    const int64_t room = cache_.capacity() - static_cast<int64_t>(context.size()) + 1;
    const int n = static_cast<int>(std::min<int64_t>(k, room));
    pending_.assign(context.begin() + static_cast<std::ptrdiff_t>(fed_.size()), context.end());
    // A token only the target has (padding it should never produce) cannot be run by the draft.
    for (TokenId t : pending_)
        if (t < 0 || t >= n_common_) return;
    history_.assign(context.begin(), context.end());
    std::span<const float> logits = ctx_.forward(cache_, pending_, Logits::Last);
    fed_.insert(fed_.end(), pending_.begin(), pending_.end());
    // Only the ids both vocabularies have: the draft's logits over its padding are ignored.
    const auto n_common = static_cast<size_t>(n_common_);
    if (branches_ > 1 && verify_ == VerifyMode::Exact) {
        propose_tree(logits, n, out);
        return;
    }
    for (int i = 0; i < n; ++i) {
        logits = logits.first(n_common);
        if (min_confidence_ > 0.0f && top_probability(logits) < min_confidence_) break;
        const auto pos = static_cast<int64_t>(history_.size());
        TokenId t;
        if (verify_ == VerifyMode::Rejection) {
            sampler_.distribution(logits.data(), history_, q_);
            t = sampler_.sample_from(q_, pos, kDrawStream);
            out.probs.insert(out.probs.end(), q_.begin(), q_.begin() + static_cast<std::ptrdiff_t>(n_common));
            // Rows are the target's size: ids only the target has get probability 0.
            out.probs.insert(out.probs.end(), static_cast<size_t>(n_target_ - n_common_), 0.0f);
        } else {
            t = sampler_.sample(logits.data(), pos, history_);
        }
        out.tokens.push_back(t);
        history_.push_back(t);
        if (i + 1 < n) {
            logits = ctx_.forward(cache_, std::span<const TokenId>(&t, 1), Logits::Last);
            fed_.push_back(t);
        }
    }
}

// A chain of ceil(k / branches) picks, each with the draft's next most likely tokens as leaf
// siblings; the k nodes most likely to be reached (product of draft probabilities down the path)
// go out best first (a parent is never less likely than its child, so it comes first).
void DraftSource::propose_tree(std::span<const float> logits, int k, Proposal& out) {
    const auto n_common = static_cast<size_t>(n_common_);
    const int depth = std::max(1, (k + branches_ - 1) / branches_);
    cand_p_.clear();
    int32_t chain = -1;   // the last chain node (candidate index)
    double reach = 1.0;   // the draft's probability of reaching it
    for (int i = 0; i < depth; ++i) {
        logits = logits.first(n_common);
        const float mx = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (float l : logits) sum += std::exp(static_cast<double>(l - mx));
        const auto prob = [&](TokenId t) { return std::exp(static_cast<double>(logits[static_cast<size_t>(t)] - mx)) / sum; };
        if (min_confidence_ > 0.0f && 1.0 / sum < min_confidence_) break;
        const auto pos = static_cast<int64_t>(history_.size());
        const TokenId t = sampler_.sample(logits.data(), pos, history_);
        // The pick, then its most likely alternatives as leaves under the same parent.
        const auto pick = static_cast<int32_t>(out.tokens.size());
        out.tokens.push_back(t);
        out.parents.push_back(chain);
        out.weights.push_back(std::clamp(static_cast<float>(prob(t)), 0.0f, 1.0f));
        cand_p_.push_back(reach * prob(t));
        top_.clear();
        for (size_t v = 0; v < n_common; ++v) {
            if (static_cast<TokenId>(v) == t) continue;
            const std::pair<float, TokenId> e{logits[v], static_cast<TokenId>(v)};
            if (top_.size() < static_cast<size_t>(branches_ - 1)) {
                top_.push_back(e);
                std::push_heap(top_.begin(), top_.end(), std::greater<>());
            } else if (e.first > top_.front().first) {
                std::pop_heap(top_.begin(), top_.end(), std::greater<>());
                top_.back() = e;
                std::push_heap(top_.begin(), top_.end(), std::greater<>());
            }
        }
        for (const auto& [l, s] : top_) {
            out.tokens.push_back(s);
            out.parents.push_back(chain);
            out.weights.push_back(std::clamp(static_cast<float>(prob(s)), 0.0f, 1.0f));
            cand_p_.push_back(reach * prob(s));
        }
        reach *= prob(t);
        chain = pick;
        history_.push_back(t);
        if (i + 1 < depth) {
            logits = ctx_.forward(cache_, std::span<const TokenId>(&t, 1), Logits::Last);
            fed_.push_back(t);
        }
    }
    // The k most likely, best first (a prefix of the order is still a tree).
    order_best_first(out, cand_p_, best_first_);
    const size_t keep = std::min(out.tokens.size(), static_cast<size_t>(k));
    out.tokens.resize(keep);
    out.parents.resize(keep);
    out.weights.resize(keep);
}

void DraftSource::accept(std::span<const TokenId> context) { rollback_to(context); }

void DraftSource::set_branches(int branches) {
    if (branches < 1 || branches > 64)
        throw Error("draft source: branches must be in [1, 64], got " + std::to_string(branches));
    branches_ = branches;
}

} // namespace rwd::speculate
