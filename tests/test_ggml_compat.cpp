// ggml_compat: llama.cpp's CPU numerics reproduced. The dot-product order gives the same bits on
// its scalar and AVX2 paths and whatever the thread count; each flash-attention body stays within
// rounding of the double-precision reference, keeps a row's value independent of the other rows
// of its call, and rounds where ggml rounds (F16 one-chunk vs F32 tiles).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "rewind/error.h"
#include "rewind/kernels/ggml_compat.h"
#include "rewind/kernels/ops.h"
#include "matmul_reference.h"

using namespace rwd;

namespace {


std::vector<std::byte> as_type(const std::vector<float>& x, DType type) {
    std::vector<std::byte> out(x.size() * (type == DType::F32 ? 4 : 2));
    for (size_t i = 0; i < x.size(); ++i) {
        if (type == DType::F32) {
            std::memcpy(out.data() + 4 * i, &x[i], 4);
        } else {
            const uint16_t h = fp32_to_fp16(x[i]);
            std::memcpy(out.data() + 2 * i, &h, 2);
        }
    }
    return out;
}

std::vector<float> mm(const MatrixView& w, const std::vector<float>& x, int64_t n, ThreadPool* pool, SimdLevel level) {
    std::vector<float> y(size_t(n * w.rows), NAN);
    matmul_ggml(w, x.data(), n, y.data(), pool, level);
    return y;
}

struct AttCase {
    AttentionShape s;
    DType type;
    std::vector<float> q;
    std::vector<std::byte> k, v;
};

AttCase att_case(AttentionShape s, DType type, uint32_t seed) {
    const size_t kv = size_t((s.pos0 + s.n_tokens) * s.n_head_kv * s.head_dim);
    return {s, type, test::randn(size_t(s.n_tokens * s.n_head * s.head_dim), seed), as_type(test::randn(kv, seed + 1), type),
            as_type(test::randn(kv, seed + 2), type)};
}

std::vector<float> att(const AttCase& c, const AttentionShape& s, const float* q, GgmlFaPath path, ThreadPool* pool) {
    std::vector<float> out(size_t(s.n_tokens * s.n_head * s.head_dim), NAN);
    std::vector<float> scratch(size_t(attention_ggml_scratch_floats(s, pool ? pool->size() : 1)));
    attention_ggml(s, path, q, c.k.data(), c.v.data(), c.type, out.data(), scratch.data(), pool);
    return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    return d;
}

} // namespace

TEST(GgmlCompat, MatmulSameBitsOnEveryPathAndThreadCount) {
    ThreadPool pool(3);
    // 192 and 512: whole 64-column steps; 96 and 100: a tail summed in double; 40: tail only.
    for (int64_t cols : {40, 96, 100, 192, 512}) {
        const int64_t rows = 37, n = 5;
        const std::vector<float> wf = test::randn(size_t(rows * cols), uint32_t(cols));
        const MatrixView w{DType::F32, wf.data(), rows, cols};
        const std::vector<float> x = test::randn(size_t(n * cols), uint32_t(cols) + 7);
        const std::vector<float> base = mm(w, x, n, nullptr, SimdLevel::Scalar);
        for (SimdLevel level : supported_simd_levels()) {
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
                const std::vector<float> y = mm(w, x, n, p, level);
                EXPECT_EQ(0, std::memcmp(y.data(), base.data(), y.size() * sizeof(float)))
                    << "cols " << cols << ", " << simd_name(level);
            }
        }
        // A token's row does not depend on the other tokens of a multi-row call (nor, where ggml
        // would use its vector dot for both, on whether it ran alone).
        const std::vector<float> two = mm(w, std::vector<float>(x.end() - 2 * cols, x.end()), 2, nullptr, detect_simd());
        EXPECT_EQ(0, std::memcmp(two.data(), base.data() + (n - 2) * rows, size_t(2 * rows) * sizeof(float)));
        const std::vector<float> one = mm(w, std::vector<float>(x.end() - cols, x.end()), 1, nullptr, detect_simd());
        if (cols % 16 != 0) {
            EXPECT_EQ(0, std::memcmp(one.data(), base.data() + (n - 1) * rows, size_t(rows) * sizeof(float)));
        }
        for (SimdLevel level : supported_simd_levels())
            EXPECT_EQ(0, std::memcmp(one.data(), mm(w, std::vector<float>(x.end() - cols, x.end()), 1, &pool, level).data(),
                                     size_t(rows) * sizeof(float)));
        std::vector<float> ref(base.size());
        matmul_reference(w, x.data(), n, ref.data());
        EXPECT_LT(max_abs_diff(base, ref), 1e-4) << "cols " << cols;
    }
}

