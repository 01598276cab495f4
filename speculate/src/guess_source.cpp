// Small shared pieces of the guess-source interface.
#include "rewind/speculate/guess_source.h"

#include <string>

#include "rewind/error.h"

namespace rwd::speculate {

void check_k(std::string_view source, int k) {
    if (k < 1)
        throw Error(std::string(source) + ": asked for " + std::to_string(k) + " guesses; k must be at least 1");
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
