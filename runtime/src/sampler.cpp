// Sampler: the fixed filter chain (mask -> penalties -> bias -> top-k -> top-p -> min-p -> temperature -> draw,
// see sampler.h) over preallocated buffers, and counter-based randomness so that a position's
// draw depends only on (seed, position, stream).
#include "rewind/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "rewind/error.h"
#include "rewind/hash.h"

namespace rwd {
double counter_uniform(uint64_t seed, uint64_t position, uint64_t stream) {
    uint64_t h = mix64(seed);
    h = mix64(h ^ position);
    h = mix64(h ^ (stream * 0xd1b54a32d192ed03ull));
    return static_cast<double>(h >> 11) * 0x1.0p-53; // 53 random bits -> [0, 1)
}

Sampler::Sampler(SamplerOptions opts, int64_t n_vocab) : opts_(opts), n_vocab_(n_vocab) {
    if (n_vocab <= 0) throw Error("sampler: vocabulary size must be positive, got " + std::to_string(n_vocab));
    if (std::isnan(opts.temperature) || std::isinf(opts.temperature))
        throw Error("sampler: temperature must be a finite number");
    if (opts.top_k < 0) throw Error("sampler: top_k must be >= 0 (0 = off), got " + std::to_string(opts.top_k));
    if (!(opts.top_p > 0.0f && opts.top_p <= 1.0f))
        throw Error("sampler: top_p must be in (0, 1] (1 = off), got " + std::to_string(opts.top_p));
    if (!(opts.min_p >= 0.0f && opts.min_p <= 1.0f))
        throw Error("sampler: min_p must be in [0, 1] (0 = off), got " + std::to_string(opts.min_p));
    if (!(opts.repeat_penalty > 0.0f) || std::isinf(opts.repeat_penalty))
        throw Error("sampler: repeat_penalty must be positive and finite (1 = off), got " +
                    std::to_string(opts.repeat_penalty));
    if (opts.repeat_last_n < -1)
        throw Error("sampler: repeat_last_n must be >= -1 (-1: the whole history), got " +
                    std::to_string(opts.repeat_last_n));
    for (const float pen : {opts.frequency_penalty, opts.presence_penalty})
        if (!(pen >= -2.0f && pen <= 2.0f))
            throw Error("sampler: frequency_penalty and presence_penalty must be in [-2, 2] (0 = off), got " +
                        std::to_string(pen));
    for (const auto& [id, bias] : opts.logit_bias) {
        if (id < 0 || id >= n_vocab)
            throw Error("sampler: logit_bias names token " + std::to_string(id) + ", outside the vocabulary [0, " +
                        std::to_string(n_vocab) + ")");
        if (!(bias >= -100.0f && bias <= 100.0f))
            throw Error("sampler: logit_bias of token " + std::to_string(id) + " must be in [-100, 100], got " +
                        std::to_string(bias));
    }
    const auto n = static_cast<size_t>(n_vocab);
    work_.resize(n);
    probs_.resize(n);
    idx_.resize(n);
    exps_.resize(n);
    count_.assign(n, 0);
}

void Sampler::penalise(std::span<const TokenId> history) {
    const bool counted = opts_.repeat_penalty != 1.0f || opts_.frequency_penalty != 0.0f || opts_.presence_penalty != 0.0f;
    if (counted && opts_.repeat_last_n != 0 && !history.empty()) {
        const size_t n = opts_.repeat_last_n < 0 ? history.size()
                                                 : std::min(history.size(), static_cast<size_t>(opts_.repeat_last_n));
        const auto recent = history.subspan(history.size() - n);
        for (TokenId id : recent) {
            if (id < 0 || id >= n_vocab_)
                throw Error("sampler: history token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(n_vocab_) + ")");
        }
        for (TokenId id : recent) ++count_[static_cast<size_t>(id)];
        // Once per distinct id (its count then goes back to 0, which marks it done).
        for (TokenId id : recent) {
            int32_t& c = count_[static_cast<size_t>(id)];
            if (c == 0) continue;
            float& l = work_[static_cast<size_t>(id)];
            if (opts_.repeat_penalty != 1.0f) l = l > 0.0f ? l / opts_.repeat_penalty : l * opts_.repeat_penalty;
            if (opts_.frequency_penalty != 0.0f || opts_.presence_penalty != 0.0f)
                l -= static_cast<float>(c) * opts_.frequency_penalty + opts_.presence_penalty;
            c = 0;
        }
    }
    for (const auto& [id, bias] : opts_.logit_bias) work_[static_cast<size_t>(id)] += bias;
}

namespace {

// The index the scan `best = 0; for i: if (l[i] > l[best]) best = i` returns (a NaN never wins,
// one at 0 stays the answer; +0 and -0 tie, the lowest index wins ties), with the compares in
// kLanes interleaved lanes that do not wait on one another: as one chain the scan took about
// 0.15 ms per token over a 128k vocabulary. Each lane keeps its largest value and the first
// index holding it (lanes start from l[0], so none ever holds a NaN); the answer is the lowest
// such index among the lanes whose value equals the overall largest.
int64_t argmax_lowest_index(const float* l, int64_t n) {
    constexpr int kLanes = 8;
    if (n < 2 * kLanes || std::isnan(l[0])) {
        int64_t best = 0;
        for (int64_t i = 1; i < n; ++i)
            if (l[i] > l[best]) best = i;
        return best;
    }
    float m[kLanes];
    int64_t at[kLanes];
    for (int j = 0; j < kLanes; ++j) {
        m[j] = l[0];
        at[j] = 0;
    }
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        for (int j = 0; j < kLanes; ++j) {
            if (l[i + j] > m[j]) {
                m[j] = l[i + j];
                at[j] = i + j;
            }
        }
    }
    for (; i < n; ++i) {
        if (l[i] > m[0]) {
            m[0] = l[i];
            at[0] = i;
        }
    }
    int best = 0;
    for (int j = 1; j < kLanes; ++j)
        if (m[j] > m[best] || (m[j] == m[best] && at[j] < at[best])) best = j;
    return at[best];
}

} // namespace

