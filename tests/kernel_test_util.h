// Shared helpers of the kernel tests: seeded random inputs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace rwd::test {

// n floats from N(0, sd²), the same for the same seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    return v;
}

} // namespace rwd::test
