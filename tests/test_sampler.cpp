// Sampler: greedy ties, each filter in the documented order, counter-based determinism (a
// position draws the same token whatever happened before), distributions that sum to 1, draws
// that follow them (a loose chi-square), and refusal of bad options.
#include <array>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "rewind/error.h"
#include "rewind/sampler.h"

namespace rwd {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
constexpr int kDraws = 6000;
#else
constexpr int kDraws = 40000;
#endif

std::vector<float> dist(Sampler& s, const std::vector<float>& logits, std::vector<TokenId> history = {}) {
    std::vector<float> p;
    s.distribution(logits.data(), history, p);
    return p;
}

std::vector<double> softmax(const std::vector<float>& l, double temp = 1.0) {
    double mx = -1e300, sum = 0;
    for (float x : l) mx = std::max(mx, double(x));
    std::vector<double> p(l.size());
    for (size_t i = 0; i < l.size(); ++i) sum += p[i] = std::exp((l[i] - mx) / temp);
    for (double& x : p) x /= sum;
    return p;
}

SamplerOptions sampled(float temp = 1.0f, uint64_t seed = 42) {
    SamplerOptions o;
    o.temperature = temp;
    o.seed = seed;
    return o;
}

TEST(Sampler, GreedyPicksLowestIdOnTies) {
    Sampler s({}, 5);
    const std::vector<float> l = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
    EXPECT_EQ(s.sample(l.data(), 0, {}), 1);
    const auto p = dist(s, l);
    EXPECT_EQ(p, (std::vector<float>{0, 1, 0, 0, 0}));
    const std::vector<float> flat(7, 0.5f);
    EXPECT_EQ(Sampler({}, 7).sample(flat.data(), 3, {}), 0);
}

// Greedy over a large vocabulary is the plain scan `if (l[i] > l[best]) best = i` from 0 (the
// sampler splits it into interleaved lanes): ties, +0/-0, NaN (never wins; one at 0 stays) and
// sizes around the lane count.
TEST(Sampler, GreedyMatchesThePlainScan) {
    std::mt19937 rng(7);
    auto scan = [](const std::vector<float>& l) {
        size_t best = 0;
        for (size_t i = 1; i < l.size(); ++i)
            if (l[i] > l[best]) best = i;
        return static_cast<TokenId>(best);
    };
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t n : {1u, 7u, 15u, 16u, 17u, 33u, 1000u, 4099u}) {
        Sampler s({}, static_cast<int64_t>(n));
        for (int trial = 0; trial < 60; ++trial) {
            std::vector<float> l(n);
            // Few distinct values, so ties are common; some ±0, NaN and -inf.
            std::uniform_int_distribution<int> pick(0, 9);
            for (float& x : l) {
                const int k = pick(rng);
                x = k == 0 ? 0.0f : k == 1 ? -0.0f : k == 2 && trial % 3 == 0 ? nan
                    : k == 3 ? -std::numeric_limits<float>::infinity() : float(k % 4) - 1.5f;
            }
            if (trial % 5 == 0) l[0] = nan;
            if (trial % 7 == 0) std::fill(l.begin(), l.end(), trial % 2 ? 0.0f : -0.0f);
            if (trial % 11 == 0) l[n - 1] = 100.0f;
            ASSERT_EQ(s.sample(l.data(), 0, {}), scan(l)) << "n " << n << " trial " << trial;
        }
    }
}

TEST(Sampler, RepetitionPenaltyFollowsLlamaCppRule) {
    SamplerOptions o;
    o.repeat_penalty = 2.0f;
    o.repeat_last_n = 3;
    Sampler s(o, 4);
    // 1 (positive) is halved, 3 (negative) doubled; 0 falls outside the last 3 tokens.
    const std::vector<float> l = {4.0f, 3.0f, 2.5f, -1.0f};
    EXPECT_EQ(s.sample(l.data(), 10, std::vector<TokenId>{1, 3}), 0);
    EXPECT_EQ(s.sample(l.data(), 10, std::vector<TokenId>{0, 2, 1, 3}), 0); // last 3 = {2, 1, 3}
    EXPECT_EQ(s.sample(l.data(), 10, std::vector<TokenId>{0, 2}), 1);       // 4 / 2 = 2 < 3
    // Once per distinct id: 4 / 2 = 2 > 1.9 however often 0 was seen.
    const std::vector<float> l2 = {4.0f, 1.9f, 0.0f, 0.0f};
    EXPECT_EQ(s.sample(l2.data(), 10, std::vector<TokenId>{0, 0, 0}), 0);
    SamplerOptions t = o;
    t.temperature = 1.0f;
    Sampler st(t, 4);
    const auto p = dist(st, l, {3, 3, 1});
    const auto want = softmax({4.0f, 1.5f, 2.5f, -2.0f});
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(p[i], want[i], 1e-6);
    EXPECT_THROW(st.sample(l.data(), 0, std::vector<TokenId>{7}), Error);
}

