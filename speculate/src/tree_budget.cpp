// TreeBudget: chance of each guess from weights or depth statistics, best-first order, and the
// prefix that maximises (1 + expected accepted guesses) / pass time.
#include "tree_budget.h"

#include <algorithm>

namespace rwd::speculate {

namespace {
constexpr double kPriorSlope = 0.05; // relative cost of a row until passes are measured
constexpr double kSmoothing = 0.2;   // weight of a new observation of a row count's time
constexpr double kSiblingDecay = 0.5; // unweighted later siblings: each half as likely as the one before
// The weights' calibration: accepted / expected guesses over recent passes (each pass's share
// decays by kForget), from a prior of kPrior expected and accepted, so it recovers after a bad run.
constexpr double kForget = 0.95;
constexpr double kPrior = 2.0;
} // namespace

TreeBudget::TreeBudget(std::span<const double> pass_seconds, ExpertShape experts)
    : given_(pass_seconds.begin(), pass_seconds.end()), seen_(static_cast<size_t>(kRows), 0.0), moe_(experts.moe()),
      expert_cost_(experts, kRows) {
    chance_.reserve(kRows);
    by_depth_.reserve(kRows);
    depth_.reserve(kRows);
    rank_.reserve(kRows + 1);
}

// The relative pass time assumed for n rows before any is measured: 5 % more per row; with
// experts, their share grows as the experts n rows are expected to read.
double TreeBudget::prior(int n) const {
    const double rows = 1.0 + kPriorSlope * (n - 1);
    if (!moe_) return rows;
    const double growth = expert_cost_.expected_experts(n) / expert_cost_.expected_experts(1);
    return rows * ((1 - kExpertShare) + kExpertShare * growth);
}

double TreeBudget::cost(int rows) const {
    rows = std::clamp(rows, 1, kRows);
    if (!given_.empty()) {
        const int n = std::min(rows, static_cast<int>(given_.size()));
        return given_[static_cast<size_t>(n - 1)] * prior(rows) / prior(n);
    }
    // With experts, the fitted time of the rows and the experts they are expected to read.
    double fitted = 0;
    if (moe_ && expert_cost_.predict(rows, fitted)) return fitted;
    // The nearest observed row counts around `rows`: interpolate between them, or scale the
    // nearest one by the prior beyond them.
    int lo = rows, hi = rows;
    while (lo >= 1 && seen_[static_cast<size_t>(lo - 1)] <= 0) --lo;
    while (hi <= kRows && seen_[static_cast<size_t>(hi - 1)] <= 0) ++hi;
    if (lo < 1 && hi > kRows) return prior(rows);
    if (lo < 1) return seen_[static_cast<size_t>(hi - 1)] * prior(rows) / prior(hi);
    if (hi > kRows || lo == hi) return seen_[static_cast<size_t>(lo - 1)] * prior(rows) / prior(lo);
    const double a = seen_[static_cast<size_t>(lo - 1)], b = seen_[static_cast<size_t>(hi - 1)];
    return a + (b - a) * (rows - lo) / (hi - lo);
}

bool TreeBudget::measured(const DecodeStats& st) const {
    if (st.proposed < kMeasuredGuesses) return false;
    if (!given_.empty()) return true;
    double a = 0, b = 0, c = 0;
    if (moe_) return expert_cost_.coefficients(a, b, c);
    return std::count_if(seen_.begin(), seen_.end(), [](double s) { return s > 0; }) >= 2;
}

// by_depth_[d]: the run's acceptance at depth d + 1 given the guess above was accepted, for the
// depths up to `n`. Its prior is the depth above's estimate (weighing as two passes), so a depth
// the run has rarely verified is taken to be like the one above it, not a coin toss: otherwise
// short passes would never learn that longer ones pay.
void TreeBudget::depth_chances(const DecodeStats& st, size_t n) {
    by_depth_.resize(n);
    double c = 0.5; // the prior of depth 1
    const size_t known = st.proposed_at.size();
    for (size_t d = 0; d < n; ++d) {
        const double tried = d < known ? std::min<double>(static_cast<double>(st.proposed_at[d]),
                                                          d == 0 ? static_cast<double>(st.proposed_at[0])
                                                                 : static_cast<double>(st.accepted_at[d - 1]))
                                       : 0.0;
        const double got = d < known ? std::min<double>(static_cast<double>(st.accepted_at[d]), tried) : 0.0;
        c = (got + 2.0 * c) / (tried + 2.0);
        by_depth_[d] = c;
    }
}

int TreeBudget::choose(Proposal& p, const DecodeStats& st, int room) {
    const size_t n = p.tokens.size();
    last_kept_ = 0;
    last_predicted_ = 0;
    last_weighted_ = !p.weights.empty();
    if (n == 0 || room <= 0) return 0;
    // Each guess's chance to stand: its parent's times its own conditional chance (parents come
    // first, so theirs and their depths are known).
    const double calib = (accepted_ + kPrior) / (predicted_ + kPrior);
    chance_.assign(n, 0.0);
    depth_.assign(n, 1);
    rank_.assign(n + 1, 0); // rank_[a + 1]: children of a seen so far (a sibling's rank)
    if (p.weights.empty()) depth_chances(st, n);
    for (size_t i = 0; i < n; ++i) {
        const int32_t a = p.parent(i);
        if (a >= 0) depth_[i] = depth_[static_cast<size_t>(a)] + 1;
        double c;
        if (!p.weights.empty()) {
            c = std::min(1.0, p.weights[i] * calib);
        } else {
            c = by_depth_[static_cast<size_t>(depth_[i] - 1)];
            for (int32_t r = rank_[static_cast<size_t>(a + 1)]; r > 0; --r) c *= kSiblingDecay;
        }
        ++rank_[static_cast<size_t>(a + 1)];
        chance_[i] = (a < 0 ? 1.0 : chance_[static_cast<size_t>(a)]) * c;
    }
    order_best_first(p, chance_, best_first_);
    // The prefix with the most expected tokens per second, against a plain pass (one token per
    // one-row pass). When none beats it, no guess, except a probe now and then: a pass without
    // guesses teaches the chances nothing.
    const int most = std::min<int>(room, static_cast<int>(n));
    double expected = 1.0 + chance_[0];
    double best = expected / cost(2);
    int keep = 1;
    const double plain = 1.0 / cost(1);
    for (int m = 2; m <= most; ++m) {
        expected += chance_[static_cast<size_t>(m - 1)];
        const double rate = expected / cost(m + 1);
        if (rate > best) {
            best = rate;
            keep = m;
        }
    }
    // No guess only once both sides are measured: the pass times (the expert fit, or passes of
    // two row counts) and the acceptance (kMeasuredGuesses verified); until then the best prefix
    // is verified, so a short run still learns whether guessing pays.
    if (best <= plain && measured(st) && ++skipped_ < kProbeEvery) return 0;
    skipped_ = 0;
    for (int m = 0; m < keep; ++m) last_predicted_ += chance_[static_cast<size_t>(m)];
    last_kept_ = keep;
    return keep;
}

void TreeBudget::observe(int rows, double seconds, int accepted, double experts) {
    if (moe_) expert_cost_.observe(rows, experts, seconds);
    if (rows >= 1 && rows <= kRows && seconds > 0) {
        double& s = seen_[static_cast<size_t>(rows - 1)];
        s = s > 0 ? (1 - kSmoothing) * s + kSmoothing * seconds : seconds;
    }
    if (last_weighted_ && last_kept_ > 0) {
        predicted_ = kForget * predicted_ + last_predicted_;
        accepted_ = kForget * accepted_ + accepted;
    }
}

} // namespace rwd::speculate