TEST(GgmlCompat, MatmulFollowsGgmlOrder) {
    // 64 columns: column 0's product is 2^24, the other 63 are 1 (exact sum 2^24 + 63). Column 0
    // sits in lane 0 of accumulator 0; columns 16, 32 and 48 share that lane in accumulators 1..3.
    // Accumulators 0 += 2 first: 2^24 + 1 rounds (to even) to 2^24 and that 1 is lost; 1 += 3
    // and every other lane stay exact, so ggml's order gives 2^24 + 62. (A sequential sum would
    // lose all 63: 2^24 + 1 == 2^24 in float.)
    std::vector<float> w(64, 1.0f), x(64, 1.0f);
    w[0] = 16777216.0f;
    const MatrixView mv{DType::F32, w.data(), 1, 64};
    for (SimdLevel level : supported_simd_levels())
        EXPECT_EQ(mm(mv, x, 1, nullptr, level)[0], 16777216.0f + 62.0f) << simd_name(level);
}

TEST(GgmlCompat, MatmulOfSeveralRowsFollowsTinyBlasOrder) {
    // 32 columns, column 0's product 2^24, the others 1 (exact sum 2^24 + 31). Two or more rows
    // go through tinyBLAS: lane 0 takes columns 0 and 16 (2^24 + 1 rounds to 2^24), the other
    // lanes 2 each; halving the lanes then stays exact: 2^24 + 30. A single row runs ggml's
    // vector dot: under 64 columns all in double, 2^24 + 31, rounded to float: 2^24 + 32.
    std::vector<float> w(32, 1.0f), x(64, 1.0f);
    w[0] = 16777216.0f;
    const MatrixView mv{DType::F32, w.data(), 1, 32};
    for (SimdLevel level : supported_simd_levels()) {
        const std::vector<float> y2 = mm(mv, x, 2, nullptr, level);
        EXPECT_EQ(y2[0], 16777216.0f + 30.0f) << simd_name(level);
        EXPECT_EQ(y2[1], 16777216.0f + 30.0f) << simd_name(level);
        EXPECT_EQ(mm(mv, x, 1, nullptr, level)[0], 16777216.0f + 32.0f) << simd_name(level);
    }
}

TEST(GgmlCompat, MatmulRejectsBadInput) {
    const std::vector<float> wf(64, 1.0f), x(64, 1.0f);
    std::vector<float> y(1);
    const MatrixView w{DType::F32, wf.data(), 1, 64};
    EXPECT_THROW(matmul_ggml(w, nullptr, 1, y.data(), nullptr), Error);
    EXPECT_THROW(matmul_ggml(w, x.data(), 0, y.data(), nullptr), Error);
    EXPECT_THROW(matmul_ggml({DType::F32, wf.data(), 0, 64}, x.data(), 1, y.data(), nullptr), Error);
    EXPECT_FALSE(matmul_ggml_supports(DType::Q8_0));
    EXPECT_FALSE(matmul_ggml_supports(DType::F16));
    EXPECT_THROW(matmul_ggml({DType::Q8_0, wf.data(), 1, 64}, x.data(), 1, y.data(), nullptr), Error);
}

TEST(GgmlCompat, FaPathFollowsPassSize) {
    EXPECT_EQ(ggml_fa_path(1, 32), GgmlFaPath::OneChunk);
    EXPECT_EQ(ggml_fa_path(63, 32), GgmlFaPath::OneChunk);
    EXPECT_EQ(ggml_fa_path(64, 32), GgmlFaPath::Tiled);
    EXPECT_EQ(ggml_fa_path(400, 128), GgmlFaPath::Tiled);
    EXPECT_EQ(ggml_fa_path(400, 8), GgmlFaPath::OneChunk); // head_dim not a multiple of 16
}

