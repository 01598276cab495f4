// ops: RMSNorm, "norm" rope, SwiGLU and add against double / Eigen references and against the
// float recipe llama.cpp follows; rope at position 0 is the identity; batching never changes a value.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "rewind/error.h"
#include "rewind/kernels/ops.h"

using namespace rwd;

namespace {

using test::randn;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

} // namespace

TEST(RmsNorm, MatchesEigenReference) {
    const int64_t n = 5, dim = 192;
    const auto x = randn(size_t(n * dim), 1, 3.0f);
    const auto w = randn(size_t(dim), 2);
    std::vector<float> out(x.size());
    rms_norm(x.data(), w.data(), n, dim, 1e-5f, out.data());
    using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Mat xm = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(x.data(), n, dim).cast<double>();
    const Eigen::RowVectorXd wv = Eigen::Map<const Eigen::RowVectorXf>(w.data(), dim).cast<double>();
    for (int64_t t = 0; t < n; ++t) {
        const double scale = 1.0 / std::sqrt(xm.row(t).squaredNorm() / double(dim) + 1e-5);
        const Eigen::RowVectorXd ref = (xm.row(t) * scale).cwiseProduct(wv);
        for (int64_t i = 0; i < dim; ++i) EXPECT_NEAR(out[size_t(t * dim + i)], ref(i), 1e-5 * std::fabs(ref(i)) + 1e-6);
    }
}

TEST(RmsNorm, FollowsGgmlFloatRecipe) {
    const int64_t dim = 96;
    const auto x = randn(size_t(dim), 3);
    const auto w = randn(size_t(dim), 4);
    std::vector<float> out(x.size());
    rms_norm(x.data(), w.data(), 1, dim, 1e-5f, out.data());
    double sum = 0;
    for (float v : x) sum += double(v * v);
    const float mean = float(sum / dim);
    const float scale = 1.0f / std::sqrt(mean + 1e-5f);
    for (int64_t i = 0; i < dim; ++i) EXPECT_EQ(out[size_t(i)], (x[size_t(i)] * scale) * w[size_t(i)]);
}

TEST(RmsNorm, BatchingInvariantAndInPlace) {
    const int64_t n = 9, dim = 64;
    const auto x = randn(size_t(n * dim), 5);
    const auto w = randn(size_t(dim), 6);
    std::vector<float> all(x.size());
    rms_norm(x.data(), w.data(), n, dim, 1e-6f, all.data());
    for (int64_t t = 0; t < n; ++t) {
        std::vector<float> one(static_cast<size_t>(dim));
        rms_norm(x.data() + t * dim, w.data(), 1, dim, 1e-6f, one.data());
        EXPECT_EQ(std::memcmp(one.data(), all.data() + t * dim, size_t(dim) * 4), 0);
    }
    std::vector<float> inplace = x;
    rms_norm(inplace.data(), w.data(), n, dim, 1e-6f, inplace.data());
    EXPECT_TRUE(same_bits(inplace, all));
}

TEST(RmsNorm, RejectsBadArguments) {
    float a[4] = {}, w[4] = {};
    EXPECT_THROW(rms_norm(nullptr, w, 1, 4, 1e-5f, a), Error);
    EXPECT_THROW(rms_norm(a, w, 0, 4, 1e-5f, a), Error);
    EXPECT_THROW(rms_norm(a, w, 1, 0, 1e-5f, a), Error);
}

namespace {

// llama.cpp's float recipe for "norm" rope: theta_scale = powf(base, -2/n_rot), theta starts at
// the position and is multiplied by theta_scale pair by pair; cosf/sinf.
void rope_ggml_like(float* x, const int32_t* pos, int64_t n, int64_t heads, int64_t hd, int64_t n_rot, float base) {
    const float theta_scale = std::pow(base, -2.0f / float(n_rot));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t h = 0; h < heads; ++h) {
            float theta = float(pos[t]);
            float* p = x + (t * heads + h) * hd;
            for (int64_t i = 0; i < n_rot; i += 2) {
                const float c = std::cos(theta), s = std::sin(theta);
                const float x0 = p[i], x1 = p[i + 1];
                p[i] = x0 * c - x1 * s;
                p[i + 1] = x0 * s + x1 * c;
                theta *= theta_scale;
            }
        }
}

} // namespace

