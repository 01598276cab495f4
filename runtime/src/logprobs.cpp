// compute_logprob: one log-softmax over a row (double accumulation in id order) and a bounded
// insertion sort for the top alternatives.
#include "rewind/logprobs.h"

#include <cmath>
#include <limits>

namespace rwd {

void compute_logprob(std::span<const float> row, double inv_temperature, TokenId token, int top_n, TokenLogprob& out) {
    out = TokenLogprob{};
    out.token = token;
    double mx = -std::numeric_limits<double>::infinity();
    for (float l : row) mx = std::max(mx, static_cast<double>(l));
    double sum = 0;
    for (float l : row) sum += std::exp((static_cast<double>(l) - mx) * inv_temperature);
    const double lse = mx * inv_temperature + std::log(sum);
    auto lp = [&](float l) {
        return l == -std::numeric_limits<float>::infinity() ? -std::numeric_limits<float>::infinity()
                                                              : static_cast<float>(static_cast<double>(l) * inv_temperature - lse);
    };
    out.logprob = lp(row[static_cast<size_t>(token)]);
    // The top_n largest, kept sorted (largest first, ties by lower id: ids arrive ascending, so a
    // later equal value goes after).
    int n = 0;
    for (size_t i = 0; i < row.size() && top_n > 0; ++i) {
        const float v = row[i];
        if (n == top_n && !(v > row[static_cast<size_t>(out.top[static_cast<size_t>(n - 1)].token)])) continue;
        int j = n < top_n ? n++ : n - 1;
        while (j > 0 && v > row[static_cast<size_t>(out.top[static_cast<size_t>(j - 1)].token)]) {
            out.top[static_cast<size_t>(j)] = out.top[static_cast<size_t>(j - 1)];
            --j;
        }
        out.top[static_cast<size_t>(j)].token = static_cast<TokenId>(i);
    }
    out.n_top = n;
    for (int j = 0; j < n; ++j) out.top[static_cast<size_t>(j)].logprob = lp(row[static_cast<size_t>(out.top[static_cast<size_t>(j)].token)]);
}

} // namespace rwd
