// Order statistics and ratios for the benchmark harness. Inputs are copied before sorting so
// callers keep their per-repeat order (the JSON report records it).
#include "rewind/bench/bench_stats.h"

#include <algorithm>
#include <cmath>

#include "rewind/error.h"

namespace rwd::bench {
namespace {

std::vector<double> sorted_copy(std::span<const double> values, const char* what) {
    if (values.empty()) throw Error(std::string(what) + " of an empty set");
    std::vector<double> v(values.begin(), values.end());
    for (double x : v)
        if (std::isnan(x)) throw Error(std::string(what) + " of a set containing NaN");
    std::sort(v.begin(), v.end());
    return v;
}

double quantile_sorted(const std::vector<double>& v, double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    const double frac = pos - static_cast<double>(lo);
    return v[lo] + (v[hi] - v[lo]) * frac;
}

} // namespace

double median(std::span<const double> values) {
    auto v = sorted_copy(values, "median");
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

double quantile(std::span<const double> values, double q) {
    if (!(q >= 0.0 && q <= 1.0)) throw Error("quantile: q must lie in [0, 1]");
    return quantile_sorted(sorted_copy(values, "quantile"), q);
}

Summary summarize(std::span<const double> values) {
    Summary s;
    if (values.empty()) return s;
    auto v = sorted_copy(values, "summary");
    s.n = static_cast<int64_t>(v.size());
    s.median = quantile_sorted(v, 0.5); // equals median() for odd and even counts
    s.p25 = quantile_sorted(v, 0.25);
    s.p75 = quantile_sorted(v, 0.75);
    s.min = v.front();
    s.max = v.back();
    return s;
}

std::vector<double> ratios(std::span<const double> numerator, std::span<const double> denominator) {
    if (numerator.size() != denominator.size())
        throw Error(ErrorCode::shape, "ratios: " + std::to_string(numerator.size()) + " numerators but " +
                    std::to_string(denominator.size()) + " denominators");
    std::vector<double> out(numerator.size());
    for (size_t i = 0; i < out.size(); ++i) {
        if (!(denominator[i] > 0.0)) throw Error("ratios: denominator " + std::to_string(i) + " is not positive");
        out[i] = numerator[i] / denominator[i];
    }
    return out;
}

int64_t first_difference(std::span<const TokenId> expected, std::span<const TokenId> actual) {
    const size_t n = std::min(expected.size(), actual.size());
    for (size_t i = 0; i < n; ++i)
        if (expected[i] != actual[i]) return static_cast<int64_t>(i);
    if (expected.size() != actual.size()) return static_cast<int64_t>(n);
    return -1;
}

} // namespace rwd::bench
