// Small shared pieces of the guess-source interface.
#include "rewind/speculate/guess_source.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "rewind/error.h"

namespace rwd::speculate {

void check_k(std::string_view source, int k) {
    if (k < 1)
        throw Error(std::string(source) + ": asked for " + std::to_string(k) + " guesses; k must be at least 1");
}

void order_best_first(Proposal& p, std::vector<double>& chance, BestFirstScratch& s) {
    const size_t n = p.tokens.size();
    s.order.resize(n);
    std::iota(s.order.begin(), s.order.end(), 0);
    std::stable_sort(s.order.begin(), s.order.end(), [&](int32_t x, int32_t y) {
        return chance[static_cast<size_t>(x)] > chance[static_cast<size_t>(y)];
    });
    s.where.resize(n);
    for (size_t j = 0; j < n; ++j) s.where[static_cast<size_t>(s.order[j])] = static_cast<int32_t>(j);
    s.tmp.clear();
    s.chance.clear();
    const size_t V = p.probs.empty() ? 0 : p.probs.size() / n;
    for (size_t j = 0; j < n; ++j) {
        const auto i = static_cast<size_t>(s.order[j]);
        const int32_t a = p.parent(i);
        s.tmp.tokens.push_back(p.tokens[i]);
        s.tmp.parents.push_back(a < 0 ? -1 : s.where[static_cast<size_t>(a)]);
        if (!p.weights.empty()) s.tmp.weights.push_back(p.weights[i]);
        if (V) s.tmp.probs.insert(s.tmp.probs.end(), p.probs.begin() + static_cast<std::ptrdiff_t>(i * V),
                                  p.probs.begin() + static_cast<std::ptrdiff_t>((i + 1) * V));
        s.chance.push_back(chance[i]);
    }
    // Forced guesses keep their mark while they keep their places (a child never rises above its
    // parent, so a forced chain, the root's only child, stays first).
    int32_t forced = 0;
    while (forced < p.forced && s.where[static_cast<size_t>(forced)] == forced) ++forced;
    s.tmp.forced = forced;
    std::swap(p, s.tmp);
    std::swap(chance, s.chance);
}

void check_proposal(std::string_view source, const Proposal& p) {
    const size_t n = p.tokens.size();
    auto fail = [&](const std::string& what) { throw Error(ErrorCode::shape, std::string(source) + ": " + what); };
    if (!p.parents.empty()) {
        if (p.parents.size() != n)
            fail(std::to_string(p.parents.size()) + " parents for " + std::to_string(n) + " guesses");
        for (size_t i = 0; i < n; ++i) {
            const int32_t a = p.parents[i];
            if (a < -1 || a >= static_cast<int32_t>(i))
                fail("guess " + std::to_string(i) + " has parent " + std::to_string(a) + " (must be in [-1, " +
                     std::to_string(i) + "))");
            for (size_t j = 0; j < i; ++j)
                if (p.parents[j] == a && p.tokens[j] == p.tokens[i])
                    fail("guesses " + std::to_string(j) + " and " + std::to_string(i) +
                         " are siblings with the same token " + std::to_string(p.tokens[i]));
        }
    }
    if (!p.weights.empty()) {
        if (p.weights.size() != n)
            fail(std::to_string(p.weights.size()) + " weights for " + std::to_string(n) + " guesses");
        for (size_t i = 0; i < n; ++i)
            if (!(p.weights[i] >= 0.0f && p.weights[i] <= 1.0f))
                fail("guess " + std::to_string(i) + " has weight " + std::to_string(p.weights[i]) + " outside [0, 1]");
    }
}

} // namespace rwd::speculate