TEST(Rope, MatchesGgmlRecipeExactlyAndExactMathClosely) {
    const int64_t n = 4, heads = 3, hd = 32;
    const int32_t pos[n] = {0, 1, 77, 511};
    for (int64_t n_rot : {32, 16, 2}) {
        const auto x0 = randn(size_t(n * heads * hd), 7);
        auto x = x0, y = x0;
        rope_norm(x.data(), pos, n, heads, hd, n_rot, 10000.0f);
        rope_ggml_like(y.data(), pos, n, heads, hd, n_rot, 10000.0f);
        EXPECT_TRUE(same_bits(x, y)) << "n_rot " << n_rot;
        for (int64_t t = 0; t < n; ++t)
            for (int64_t h = 0; h < heads; ++h)
                for (int64_t i = 0; i < hd; i += 2) {
                    const size_t o = size_t((t * heads + h) * hd + i);
                    double a = x0[o], b = x0[o + 1];
                    if (i < n_rot) {
                        const double th = pos[t] * std::pow(10000.0, -double(i) / double(n_rot));
                        const double ra = a * std::cos(th) - b * std::sin(th), rb = a * std::sin(th) + b * std::cos(th);
                        a = ra;
                        b = rb;
                    }
                    // float theta drifts by a few ulps of pos * base^-x over the pair index.
                    const double tol = 1e-6 + 4e-7 * pos[t] * (std::fabs(x0[o]) + std::fabs(x0[o + 1]));
                    EXPECT_NEAR(x[o], a, tol);
                    EXPECT_NEAR(x[o + 1], b, tol);
                    if (i >= n_rot) {
                        EXPECT_EQ(x[o], x0[o]);
                        EXPECT_EQ(x[o + 1], x0[o + 1]);
                    }
                }
    }
}

TEST(Rope, PositionZeroIsIdentity) {
    const auto x0 = randn(6 * 64, 8);
    auto x = x0;
    const int32_t pos[2] = {0, 0};
    rope_norm(x.data(), pos, 2, 3, 64, 64, 10000.0f);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], x0[i]);
}

TEST(Rope, BatchingInvariant) {
    const int64_t n = 9, heads = 6, hd = 32;
    const auto x0 = randn(size_t(n * heads * hd), 9);
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) pos[size_t(t)] = int32_t(100 + 3 * t);
    auto all = x0;
    rope_norm(all.data(), pos.data(), n, heads, hd, hd, 10000.0f);
    for (int64_t t = 0; t < n; ++t) {
        std::vector<float> one(x0.begin() + t * heads * hd, x0.begin() + (t + 1) * heads * hd);
        rope_norm(one.data(), &pos[size_t(t)], 1, heads, hd, hd, 10000.0f);
        EXPECT_EQ(std::memcmp(one.data(), all.data() + t * heads * hd, one.size() * 4), 0);
    }
}

TEST(Rope, LongHeadsUseTheSameRecurrence) {
    // More pairs than the kernel's per-token angle cache (64): the recurrence continues across.
    const int64_t hd = 256;
    const auto x0 = randn(size_t(2 * hd), 10);
    auto x = x0, y = x0;
    const int32_t pos[1] = {300};
    rope_norm(x.data(), pos, 1, 2, hd, hd, 500000.0f);
    rope_ggml_like(y.data(), pos, 1, 2, hd, hd, 500000.0f);
    EXPECT_TRUE(same_bits(x, y));
}