void Sampler::apply_mask(std::span<const uint32_t> mask) {
    if (mask.empty()) return;
    if (static_cast<int64_t>(mask.size()) != mask_words())
        throw Error(ErrorCode::shape, "sampler: a token mask of " + std::to_string(mask.size()) + " words for a vocabulary of " +
                                          std::to_string(n_vocab_) + " tokens (needs " + std::to_string(mask_words()) + ")");
    constexpr float kOut = -std::numeric_limits<float>::infinity();
    bool any = false;
    for (size_t w = 0; w < mask.size(); ++w) {
        const uint32_t bits = mask[w];
        any = any || bits != 0;
        if (bits == 0xffffffffu) continue;
        const size_t base = w * 32;
        const size_t end = std::min(base + 32, static_cast<size_t>(n_vocab_));
        for (size_t t = base; t < end; ++t)
            if (!((bits >> (t - base)) & 1u)) work_[t] = kOut;
    }
    if (!any) throw Error("sampler: the token mask allows no token");
}

TokenId Sampler::greedy_pick(const float* logits, std::span<const TokenId> history, std::span<const uint32_t> mask) {
    const float* l = logits;
    if (penalised() || !mask.empty()) {
        std::copy(logits, logits + n_vocab_, work_.begin());
        apply_mask(mask);
        penalise(history);
        l = work_.data();
    }
    const int64_t best = argmax_lowest_index(l, n_vocab_);
    // Under a mask the argmax must be an allowed token: one with a finite logit.
    if (!mask.empty() && l[best] == -std::numeric_limits<float>::infinity())
        throw Error("sampler: every token the mask allows has logit -inf");
    return static_cast<TokenId>(best);
}

std::span<const float> Sampler::greedy_values(const float* logits, std::span<const TokenId> history) {
    if (!opts_.greedy()) throw Error(ErrorCode::state, "sampler: greedy_values under sampling (temperature > 0)");
    if (!penalised()) return {logits, static_cast<size_t>(n_vocab_)};
    std::copy(logits, logits + n_vocab_, work_.begin());
    penalise(history);
    return work_;
}