TEST(Sampler, TemperatureScalesTheSoftmax) {
    const std::vector<float> l = {0.0f, 1.0f, 2.0f, 0.5f};
    for (float temp : {0.5f, 1.0f, 2.0f}) {
        Sampler s(sampled(temp), 4);
        const auto p = dist(s, l);
        const auto want = softmax(l, temp);
        for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(p[i], want[i], 1e-6) << temp;
    }
}

TEST(Sampler, TopKKeepsTheKLargest) {
    auto o = sampled();
    o.top_k = 2;
    Sampler s(o, 5);
    const auto p = dist(s, {1.0f, 5.0f, 3.0f, 3.0f, 0.0f});
    EXPECT_GT(p[1], 0.0f);
    EXPECT_GT(p[2], 0.0f); // tie 2/3 broken by lower id
    EXPECT_EQ(p[3], 0.0f);
    EXPECT_EQ(p[0] + p[4], 0.0f);
    EXPECT_NEAR(p[1], 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
}

TEST(Sampler, TopPKeepsTheSmallestSufficientPrefix) {
    // probabilities 0.5, 0.3, 0.2 (at temperature 1)
    const std::vector<float> l = {std::log(0.2f), std::log(0.5f), std::log(0.3f)};
    auto kept = [&](float top_p) {
        auto o = sampled();
        o.top_p = top_p;
        Sampler s(o, 3);
        const auto p = dist(s, l);
        int n = 0;
        for (float x : p) n += x > 0.0f;
        return n;
    };
    EXPECT_EQ(kept(0.4f), 1);
    EXPECT_EQ(kept(0.75f), 2);
    EXPECT_EQ(kept(0.95f), 3);
    EXPECT_EQ(kept(1.0f), 3);
    auto o = sampled();
    o.top_p = 0.75f;
    Sampler s(o, 3);
    const auto p = dist(s, l);
    EXPECT_NEAR(p[1], 0.5 / 0.8, 1e-6);
    EXPECT_NEAR(p[2], 0.3 / 0.8, 1e-6);
}

TEST(Sampler, MinPDropsTheUnlikely) {
    // probabilities 0.5, 0.3, 0.15, 0.05; min_p 0.25 keeps p >= 0.125
    const std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
    auto o = sampled();
    o.min_p = 0.25f;
    Sampler s(o, 4);
    const auto p = dist(s, l);
    EXPECT_GT(p[2], 0.0f);
    EXPECT_EQ(p[3], 0.0f);
    EXPECT_NEAR(p[0], 0.5 / 0.95, 1e-6);
}

TEST(Sampler, FiltersRunInTheDocumentedOrder) {
    // top-p and min-p look at temperature-1 probabilities, before the temperature is applied:
    // at temperature 4 the flattened softmax would keep more tokens.
    const std::vector<float> l = {3.0f, 2.0f, 0.0f, -1.0f};
    auto o = sampled(4.0f);
    o.top_p = 0.9f; // T=1 probabilities: .705 .259 .035 .013 -> keeps 2
    Sampler s(o, 4);
    const auto p = dist(s, l);
    EXPECT_EQ(p[2] + p[3], 0.0f);
    EXPECT_NEAR(p[0], 1.0 / (1.0 + std::exp(-0.25)), 1e-6); // then temperature 4 on the two kept
    // top-k before top-p: k=1 leaves one token whatever top_p says.
    auto k = sampled();
    k.top_k = 1;
    k.top_p = 0.99f;
    Sampler sk(k, 4);
    EXPECT_EQ(dist(sk, l), (std::vector<float>{1, 0, 0, 0}));
}

TEST(Sampler, DistributionSumsToOneAndSampleMatchesSampleFrom) {
    std::vector<float> l(4096);
    for (size_t i = 0; i < l.size(); ++i) l[i] = float(std::sin(double(i) * 0.37) * 4.0);
    auto o = sampled(0.8f, 7);
    o.top_k = 40;
    o.top_p = 0.95f;
    o.min_p = 0.05f;
    o.repeat_penalty = 1.1f;
    Sampler s(o, 4096);
    const std::vector<TokenId> hist = {1, 2, 3, 2000};
    const auto p = dist(s, l, hist);
    EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 1.0, 1e-5);
    for (int64_t pos = 0; pos < 50; ++pos) EXPECT_EQ(s.sample(l.data(), pos, hist), s.sample_from(p, pos, 0));
}