TEST(GgmlCompat, AttentionNearReference) {
    ThreadPool pool(2);
    const AttentionShape s{70, 130, 6, 2, 32}; // positions span three 64-position key tiles
    for (DType type : {DType::F32, DType::F16}) {
        const AttCase c = att_case(s, type, 11);
        std::vector<float> ref(c.q.size());
        attention_reference(s, c.q.data(), c.k.data(), c.v.data(), type, ref.data());
        for (GgmlFaPath path : {GgmlFaPath::OneChunk, GgmlFaPath::Tiled}) {
            const std::vector<float> out = att(c, s, c.q.data(), path, &pool);
            // F32 sums everywhere except the one-chunk body on an F16 cache, which rounds Q and
            // its running V sum to F16 (11 significant bits): visibly less accurate.
            const bool f16_sums = type == DType::F16 && path == GgmlFaPath::OneChunk;
            const double d = max_abs_diff(out, ref);
            EXPECT_LT(d, f16_sums ? 2e-2 : 2e-5) << dtype_name(type) << " path " << int(path);
            if (f16_sums) {
                EXPECT_GT(d, 1e-4) << "the F16 roundings seem to be missing";
            }
            // Every row alone equals its row in the full call; the thread count changes nothing.
            EXPECT_EQ(0, std::memcmp(out.data(), att(c, s, c.q.data(), path, nullptr).data(), out.size() * 4));
            for (int64_t t : {int64_t(0), int64_t(33), s.n_tokens - 1}) {
                const AttentionShape s1{1, s.pos0 + t, s.n_head, s.n_head_kv, s.head_dim};
                const size_t row = size_t(s.n_head * s.head_dim);
                const std::vector<float> one = att(c, s1, c.q.data() + t * int64_t(row), path, nullptr);
                EXPECT_EQ(0, std::memcmp(one.data(), out.data() + t * int64_t(row), row * 4)) << "token " << t;
            }
        }
    }
}

TEST(GgmlCompat, OneChunkRoundsTheRunningSumToF16) {
    // One position: the output is V itself (weight 1), exactly. Two equal scores: the F16 sum of
    // v0 + v1 is rounded before the division by 2, so odd F16 sums lose their last bit.
    const AttentionShape s{1, 1, 1, 1, 16};
    std::vector<float> q(16, 0.0f); // all scores 0: equal weights
    std::vector<float> kf(32, 0.5f), vf(32);
    for (int i = 0; i < 16; ++i) {
        vf[size_t(i)] = 1.0f;                                     // position 0
        vf[size_t(16 + i)] = std::ldexp(1.0f, -11) * float(i + 1); // position 1: below F16 spacing at 1
    }
    AttCase c{s, DType::F16, q, as_type(kf, DType::F16), as_type(vf, DType::F16)};
    const std::vector<float> out = att(c, s, q.data(), GgmlFaPath::OneChunk, nullptr);
    for (int i = 0; i < 16; ++i) {
        const float sum_f16 = fp16_to_fp32(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11) * float(i + 1)));
        EXPECT_EQ(out[size_t(i)], sum_f16 * 0.5f) << i;
    }
    // The tiled body keeps F32 sums: the exact mean.
    const std::vector<float> tiled = att(c, s, q.data(), GgmlFaPath::Tiled, nullptr);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(tiled[size_t(i)], (1.0f + std::ldexp(1.0f, -11) * float(i + 1)) * 0.5f) << i;
}

TEST(GgmlCompat, AttentionRejectsBadInput) {
    const AttentionShape s{2, 3, 4, 2, 16};
    const AttCase c = att_case(s, DType::F32, 3);
    std::vector<float> out(c.q.size()), scratch(size_t(attention_ggml_scratch_floats(s, 1)));
    EXPECT_THROW(attention_ggml({2, 3, 4, 3, 16}, GgmlFaPath::OneChunk, c.q.data(), c.k.data(), c.v.data(), DType::F32,
                                out.data(), scratch.data(), nullptr),
                 Error);
    EXPECT_THROW(attention_ggml(s, GgmlFaPath::OneChunk, c.q.data(), c.k.data(), c.v.data(), DType::Q8_0, out.data(),
                                scratch.data(), nullptr),
                 Error);
    EXPECT_THROW(attention_ggml(s, GgmlFaPath::Tiled, nullptr, c.k.data(), c.v.data(), DType::F32, out.data(),
                                scratch.data(), nullptr),
                 Error);
    EXPECT_THROW(attention_ggml(s, static_cast<GgmlFaPath>(7), c.q.data(), c.k.data(), c.v.data(), DType::F32,
                                out.data(), scratch.data(), nullptr),
                 Error);
    EXPECT_THROW(attention_ggml_scratch_floats(s, 0), Error);
}