TokenId Sampler::greedy_argmax(std::span<const float> values) {
    return static_cast<TokenId>(argmax_lowest_index(values.data(), static_cast<int64_t>(values.size())));
}

TokenId Sampler::greedy_unmasked(const float* logits, std::span<const TokenId> history, float& value) {
    const std::span<const float> v = greedy_values(logits, history);
    const TokenId t = greedy_argmax(v);
    value = v[static_cast<size_t>(t)];
    return t;
}

namespace {

constexpr size_t kRankBlock = 16; // values greedy_ranking skips at once when none can enter

// Whether any of the kRankBlock values at `block` is above `last` or NaN, four lanes at a time
// (GCC and Clang vector extensions: SSE on x86, NEON elsewhere; the compilers unroll a scalar
// loop of fixed count but do not vectorise it inside the ranking's loop).
bool any_above(const float* block, float last) {
    using F4 = float __attribute__((vector_size(16)));
    using I4 = int32_t __attribute__((vector_size(16)));
    const F4 bound = {last, last, last, last};
    I4 acc = {0, 0, 0, 0};
    for (size_t j = 0; j < kRankBlock; j += 4) {
        F4 x;
        std::memcpy(&x, block + j, sizeof x);
        acc |= ~(x <= bound); // x > last, or x NaN
    }
    return (acc[0] | acc[1] | acc[2] | acc[3]) != 0;
}

} // namespace

size_t Sampler::greedy_ranking(std::span<const float> values, std::span<TokenId> top) {
    constexpr size_t kMax = 64;
    const size_t k = top.size();
    if (k == 0 || k > kMax) throw Error("sampler: greedy_ranking takes 1 to 64 tokens, got " + std::to_string(k));
    // A list kept in ranking order; ids come in ascending order, so a newcomer equal to an entry
    // ranks after it, and one equal to the last entry of a full list does not enter.
    float vals[kMax];
    size_t n = 0;
    constexpr float kOut = -std::numeric_limits<float>::infinity();
    for (size_t start = 0; start < values.size(); start += kRankBlock) {
        const size_t end = std::min(values.size(), start + kRankBlock);
        if (n == k && end - start == kRankBlock) {
            // Once the list is full, a block enters it only where a value beats its last entry
            // (or is NaN): one comparison per value, without branches, skips most blocks.
            if (!any_above(values.data() + start, vals[k - 1])) continue;
        }
        for (size_t t = start; t < end; ++t) {
            const float v = values[t];
            if (!(v > kOut)) {
                if (std::isnan(v)) return 0;
                continue;
            }
            if (n == k && !(v > vals[k - 1])) continue;
            size_t i = n < k ? n++ : k - 1;
            for (; i > 0 && v > vals[i - 1]; --i) {
                vals[i] = vals[i - 1];
                top[i] = top[i - 1];
            }
            vals[i] = v;
            top[i] = static_cast<TokenId>(t);
        }
    }
    return n;
}