TEST(Rope, RejectsBadArguments) {
    float x[64] = {};
    const int32_t pos[1] = {0};
    EXPECT_THROW(rope_norm(x, pos, 1, 1, 32, 33, 10000.0f), Error);
    EXPECT_THROW(rope_norm(x, pos, 1, 1, 32, 34, 10000.0f), Error);
    EXPECT_THROW(rope_norm(x, pos, 1, 1, 32, 0, 10000.0f), Error);
    EXPECT_THROW(rope_norm(x, nullptr, 1, 1, 32, 32, 10000.0f), Error);
    EXPECT_THROW(rope_norm(x, pos, 0, 1, 32, 32, 10000.0f), Error);
    EXPECT_THROW(rope_norm(x, pos, 1, 1, 32, 32, 0.0f), Error);
}

namespace {

std::vector<SimdLevel> levels() { return supported_simd_levels(); }

} // namespace

TEST(Swiglu, MatchesReference) {
    const auto g = randn(1003, 11, 4.0f);
    auto u = randn(1003, 12);
    for (SimdLevel level : levels()) {
        std::vector<float> out(g.size());
        swiglu(g.data(), u.data(), int64_t(g.size()), out.data(), level);
        for (size_t i = 0; i < g.size(); ++i) {
            const double gd = g[i];
            const double ref = gd / (1.0 + std::exp(-gd)) * u[i];
            EXPECT_NEAR(out[i], ref, 1e-6 * std::fabs(ref) + 1e-7) << simd_name(level) << " " << i;
        }
        // Extremes: silu of very negative inputs is -0, of large ones the input itself.
        const float ge[6] = {-200.0f, -50.0f, 50.0f, 0.0f, -100.0f, 100.0f}, ue[6] = {1.0f, 1.0f, 2.0f, 3.0f, 1.0f, 1.0f};
        float oe[6];
        swiglu(ge, ue, 6, oe, level);
        EXPECT_EQ(oe[0], 0.0f) << simd_name(level);
        EXPECT_NEAR(oe[1], -50.0 * std::exp(-50.0), 1e-5 * 50.0 * std::exp(-50.0)) << simd_name(level);
        EXPECT_EQ(oe[2], 100.0f) << simd_name(level);
        EXPECT_EQ(oe[3], 0.0f) << simd_name(level);
        EXPECT_EQ(oe[4], 0.0f) << simd_name(level);
        EXPECT_EQ(oe[5], 100.0f) << simd_name(level);
        // In place on the gate buffer.
        auto g2 = g;
        swiglu(g2.data(), u.data(), int64_t(g.size()), g2.data(), level);
        EXPECT_TRUE(same_bits(g2, out)) << simd_name(level);
    }
    EXPECT_THROW(swiglu(nullptr, u.data(), 4, u.data()), Error);
    if (detect_simd() != SimdLevel::Avx512) {
        EXPECT_THROW(swiglu(g.data(), u.data(), 4, u.data(), SimdLevel::Avx512), Error);
    }
}

TEST(Swiglu, EveryLevelGivesTheScalarModelsBits) {
    // The scalar body reproduces the AVX2 body's exp exactly, so a model's logits do not depend on
    // the SIMD level it runs at: random inputs over exp's whole range, the clamp edges, zeros,
    // infinities, NaN (its sign and payload aside: compared as "is NaN").
    auto g = randn(4096, 21, 40.0f);
    const float inf = std::numeric_limits<float>::infinity();
    for (float e : {-87.0f, -86.99999f, -87.00001f, 88.3762626647949f, 88.37627f, 88.0f, -88.0f, 0.0f, -0.0f, 1e-30f,
                    -1e-30f, 1e-45f, 0.5f, -0.5f, 1.5f, 2.5f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()})
        g.push_back(e);
    for (int i = -2000; i <= 2000; ++i) g.push_back(float(i) * 0.0441f); // n rounding ties and near-ties
    std::vector<float> u(g.size(), 1.0f);
    const auto n = int64_t(g.size());
    std::vector<float> want(g.size());
    swiglu(g.data(), u.data(), n, want.data(), SimdLevel::Scalar);
    for (SimdLevel level : levels()) {
        std::vector<float> out(g.size());
        swiglu(g.data(), u.data(), n, out.data(), level);
        for (size_t i = 0; i < g.size(); ++i) {
            if (std::isnan(want[i])) {
                EXPECT_TRUE(std::isnan(out[i])) << simd_name(level) << " g " << g[i];
                continue;
            }
            EXPECT_EQ(std::memcmp(&out[i], &want[i], 4), 0)
                << simd_name(level) << " g " << g[i] << ": " << out[i] << " vs scalar " << want[i];
        }
    }
}

