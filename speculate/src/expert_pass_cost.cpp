// ExpertPassCost: decayed normal equations over (1, rows, experts) solved when asked, and the
// expected experts per row count from the passes seen, or uniform routing scaled by them.
#include "expert_pass_cost.h"

#include <algorithm>
#include <cmath>

namespace rwd::speculate {

namespace {
constexpr double kDecay = 0.967;    // about the last 30 passes
constexpr double kSmoothing = 0.2;  // weight of a new pass in a row count's expected experts

// Solves the k x k system a x = b (k <= 3) by elimination with partial pivoting; false when a
// pivot is tiny against the matrix's scale (rows and experts not yet told apart).
bool solve(double a[3][3], double b[3], int k, double x[3]) {
    double scale = 0;
    for (int i = 0; i < k; ++i)
        for (int j = 0; j < k; ++j) scale = std::max(scale, std::fabs(a[i][j]));
    if (!(scale > 0)) return false;
    for (int c = 0; c < k; ++c) {
        int p = c;
        for (int r = c + 1; r < k; ++r)
            if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
        if (std::fabs(a[p][c]) < 1e-10 * scale) return false;
        std::swap(a[c], a[p]);
        std::swap(b[c], b[p]);
        for (int r = c + 1; r < k; ++r) {
            const double f = a[r][c] / a[c][c];
            for (int j = c; j < k; ++j) a[r][j] -= f * a[c][j];
            b[r] -= f * b[c];
        }
    }
    for (int c = k - 1; c >= 0; --c) {
        double v = b[c];
        for (int j = c + 1; j < k; ++j) v -= a[c][j] * x[j];
        x[c] = v / a[c][c];
    }
    return true;
}
} // namespace

ExpertPassCost::ExpertPassCost(ExpertShape s, int max_rows)
    : s_(s), seen_experts_(static_cast<size_t>(std::max(max_rows, 1)), 0.0) {}

double ExpertPassCost::uniform_experts(int rows) const {
    const double ne = static_cast<double>(s_.n_expert), k = static_cast<double>(s_.n_used);
    return static_cast<double>(s_.n_layer) * ne * (1.0 - std::pow(1.0 - k / ne, std::max(rows, 1)));
}

double ExpertPassCost::expected_experts(int rows) const {
    const int max_rows = static_cast<int>(seen_experts_.size());
    rows = std::clamp(rows, 1, max_rows);
    const auto seen = [&](int n) { return seen_experts_[static_cast<size_t>(n - 1)]; };
    if (seen(rows) > 0) return seen(rows);
    // The measured row counts around `rows`: experts grow about as a power of the rows (routers
    // repeat experts across tokens, more so the more tokens), so interpolate, or extend the
    // slope of the last two measured counts, in log-log; never above uniform routing.
    int lo = rows, hi = rows;
    while (lo >= 1 && seen(lo) <= 0) --lo;
    while (hi <= max_rows && seen(hi) <= 0) ++hi;
    int a = lo, b = hi; // the pair whose slope is used
    if (hi > max_rows) {
        b = lo;
        a = lo - 1;
        while (a >= 1 && seen(a) <= 0) --a;
    }
    if (a < 1 || b > max_rows || a == b) return uniform_experts(rows); // fewer than two measured
    const double slope = std::log(seen(b) / seen(a)) / std::log(static_cast<double>(b) / a);
    const double from = std::log(static_cast<double>(rows) / a);
    return std::clamp(seen(a) * std::exp(slope * from), uniform_experts(1), uniform_experts(rows));
}

void ExpertPassCost::observe(int rows, double experts, double seconds) {
    if (rows < 1 || rows > static_cast<int>(seen_experts_.size()) || !(seconds > 0) || !(experts > 0)) return;
    double& e = seen_experts_[static_cast<size_t>(rows - 1)];
    e = e > 0 ? (1 - kSmoothing) * e + kSmoothing * experts : experts;
    const double f[3] = {1.0, static_cast<double>(rows), experts};
    for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) n_[i][j] = kDecay * n_[i][j] + f[i] * f[j];
        t_[i] = kDecay * t_[i] + f[i] * seconds;
    }
}

bool ExpertPassCost::coefficients(double& fixed, double& per_row, double& per_expert) const {
    if (n_[0][0] < 2) return false;
    double a[3][3], b[3], x[3] = {};
    for (int i = 0; i < 3; ++i) {
        b[i] = t_[i];
        for (int j = 0; j < 3; ++j) a[i][j] = n_[i][j];
    }
    if (solve(a, b, 3, x) && x[0] > 0 && x[1] >= 0 && x[2] > 0) {
        fixed = x[0];
        per_row = x[1];
        per_expert = x[2];
        return true;
    }
    // Without rows: the normal equations over (1, experts).
    double a2[3][3] = {{n_[0][0], n_[0][2], 0}, {n_[2][0], n_[2][2], 0}, {0, 0, 0}}, b2[3] = {t_[0], t_[2], 0};
    if (solve(a2, b2, 2, x) && x[0] > 0 && x[1] > 0) {
        fixed = x[0];
        per_row = 0;
        per_expert = x[1];
        return true;
    }
    return false;
}

bool ExpertPassCost::predict(int rows, double& seconds) const {
    double a = 0, b = 0, c = 0;
    if (!coefficients(a, b, c)) return false;
    seconds = a + b * rows + c * expected_experts(rows);
    return true;
}

} // namespace rwd::speculate