TEST(Sampler, SamePositionSameTokenWhateverHappenedBefore) {
    std::vector<float> l(64);
    for (size_t i = 0; i < l.size(); ++i) l[i] = float(i % 7) * 0.3f;
    Sampler a(sampled(1.0f, 5), 64), b(sampled(1.0f, 5), 64);
    std::vector<TokenId> first;
    for (int64_t pos = 100; pos < 140; ++pos) first.push_back(a.sample(l.data(), pos, {}));
    // b draws other positions in another order first, then the same positions backwards.
    for (int64_t pos = 0; pos < 30; ++pos) b.sample(l.data(), pos * 3, {});
    for (int64_t pos = 139; pos >= 100; --pos) EXPECT_EQ(b.sample(l.data(), pos, {}), first[size_t(pos - 100)]);
    // Positions and seeds matter.
    int differ = 0;
    Sampler c(sampled(1.0f, 6), 64);
    for (int64_t pos = 100; pos < 140; ++pos) differ += c.sample(l.data(), pos, {}) != first[size_t(pos - 100)];
    EXPECT_GT(differ, 10);
    std::set<TokenId> distinct(first.begin(), first.end());
    EXPECT_GT(distinct.size(), 10u);
}

TEST(Sampler, CounterUniformIsAPureFunction) {
    double sum = 0;
    for (uint64_t i = 0; i < 1000; ++i) {
        const double u = counter_uniform(3, i, 0);
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        EXPECT_EQ(u, counter_uniform(3, i, 0));
        sum += u;
    }
    EXPECT_NEAR(sum / 1000, 0.5, 0.05);
    EXPECT_NE(counter_uniform(3, 5, 0), counter_uniform(3, 5, 1));
    EXPECT_NE(counter_uniform(3, 5, 0), counter_uniform(4, 5, 0));
    EXPECT_NE(counter_uniform(3, 5, 0), counter_uniform(3, 6, 0));
}

