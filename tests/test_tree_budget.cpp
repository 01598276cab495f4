// The cost policy's pass sizing on synthetic pass times (no model): the expert-aware cost model
// recovers fixed + per row + per expert from passes, and the policy keeps the number of guesses
// with the most expected tokens per second under that cost, none when no guess pays.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "expert_pass_cost.h"
#include "tree_budget.h"

namespace rwd::speculate {
namespace {

// Qwen3-30B-A3B's layout: 48 layers of 128 experts, 8 used per token.
constexpr ExpertShape kShape{48, 128, 8};
// A synthetic machine: 10 ms a pass, 0.5 ms a row, 0.02 ms an expert read (a 1-token pass:
// 10.5 + 7.68 ms, the experts' share being about 40 %).
constexpr double kFixed = 10e-3, kRow = 0.5e-3, kExpert = 0.02e-3;

double pass_seconds(int rows, double experts) { return kFixed + kRow * rows + kExpert * experts; }

// Passes of 1..max_rows rows whose experts scatter around uniform routing's count, as real
// passes' do, so rows and experts can be told apart.
template <class Observe>
void feed(const ExpertPassCost& shape, int passes, int max_rows, Observe&& observe) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> jitter(0.8, 1.0);
    for (int i = 0; i < passes; ++i) {
        const int rows = 1 + i % max_rows;
        const double experts = rows == 1 ? shape.uniform_experts(1) : shape.uniform_experts(rows) * jitter(rng);
        observe(rows, experts, pass_seconds(rows, experts));
    }
}

TEST(ExpertPassCost, UniformRoutingCountsDistinctExperts) {
    const ExpertPassCost c(kShape, 64);
    EXPECT_DOUBLE_EQ(c.uniform_experts(1), 48.0 * 8);
    EXPECT_NEAR(c.uniform_experts(2), 48 * 128 * (1 - std::pow(120.0 / 128, 2)), 1e-9);
    EXPECT_LT(c.uniform_experts(33), 48.0 * 128);
    EXPECT_GT(c.uniform_experts(33), 48.0 * 110); // 33 tokens touch most of the experts
    EXPECT_DOUBLE_EQ(c.expected_experts(5), c.uniform_experts(5)); // nothing measured yet
}

TEST(ExpertPassCost, FitsFixedPerRowAndPerExpert) {
    ExpertPassCost c(kShape, 64);
    double a = 0, b = 0, e = 0, s = 0;
    EXPECT_FALSE(c.predict(1, s));
    for (int i = 0; i < 10; ++i) c.observe(1, c.uniform_experts(1), pass_seconds(1, c.uniform_experts(1)));
    EXPECT_FALSE(c.coefficients(a, b, e)) << "one-row passes alone cannot tell the terms apart";
    feed(c, 60, 9, [&](int r, double x, double sec) { c.observe(r, x, sec); });
    ASSERT_TRUE(c.coefficients(a, b, e));
    EXPECT_NEAR(a, kFixed, 1e-3 * kFixed);
    EXPECT_NEAR(b, kRow, 1e-3 * kRow);
    EXPECT_NEAR(e, kExpert, 1e-3 * kExpert);
    EXPECT_LE(c.expected_experts(20), c.uniform_experts(20));
    ASSERT_TRUE(c.predict(4, s));
    EXPECT_NEAR(s, pass_seconds(4, c.expected_experts(4)), 1e-12);
}

// Passes of 1, 2, 4 and 8 rows read 384 n^0.25 experts (routers that repeat experts across
// tokens): row counts never measured follow that power, between and beyond them.
TEST(ExpertPassCost, ExpectedExpertsFollowAPowerOfTheRows) {
    ExpertPassCost c(kShape, 64);
    const auto d = [](int n) { return 384.0 * std::pow(n, 0.25); };
    c.observe(1, d(1), 0.1);
    EXPECT_DOUBLE_EQ(c.expected_experts(3), c.uniform_experts(3)); // one row count: uniform routing
    for (int n : {2, 4, 8}) c.observe(n, d(n), 0.1);
    EXPECT_DOUBLE_EQ(c.expected_experts(4), d(4));
    EXPECT_NEAR(c.expected_experts(3), d(3), 1e-9 * d(3));
    EXPECT_NEAR(c.expected_experts(33), d(33), 1e-9 * d(33));
    EXPECT_LT(c.expected_experts(33), 0.2 * c.uniform_experts(33));
}

// A chain whose every guess stands with chance `p` given the one before (as weights).
Proposal chain(int n, float p) {
    Proposal q;
    for (int i = 0; i < n; ++i) {
        q.tokens.push_back(10 + i);
        q.weights.push_back(p);
    }
    return q;
}

// The k with the most expected tokens per second under the synthetic cost (0: plain decoding).
int best_k(const TreeBudget& b, int n, double p) {
    int best = 0;
    double best_rate = 1.0 / b.cost(1), expected = 1.0, chance = 1.0;
    for (int k = 1; k <= n; ++k) {
        chance *= p;
        expected += chance;
        if (expected / b.cost(k + 1) > best_rate) {
            best_rate = expected / b.cost(k + 1);
            best = k;
        }
    }
    return best;
}

TEST(TreeBudgetMoe, ChoosesTheGuessesThatPayForTheExpertsTheyRead) {
    TreeBudget b({}, kShape);
    ExpertPassCost probe(kShape, 64);
    feed(probe, 60, 9, [&](int r, double x, double sec) { b.observe(r, sec, 0, x); });
    // The learned cost is the synthetic machine's (rows and experts both counted).
    EXPECT_NEAR(b.cost(1), pass_seconds(1, probe.uniform_experts(1)), 1e-3 * b.cost(1));
    EXPECT_GT(b.cost(9) / b.cost(1), 2.0); // 9 tokens read about 5x the experts of one
    DecodeStats st;
    st.proposed = 100; // acceptance measured (the chances come from the weights here)
    for (double p : {0.3, 0.5, 0.8, 0.9, 0.97, 0.99}) {
        Proposal q = chain(16, static_cast<float>(p));
        const int want = best_k(b, 16, p);
        EXPECT_EQ(b.choose(q, st, 16), want) << "p " << p;
    }
    EXPECT_EQ(best_k(b, 16, 0.3), 0);  // unlikely guesses never pay for a MoE pass's extra experts
    EXPECT_GT(best_k(b, 16, 0.99), 4); // near-certain guesses pay for wide passes
}

// When no guess pays the policy verifies none, save one probe every kProbeEvery passes; but
// not before kMeasuredGuesses guesses were verified, so a short run still learns.
TEST(TreeBudgetMoe, NoGuessWhenNonePaysButAProbeNowAndThen) {
    TreeBudget b({}, kShape);
    ExpertPassCost probe(kShape, 64);
    feed(probe, 60, 9, [&](int r, double x, double sec) { b.observe(r, sec, 0, x); });
    DecodeStats st;
    Proposal first = chain(8, 0.3f);
    EXPECT_GE(b.choose(first, st, 8), 1) << "no guess verified yet: the best one is";
    st.proposed = TreeBudget::kMeasuredGuesses;
    int verified = 0;
    for (int i = 0; i < 4 * TreeBudget::kProbeEvery; ++i) {
        Proposal q = chain(8, 0.3f);
        const int k = b.choose(q, st, 8);
        if (k > 0) ++verified;
        b.observe(k + 1, b.cost(k + 1), 0, k == 0 ? probe.uniform_experts(1) : probe.uniform_experts(k + 1));
    }
    EXPECT_EQ(verified, 4);
}

// A dense model: rows cost little, so even unlikely guesses pay (the policy as before).
TEST(TreeBudgetDense, CheapRowsKeepGuesses) {
    std::vector<double> curve;
    for (int n = 1; n <= 16; ++n) curve.push_back(1.0 + 0.01 * (n - 1));
    TreeBudget b(curve);
    DecodeStats st;
    st.proposed = 100;
    Proposal q = chain(8, 0.5f);
    EXPECT_GE(b.choose(q, st, 8), 1);
    // A curve as steep as the rows: a guess that is a coin toss never pays.
    std::vector<double> steep;
    for (int n = 1; n <= 16; ++n) steep.push_back(n);
    TreeBudget s(steep);
    Proposal r = chain(8, 0.5f);
    EXPECT_EQ(s.choose(r, st, 8), 0);
}

} // namespace
} // namespace rwd::speculate
