// Statistics for `rewind bench`: medians and quantiles (robust to the scheduler noise of shared
// machines), per-item ratios, and the token-by-token comparison behind the lossless check.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "rewind/tokenizer.h"

namespace rwd::bench {

// The median; for an even count, the mean of the two middle values. Throws rwd::Error on an
// empty input or a NaN.
double median(std::span<const double> values);

// The q-quantile (0 <= q <= 1) with linear interpolation between order statistics (the
// "type 7" rule of R and NumPy's default). Throws like median(), and on q outside [0, 1].
double quantile(std::span<const double> values, double q);

// A distribution in five numbers. Empty input gives n = 0 and zeros.
struct Summary {
    int64_t n = 0;
    double median = 0, p25 = 0, p75 = 0, min = 0, max = 0;
};
Summary summarize(std::span<const double> values);

// numerator[i] / denominator[i] for each i. Throws rwd::Error if the sizes differ or a
// denominator is not positive (a zero time means the clock failed us, not an infinite speedup).
std::vector<double> ratios(std::span<const double> numerator, std::span<const double> denominator);

// The first position where the two sequences differ, or -1 when they are equal. When one is a
// prefix of the other, the length of the shorter one.
int64_t first_difference(std::span<const TokenId> expected, std::span<const TokenId> actual);

} // namespace rwd::bench