void Sampler::compute(const float* logits, std::span<const TokenId> history, std::span<const uint32_t> mask) {
    const auto n = static_cast<size_t>(n_vocab_);
    for (size_t i = 0; i < n; ++i) {
        if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity())
            throw Error("sampler: logit of token " + std::to_string(i) + " is NaN or +inf");
    }
    std::copy(logits, logits + n, work_.begin());
    apply_mask(mask);
    penalise(history);

    const float* w = work_.data();
    auto before = [w](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
    std::iota(idx_.begin(), idx_.end(), 0);
    size_t count = n;
    bool sorted = false;

    if (opts_.top_k > 0 && static_cast<size_t>(opts_.top_k) < n) { // 3. top-k
        count = static_cast<size_t>(opts_.top_k);
        std::partial_sort(idx_.begin(), idx_.begin() + static_cast<std::ptrdiff_t>(count), idx_.end(), before);
        sorted = true;
    }
    if (opts_.top_p < 1.0f) { // 4. top-p at temperature 1
        if (!sorted) std::sort(idx_.begin(), idx_.begin() + static_cast<std::ptrdiff_t>(count), before);
        sorted = true;
        const double mx = w[idx_[0]];
        double total = 0;
        for (size_t i = 0; i < count; ++i) total += std::exp(static_cast<double>(w[idx_[i]]) - mx);
        const double target = static_cast<double>(opts_.top_p) * total;
        double cum = 0;
        size_t keep = count;
        for (size_t i = 0; i < count; ++i) {
            cum += std::exp(static_cast<double>(w[idx_[i]]) - mx);
            if (cum >= target) {
                keep = i + 1;
                break;
            }
        }
        count = keep;
    }
    double mx = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < count; ++i) mx = std::max(mx, static_cast<double>(w[idx_[i]]));
    if (!std::isfinite(mx)) throw Error("sampler: every candidate logit is -inf");
    if (opts_.min_p > 0.0f) { // 5. min-p at temperature 1: p_i / p_max = exp(l_i - l_max)
        const double floor = std::log(static_cast<double>(opts_.min_p));
        size_t kept = 0;
        for (size_t i = 0; i < count; ++i) {
            if (static_cast<double>(w[idx_[i]]) - mx >= floor) idx_[kept++] = idx_[i];
        }
        count = kept; // the maximum always survives
    }
    // 6. temperature and softmax over the kept set, in double.
    std::fill(probs_.begin(), probs_.end(), 0.0f);
    const double inv_t = 1.0 / static_cast<double>(opts_.temperature);
    double total = 0;
    for (size_t i = 0; i < count; ++i) total += exps_[i] = std::exp((static_cast<double>(w[idx_[i]]) - mx) * inv_t);
    for (size_t i = 0; i < count; ++i) probs_[static_cast<size_t>(idx_[i])] = static_cast<float>(exps_[i] / total);
}

std::span<const float> Sampler::processed_logits(const float* logits, std::span<const TokenId> history,
                                                std::span<const uint32_t> mask) {
    std::copy(logits, logits + n_vocab_, work_.begin());
    apply_mask(mask);
    penalise(history);
    return work_;
}

TokenId Sampler::sample(const float* logits, int64_t pos, std::span<const TokenId> history,
                        std::span<const uint32_t> mask) {
    if (opts_.greedy()) return greedy_pick(logits, history, mask);
    compute(logits, history, mask);
    return sample_from(probs_, pos, kSampleStream);
}

void Sampler::distribution(const float* logits, std::span<const TokenId> history, std::vector<float>& probs,
                           std::span<const uint32_t> mask) {
    probs.assign(static_cast<size_t>(n_vocab_), 0.0f);
    if (opts_.greedy()) {
        probs[static_cast<size_t>(greedy_pick(logits, history, mask))] = 1.0f;
        return;
    }
    compute(logits, history, mask);
    std::copy(probs_.begin(), probs_.end(), probs.begin());
}

TokenId Sampler::sample_from(std::span<const float> probs, int64_t pos, uint64_t stream) const {
    if (static_cast<int64_t>(probs.size()) != n_vocab_)
        throw Error(ErrorCode::shape, "sampler: distribution has " + std::to_string(probs.size()) + " entries, the vocabulary " +
                    std::to_string(n_vocab_));
    double total = 0;
    for (size_t i = 0; i < probs.size(); ++i) {
        if (!(probs[i] >= 0.0f) || std::isinf(probs[i]))
            throw Error("sampler: probability of token " + std::to_string(i) + " is negative or not finite");
        total += probs[i];
    }
    if (!(total > 0)) throw Error("sampler: the distribution has no mass");
    const double target = counter_uniform(opts_.seed, static_cast<uint64_t>(pos), stream) * total;
    double cum = 0;
    TokenId last = -1;
    for (size_t i = 0; i < probs.size(); ++i) {
        if (probs[i] <= 0.0f) continue;
        cum += probs[i];
        last = static_cast<TokenId>(i);
        if (cum > target) return last;
    }
    return last; // rounding left target at the very top: the last token with mass
}

} // namespace rwd
