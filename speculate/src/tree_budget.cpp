// TreeBudget: chance of each guess from weights or depth statistics, best-first order, and the
// prefix that maximises (1 + expected accepted guesses) / pass time.
#include "tree_budget.h"

#include <algorithm>
#include <numeric>

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

TreeBudget::TreeBudget(std::span<const double> pass_seconds)
    : given_(pass_seconds.begin(), pass_seconds.end()), seen_(static_cast<size_t>(kRows), 0.0) {
    chance_.reserve(kRows);
    order_.reserve(kRows);
    where_.reserve(kRows);
}

double TreeBudget::cost(int rows) const {
    rows = std::clamp(rows, 1, kRows);
    const auto prior = [](int n) { return 1.0 + kPriorSlope * (n - 1); };
    if (!given_.empty()) {
        const int n = std::min(rows, static_cast<int>(given_.size()));
        return given_[static_cast<size_t>(n - 1)] * prior(rows) / prior(n);
    }
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

// The run's acceptance at `depth` given the guess above was accepted. Its prior is the depth
// above's estimate (weighing as two passes), so a depth the run has rarely verified is taken to
// be like the one above it, not a coin toss: otherwise short passes would never learn that
// longer ones pay.
double TreeBudget::depth_chance(const DecodeStats& st, int depth) {
    double c = 0.5; // the prior of depth 1
    const size_t n = st.proposed_at.size();
    for (size_t d = 0; d < static_cast<size_t>(depth); ++d) {
        const double tried = d < n ? std::min<double>(static_cast<double>(st.proposed_at[d]),
                                                      d == 0 ? static_cast<double>(st.proposed_at[0])
                                                             : static_cast<double>(st.accepted_at[d - 1]))
                                   : 0.0;
        const double got = d < n ? std::min<double>(static_cast<double>(st.accepted_at[d]), tried) : 0.0;
        c = (got + 2.0 * c) / (tried + 2.0);
    }
    return c;
}

int TreeBudget::choose(Proposal& p, const DecodeStats& st, int room) {
    const size_t n = p.tokens.size();
    last_kept_ = 0;
    last_predicted_ = 0;
    last_weighted_ = !p.weights.empty();
    if (n == 0 || room <= 0) return 0;
    // Each guess's chance to stand: its parent's times its own conditional chance.
    const double calib = (accepted_ + kPrior) / (predicted_ + kPrior);
    chance_.assign(n, 0.0);
    where_.assign(n + 1, 0); // where_[a + 1]: children of a seen so far (sibling rank)
    for (size_t i = 0; i < n; ++i) {
        const int32_t a = p.parent(i);
        const double up = a < 0 ? 1.0 : chance_[static_cast<size_t>(a)];
        int depth = 1;
        for (int32_t x = a; x >= 0; x = p.parent(static_cast<size_t>(x))) ++depth;
        double c;
        if (!p.weights.empty()) {
            c = std::min(1.0, p.weights[i] * calib);
        } else {
            c = depth_chance(st, depth);
            for (int32_t r = where_[static_cast<size_t>(a + 1)]; r > 0; --r) c *= kSiblingDecay;
        }
        ++where_[static_cast<size_t>(a + 1)];
        chance_[i] = up * c;
    }
    // Best first; on ties the earlier guess, so a parent (never less likely) precedes its children.
    order_.resize(n);
    std::iota(order_.begin(), order_.end(), 0);
    std::stable_sort(order_.begin(), order_.end(), [&](int32_t x, int32_t y) {
        return chance_[static_cast<size_t>(x)] > chance_[static_cast<size_t>(y)];
    });
    // The prefix with the most expected tokens per second.
    const int most = std::min<int>(room, static_cast<int>(n));
    // At least the best guess: a pass without one would teach the calibration nothing.
    double expected = 1.0 + chance_[static_cast<size_t>(order_[0])];
    double best = expected / cost(2);
    int keep = 1;
    for (int m = 2; m <= most; ++m) {
        expected += chance_[static_cast<size_t>(order_[static_cast<size_t>(m - 1)])];
        const double rate = expected / cost(m + 1);
        if (rate > best) {
            best = rate;
            keep = m;
        }
    }
    for (int m = 0; m < keep; ++m) last_predicted_ += chance_[static_cast<size_t>(order_[static_cast<size_t>(m)])];
    last_kept_ = keep;
    // Reorder the proposal (parents remapped; weights and distributions follow their guesses).
    where_.assign(n, 0);
    for (size_t j = 0; j < n; ++j) where_[static_cast<size_t>(order_[j])] = static_cast<int32_t>(j);
    tmp_.clear();
    const size_t V = p.probs.empty() ? 0 : p.probs.size() / n;
    for (size_t j = 0; j < n; ++j) {
        const auto i = static_cast<size_t>(order_[j]);
        tmp_.tokens.push_back(p.tokens[i]);
        const int32_t a = p.parent(i);
        tmp_.parents.push_back(a < 0 ? -1 : where_[static_cast<size_t>(a)]);
        if (!p.weights.empty()) tmp_.weights.push_back(p.weights[i]);
        if (V) tmp_.probs.insert(tmp_.probs.end(), p.probs.begin() + static_cast<std::ptrdiff_t>(i * V),
                                 p.probs.begin() + static_cast<std::ptrdiff_t>((i + 1) * V));
    }
    std::swap(p, tmp_);
    return keep;
}

void TreeBudget::observe(int rows, double seconds, int accepted) {
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