TEST(Swiglu, ElementNeverDependsOnItsIndexOrCount) {
    // FFN widths need not be multiples of the vector width: a token's slice must come out the
    // same alone or inside a batch, wherever the vector tail falls.
    const auto g = randn(100, 15, 3.0f);
    const auto u = randn(100, 16);
    for (SimdLevel level : levels()) {
        std::vector<float> all(100);
        swiglu(g.data(), u.data(), 100, all.data(), level);
        for (int64_t b : {0, 1, 5, 13, 37}) {
            for (int64_t n : {1, 3, 9, 20}) {
                if (b + n > 100) continue;
                std::vector<float> part(static_cast<size_t>(n));
                swiglu(g.data() + b, u.data() + b, n, part.data(), level);
                EXPECT_EQ(std::memcmp(part.data(), all.data() + b, size_t(n) * 4), 0) << simd_name(level) << " " << b << " " << n;
            }
        }
    }
}

TEST(AddInplace, Adds) {
    auto y = randn(77, 13);
    const auto x = randn(77, 14);
    const auto y0 = y;
    add_inplace(y.data(), x.data(), 77);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], y0[i] + x[i]);
    EXPECT_THROW(add_inplace(nullptr, x.data(), 1), Error);
}

// rope(): with mode Norm and no scaling it is rope_norm bit for bit; Neox rotates (i, i + n/2)
// pairs; frequency factors divide the angles and linear scaling multiplies them, as a
// double-precision reference of the same formula says.
TEST(RopeExt, NormModeIsRopeNormBitForBit) {
    const int32_t pos[] = {0, 7, 300, 2047};
    for (int64_t n_rot : {32, 16}) {
        auto a = randn(4 * 3 * 32, 41), b = a;
        rope_norm(a.data(), pos, 4, 3, 32, n_rot, 500000.0f);
        RopeParams p;
        p.n_rot = n_rot;
        p.freq_base = 500000.0f;
        rope(b.data(), pos, 4, 3, 32, p);
        EXPECT_TRUE(same_bits(a, b)) << n_rot;
    }
}

TEST(RopeExt, NeoxFactorsAndScalingMatchReference) {
    const int64_t heads = 2, hd = 32, n = 5;
    const int32_t pos[] = {0, 1, 17, 400, 1999};
    std::vector<float> ff(hd / 2);
    for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + 0.5f * float(i);
    for (RopeMode mode : {RopeMode::Norm, RopeMode::Neox}) {
        for (int64_t n_rot : {hd, hd / 2}) {
            for (bool factors : {false, true}) {
                for (float fscale : {1.0f, 0.25f}) {
                    RopeParams p{mode, n_rot, 10000.0f, fscale, factors ? ff.data() : nullptr};
                    const auto x0 = randn(size_t(n * heads * hd), 43);
                    auto x = x0;
                    rope(x.data(), pos, n, heads, hd, p);
                    for (int64_t t = 0; t < n; ++t)
                        for (int64_t h = 0; h < heads; ++h)
                            for (int64_t i = 0; i < n_rot / 2; ++i) {
                                const double th = double(fscale) * double(pos[t]) *
                                                  std::pow(10000.0, -2.0 * double(i) / double(n_rot)) /
                                                  (factors ? double(ff[size_t(i)]) : 1.0);
                                const int64_t base = (t * heads + h) * hd;
                                const int64_t a = base + (mode == RopeMode::Norm ? 2 * i : i);
                                const int64_t b = a + (mode == RopeMode::Norm ? 1 : n_rot / 2);
                                const double r0 = x0[a] * std::cos(th) - x0[b] * std::sin(th);
                                const double r1 = x0[a] * std::sin(th) + x0[b] * std::cos(th);
                                ASSERT_NEAR(x[a], r0, 2e-3) << int(mode) << " t " << t << " i " << i;
                                ASSERT_NEAR(x[b], r1, 2e-3) << int(mode) << " t " << t << " i " << i;
                            }
                    // Dimensions past n_rot pass through.
                    for (int64_t t = 0; t < n; ++t)
                        for (int64_t h = 0; h < heads; ++h)
                            for (int64_t d = n_rot; d < hd; ++d) {
                                const int64_t k = (t * heads + h) * hd + d;
                                ASSERT_EQ(x[k], x0[k]);
                            }
                    // A token alone gives the same bits as inside the batch.
                    for (int64_t t = 0; t < n; ++t) {
                        std::vector<float> one(x0.begin() + t * heads * hd, x0.begin() + (t + 1) * heads * hd);
                        rope(one.data(), &pos[t], 1, heads, hd, p);
                        ASSERT_EQ(0, std::memcmp(one.data(), x.data() + t * heads * hd, one.size() * 4));
                    }
                }
            }
        }
    }
}