// Sliding window in both ggml bodies: near the reference, a row's value independent of the other
// rows of its call and of the thread count; whole key tiles outside the window are skipped.
TEST(GgmlCompat, SlidingWindow) {
    ThreadPool pool(2);
    AttentionShape s{70, 130, 4, 2, 32};
    s.window = 40; // the first 64-position tile is outside every row's window
    for (DType type : {DType::F32, DType::F16}) {
        const AttCase c = att_case(s, type, 21);
        std::vector<float> ref(c.q.size());
        attention_reference(s, c.q.data(), c.k.data(), c.v.data(), type, ref.data());
        for (GgmlFaPath path : {GgmlFaPath::OneChunk, GgmlFaPath::Tiled}) {
            const std::vector<float> out = att(c, s, c.q.data(), path, &pool);
            const bool f16_sums = type == DType::F16 && path == GgmlFaPath::OneChunk;
            EXPECT_LT(max_abs_diff(out, ref), f16_sums ? 2e-2 : 2e-5) << dtype_name(type) << " path " << int(path);
            EXPECT_EQ(0, std::memcmp(out.data(), att(c, s, c.q.data(), path, nullptr).data(), out.size() * 4));
            for (int64_t t : {int64_t(0), int64_t(33), s.n_tokens - 1}) {
                AttentionShape s1{1, s.pos0 + t, s.n_head, s.n_head_kv, s.head_dim};
                s1.window = s.window;
                const size_t row = size_t(s.n_head * s.head_dim);
                const std::vector<float> one = att(c, s1, c.q.data() + t * int64_t(row), path, nullptr);
                EXPECT_EQ(0, std::memcmp(one.data(), out.data() + t * int64_t(row), row * 4)) << "token " << t;
            }
        }
    }
}

// GELU as ggml-cpu computes it: through F16 (table of F16 GELU values indexed by the F16 input),
// so within ~1e-3 relative of the float formula, saturating at +-10 exactly as ggml does.
TEST(GgmlCompat, GegluFollowsTheF16Table) {
    const std::vector<float> g = test::randn(4096, 3);
    std::vector<float> up(g.size(), 1.0f), exact(g.size()), table(g.size());
    std::vector<float> gs = g;
    for (float& x : gs) x *= 3.0f;
    geglu(gs.data(), up.data(), int64_t(gs.size()), exact.data());
    geglu_ggml(gs.data(), up.data(), int64_t(gs.size()), table.data());
    bool any_diff = false;
    for (size_t i = 0; i < gs.size(); ++i) {
        EXPECT_NEAR(table[i], exact[i], 2e-3 * std::fabs(gs[i]) + 1e-4) << gs[i];
        any_diff = any_diff || table[i] != exact[i];
        // Inside (-10, 10) the value is a function of the F16 input alone, and an F16 value.
        const float h = fp16_to_fp32(fp32_to_fp16(gs[i]));
        if (std::fabs(gs[i]) >= 9.9f) continue;
        float th;
        geglu_ggml(&h, up.data(), 1, &th);
        EXPECT_EQ(th, table[i]);
        EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(table[i])), table[i]);
    }
    EXPECT_TRUE(any_diff) << "the F16 rounding seems to be missing";
    const float edge[] = {-10.0f, -11.0f, 10.0f, 12.5f}, two[] = {2.0f, 2.0f, 2.0f, 2.0f};
    float out[4];
    geglu_ggml(edge, two, 4, out);
    EXPECT_EQ(out[0], 0.0f);
    EXPECT_EQ(out[1], 0.0f);
    EXPECT_EQ(out[2], 20.0f);
    EXPECT_EQ(out[3], 25.0f);
    EXPECT_THROW(geglu_ggml(nullptr, two, 1, out), Error);
}