TEST(Sampler, DrawsFollowTheDistribution) {
    const std::vector<float> l = {0.0f, 1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
    Sampler s(sampled(1.0f, 2024), 6);
    const auto p = softmax(l);
    std::vector<int> count(6, 0);
    for (int i = 0; i < kDraws; ++i) ++count[size_t(s.sample(l.data(), i, {}))];
    double chi2 = 0;
    for (size_t i = 0; i < 6; ++i) {
        const double e = p[i] * kDraws;
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    EXPECT_LT(chi2, 25.0) << "5 degrees of freedom: 99.99% of fair runs stay below ~25.7";
    // sample_from on an explicit distribution, with zero entries never drawn.
    const std::vector<float> q = {0.0f, 0.25f, 0.0f, 0.75f, 0.0f, 0.0f};
    int threes = 0;
    for (int i = 0; i < 4000; ++i) {
        const TokenId t = s.sample_from(q, i, 9);
        ASSERT_TRUE(t == 1 || t == 3);
        threes += t == 3;
    }
    EXPECT_NEAR(threes / 4000.0, 0.75, 0.04);
}

// Frequency and presence penalties (OpenAI's), after the repetition penalty, over the same window.
TEST(Sampler, FrequencyAndPresencePenalties) {
    SamplerOptions o;
    o.frequency_penalty = 0.5f;
    o.presence_penalty = 0.25f;
    Sampler s(o, 5);
    const std::vector<float> l = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
    const std::vector<TokenId> history = {4, 1, 1, 2};
    auto w = s.processed_logits(l.data(), history);
    EXPECT_EQ(w[0], 1.0f);
    EXPECT_EQ(w[1], 2.0f - 2 * 0.5f - 0.25f);
    EXPECT_EQ(w[2], 3.0f - 0.5f - 0.25f);
    EXPECT_EQ(w[4], 5.0f - 0.5f - 0.25f);
    o.repeat_last_n = 3; // 1, 1, 2: token 4 is outside the window
    Sampler s3(o, 5);
    w = s3.processed_logits(l.data(), history);
    EXPECT_EQ(w[4], 5.0f);
    EXPECT_EQ(w[1], 2.0f - 2 * 0.5f - 0.25f);
    o.repeat_last_n = -1; // the whole history
    std::vector<TokenId> long_history(100, 3);
    long_history.push_back(0);
    Sampler s_all(o, 5);
    w = s_all.processed_logits(l.data(), long_history);
    EXPECT_EQ(w[3], 4.0f - 100 * 0.5f - 0.25f);
    // The repetition penalty comes first: (4 / 2) - 0.5 - 0.25; a negative logit is multiplied.
    o.repeat_last_n = 64;
    o.repeat_penalty = 2.0f;
    const std::vector<float> neg = {-1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
    Sampler s_rep(o, 5);
    const std::vector<TokenId> h2 = {3, 0};
    w = s_rep.processed_logits(neg.data(), h2);
    EXPECT_EQ(w[3], 4.0f / 2.0f - 0.5f - 0.25f);
    EXPECT_EQ(w[0], -1.0f * 2.0f - 0.5f - 0.25f);
    // Greedy follows the penalised logits: 5 - 0.75 < 4.5.
    SamplerOptions g;
    g.frequency_penalty = 0.5f;
    g.presence_penalty = 0.25f;
    const std::vector<float> close = {0.0f, 0.0f, 0.0f, 4.5f, 5.0f};
    EXPECT_EQ(Sampler(g, 5).sample(close.data(), 0, std::vector<TokenId>{4}), 3);
    // Negative values reward repeats.
    g.presence_penalty = -1.0f;
    g.frequency_penalty = 0.0f;
    EXPECT_EQ(Sampler(g, 5).sample(close.data(), 0, std::vector<TokenId>{3}), 3);
}

TEST(Sampler, LogitBiasAddsAfterThePenalties) {
    SamplerOptions o;
    o.logit_bias = {{0, 10.0f}, {2, -1.0f}, {2, -1.5f}};
    Sampler s(o, 4);
    const std::vector<float> l = {1.0f, 5.0f, 3.0f, 0.0f};
    const auto w = s.processed_logits(l.data(), {});
    EXPECT_EQ(w[0], 11.0f);
    EXPECT_EQ(w[2], 0.5f); // a repeated id adds up
    EXPECT_EQ(w[1], 5.0f);
    EXPECT_EQ(s.sample(l.data(), 0, {}), 0);
    o.logit_bias = {{1, -100.0f}};
    o.temperature = 1.0f;
    std::vector<float> p;
    Sampler(o, 4).distribution(l.data(), {}, p);
    EXPECT_LT(p[1], 1e-30f);
}

// The mask comes first: a forbidden token is -inf whatever its logit, penalty or bias, greedy is
// the masked argmax, draws come from the masked distribution; a mask of the wrong size or one
// that allows nothing is refused.
TEST(Sampler, MaskComesBeforeEverything) {
    SamplerOptions o;
    o.logit_bias = {{1, 50.0f}};
    o.presence_penalty = -2.0f; // rewards token 1, which the mask forbids
    const std::vector<float> l = {1.0f, 9.0f, 3.0f, 2.0f, 0.0f};
    const std::vector<uint32_t> mask = {0b01101u}; // tokens 0, 2, 3
    Sampler s(o, 5);
    EXPECT_EQ(s.sample(l.data(), 0, std::vector<TokenId>{1}, mask), 2);
    const auto w = s.processed_logits(l.data(), std::vector<TokenId>{1}, mask);
    EXPECT_EQ(w[1], -INFINITY);
    EXPECT_EQ(w[4], -INFINITY);
    o.temperature = 1.0f;
    Sampler t(o, 5);
    std::vector<float> p;
    t.distribution(l.data(), {}, p, mask);
    EXPECT_EQ(p[1], 0.0f);
    EXPECT_EQ(p[4], 0.0f);
    EXPECT_NEAR(p[0] + p[2] + p[3], 1.0, 1e-6);
    for (uint64_t pos = 0; pos < 200; ++pos) {
        const TokenId x = t.sample(l.data(), static_cast<int64_t>(pos), {}, mask);
        EXPECT_TRUE(x == 0 || x == 2 || x == 3) << x;
    }
    EXPECT_THROW(s.sample(l.data(), 0, {}, std::vector<uint32_t>{0u}), Error);       // allows nothing
    EXPECT_THROW(s.sample(l.data(), 0, {}, std::vector<uint32_t>{1u, 1u}), Error);   // wrong size
    EXPECT_THROW(t.sample(l.data(), 0, {}, std::vector<uint32_t>{0u}), Error);
    // Every allowed token at -inf: no candidate.
    const std::vector<float> dead = {-INFINITY, 1.0f, -INFINITY, -INFINITY, 1.0f};
    EXPECT_THROW(Sampler({}, 5).sample(dead.data(), 0, {}, mask), Error);
}

// Random rows of 40 logits with many ties, and random masks over them, for the greedy tests;
// penalties and a bias apply to `history`.
struct TiedRows {
    explicit TiedRows(uint32_t seed) : rng(seed) {}
    std::vector<float> row() {
        std::vector<float> l(40);
        for (float& x : l) x = std::round(u(rng)); // many ties
        return l;
    }
    // Each bit the AND of `draws` random bits; tokens 40-63 off. Empty: the mask allows nothing.
    std::vector<uint32_t> mask(int draws) {
        std::vector<uint32_t> m(2);
        for (uint32_t& w : m) {
            w = ~0u;
            for (int d = 0; d < draws; ++d) w &= static_cast<uint32_t>(rng());
        }
        m[1] &= 0xffu;
        if (m[0] == 0 && m[1] == 0) m.clear();
        return m;
    }
    static bool allows(const std::vector<uint32_t>& m, TokenId t) { return (m[static_cast<size_t>(t) / 32] >> (t % 32)) & 1u; }
    std::mt19937 rng;
    std::uniform_real_distribution<float> u{-3.0f, 3.0f};
    const std::vector<TokenId> history = {3, 1, 1};
};

// greedy_unmasked: the unmasked greedy pick and its processed logit; whenever a mask allows that
// token (its value neither NaN nor -inf), sample() with the mask picks it too.
TEST(Sampler, GreedyUnmaskedIsTheMaskedPickWhereAllowed) {
    SamplerOptions o;
    o.logit_bias = {{3, 2.5f}};
    o.frequency_penalty = 0.5f;
    TiedRows r(7);
    int checked = 0;
    for (int trial = 0; trial < 300; ++trial) {
        const std::vector<float> l = r.row();
        const std::vector<uint32_t> mask = r.mask(2);
        if (mask.empty()) continue;
        Sampler s(o, 40);
        float value = 0;
        const TokenId t = s.greedy_unmasked(l.data(), r.history, value);
        EXPECT_EQ(t, s.sample(l.data(), 0, r.history, {}));
        EXPECT_EQ(value, s.processed_logits(l.data(), r.history)[static_cast<size_t>(t)]);
        if (TiedRows::allows(mask, t)) {
            EXPECT_EQ(s.sample(l.data(), 0, r.history, mask), t) << "trial " << trial;
            ++checked;
        }
    }
    EXPECT_GT(checked, 20);
    o.temperature = 0.7f;
    float value = 0;
    EXPECT_THROW(Sampler(o, 40).greedy_unmasked(std::vector<float>(40, 0.0f).data(), {}, value), Error);
}

// greedy_ranking: greedy's ranking (larger processed logit first, lower id among equals, -inf
// left out) as a sort gives it; the first token of it a mask allows is sample()'s pick with that
// mask whenever the list reaches one; a NaN anywhere leaves the decision to the mask (0 tokens).
TEST(Sampler, GreedyRankedFirstAllowedIsTheMaskedPick) {
    SamplerOptions o;
    o.logit_bias = {{3, 2.5f}, {9, -100.0f}};
    o.frequency_penalty = 0.5f;
    TiedRows r(11);
    int decided = 0;
    for (int trial = 0; trial < 300; ++trial) {
        std::vector<float> l = r.row();
        l[static_cast<size_t>(r.rng() % 40)] = -INFINITY;
        Sampler s(o, 40);
        const std::span<const float> p = s.processed_logits(l.data(), r.history);
        std::vector<TokenId> want;
        for (TokenId t = 0; t < 40; ++t)
            if (p[static_cast<size_t>(t)] != -INFINITY) want.push_back(t);
        std::vector<float> pv(p.begin(), p.end());
        std::stable_sort(want.begin(), want.end(), [&](TokenId a, TokenId b) { return pv[static_cast<size_t>(a)] > pv[static_cast<size_t>(b)]; });
        want.resize(std::min<size_t>(want.size(), 6));
        std::array<TokenId, 6> top{};
        const size_t n = Sampler::greedy_ranking(s.greedy_values(l.data(), r.history), top);
        ASSERT_EQ(n, want.size());
        for (size_t i = 0; i < n; ++i) EXPECT_EQ(top[i], want[i]) << "trial " << trial << " rank " << i;
        const std::vector<uint32_t> mask = r.mask(3);
        if (mask.empty()) continue;
        for (size_t i = 0; i < n; ++i) {
            if (TiedRows::allows(mask, top[i])) {
                EXPECT_EQ(s.sample(l.data(), 0, r.history, mask), top[i]) << "trial " << trial;
                ++decided;
                break;
            }
        }
    }
    EXPECT_GT(decided, 100);
    std::vector<float> l(40, 1.0f);
    l[17] = NAN;
    std::array<TokenId, 4> top{};
    EXPECT_EQ(Sampler::greedy_ranking(l, top), 0u);
    o.temperature = 0.7f;
    EXPECT_THROW(Sampler(o, 40).greedy_values(std::vector<float>(40, 0.0f).data(), {}), Error);
}

// greedy_ranking over rows of vocabulary size (blocks that cannot enter the list are skipped):
// equal to a stable sort for every list length, ties and -inf included, whatever the row's
// length modulo the block; a NaN anywhere, below the list's last value too, gives 0.
TEST(Sampler, GreedyRankingOfLongRowsEqualsASort) {
    std::mt19937 rng(5);
    for (int trial = 0; trial < 60; ++trial) {
        const size_t n = 1000 + static_cast<size_t>(rng() % 40);
        std::vector<float> row(n);
        for (float& v : row) v = static_cast<float>(static_cast<int>(rng() % 200)) * 0.25f; // many ties
        for (int i = 0; i < 30; ++i) row[rng() % n] = -INFINITY;
        std::vector<TokenId> want;
        for (TokenId t = 0; t < static_cast<TokenId>(n); ++t)
            if (row[static_cast<size_t>(t)] != -INFINITY) want.push_back(t);
        std::stable_sort(want.begin(), want.end(), [&](TokenId a, TokenId b) { return row[static_cast<size_t>(a)] > row[static_cast<size_t>(b)]; });
        for (const size_t k : {size_t{1}, size_t{5}, size_t{16}, size_t{64}}) {
            std::vector<TokenId> top(k);
            ASSERT_EQ(Sampler::greedy_ranking(row, top), k);
            for (size_t i = 0; i < k; ++i) ASSERT_EQ(top[i], want[i]) << "trial " << trial << " k " << k << " rank " << i;
        }
        std::vector<float> with_nan = row;
        with_nan[rng() % n] = NAN;
        std::vector<TokenId> top(16);
        EXPECT_EQ(Sampler::greedy_ranking(with_nan, top), 0u) << "trial " << trial;
    }
}

TEST(Sampler, BadOptionsThrow) {
    auto bad = [](auto mutate) {
        SamplerOptions o = sampled();
        mutate(o);
        return o;
    };
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.top_k = -1; }), 10), Error);
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.top_p = 0.0f; }), 10), Error);
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.top_p = 1.5f; }), 10), Error);
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.min_p = -0.1f; }), 10), Error);
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.min_p = 1.1f; }), 10), Error);
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.repeat_penalty = 0.0f; }), 10), Error);
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.repeat_last_n = -2; }), 10), Error);
    EXPECT_NO_THROW(Sampler(bad([](SamplerOptions& o) { o.repeat_last_n = -1; }), 10)); // the whole history
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.frequency_penalty = 2.5f; }), 10), Error);
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.presence_penalty = -2.1f; }), 10), Error);
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.presence_penalty = NAN; }), 10), Error);
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.logit_bias = {{10, 1.0f}}; }), 10), Error);
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.logit_bias = {{-1, 1.0f}}; }), 10), Error);
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.logit_bias = {{3, 100.5f}}; }), 10), Error);
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.logit_bias = {{3, INFINITY}}; }), 10), Error);
    EXPECT_THROW(Sampler(bad([](SamplerOptions& o) { o.temperature = NAN; }), 10), Error);
    EXPECT_THROW(Sampler(sampled(), 0), Error);

    Sampler s(sampled(), 3);
    EXPECT_THROW(s.sample_from(std::vector<float>{0.5f, 0.5f}, 0, 0), Error);       // wrong size
    EXPECT_THROW(s.sample_from(std::vector<float>{0.5f, -0.1f, 0.6f}, 0, 0), Error); // negative
    EXPECT_THROW(s.sample_from(std::vector<float>{0, 0, 0}, 0, 0), Error);           // no mass
    const std::vector<float> nan_logits = {0.0f, NAN, 1.0f};
    EXPECT_THROW(s.sample(nan_logits.data(), 0, {}), Error);
}

} // namespace
} // namespace rwd