TEST(RopeExt, RejectsBadArguments) {
    float x[32] = {};
    const int32_t pos[] = {1};
    float bad_ff[16];
    for (float& f : bad_ff) f = 1.0f;
    bad_ff[3] = 0.0f;
    RopeParams p{RopeMode::Neox, 32, 10000.0f, 1.0f, nullptr};
    EXPECT_NO_THROW(rope(x, pos, 1, 1, 32, p));
    RopeParams q = p;
    q.freq_factors = bad_ff;
    EXPECT_THROW(rope(x, pos, 1, 1, 32, q), Error);
    q = p;
    q.freq_scale = 0.0f;
    EXPECT_THROW(rope(x, pos, 1, 1, 32, q), Error);
    q = p;
    q.n_rot = 34;
    EXPECT_THROW(rope(x, pos, 1, 1, 32, q), Error);
    EXPECT_THROW(rope(nullptr, pos, 1, 1, 32, p), Error);
}

// GELU (tanh form) times up, in float in a fixed order: near the double formula, elementwise.
TEST(Geglu, MatchesReferenceAndIsElementwise) {
    const auto g = randn(1001, 51, 3.0f);
    const auto u = randn(1001, 52);
    std::vector<float> out(g.size());
    geglu(g.data(), u.data(), int64_t(g.size()), out.data());
    for (size_t i = 0; i < g.size(); ++i) {
        const double x = g[i];
        const double ref = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * x * (1.0 + 0.044715 * x * x))) * u[i];
        EXPECT_NEAR(out[i], ref, 1e-5 * std::fabs(ref) + 1e-6) << i;
    }
    std::vector<float> part(10);
    geglu(g.data() + 37, u.data() + 37, 10, part.data());
    EXPECT_EQ(0, std::memcmp(part.data(), out.data() + 37, 40));
    auto g2 = g;
    geglu(g2.data(), u.data(), int64_t(g.size()), g2.data());
    EXPECT_TRUE(same_bits(g2, out));
    EXPECT_THROW(geglu(nullptr, u.data(), 1, out.data()), Error);
}

TEST(AddBiasAndScale, Elementwise) {
    auto x = randn(3 * 5, 61);
    const auto x0 = x;
    const auto b = randn(5, 62);
    add_bias(x.data(), b.data(), 3, 5);
    for (int t = 0; t < 3; ++t)
        for (int i = 0; i < 5; ++i) EXPECT_EQ(x[size_t(t * 5 + i)], x0[size_t(t * 5 + i)] + b[size_t(i)]);
    scale_inplace(x.data(), 15, 0.5f);
    for (int i = 0; i < 15; ++i) EXPECT_EQ(x[size_t(i)], (x0[size_t(i)] + b[size_t(i % 5)]) * 0.5f);
    EXPECT_THROW(add_bias(nullptr, b.data(), 1, 5), Error);
    EXPECT_THROW(add_bias(x.data(), b.data(), 1, 0), Error);
    EXPECT_THROW(scale_inplace(nullptr, 1, 1.0f), Error);
}
