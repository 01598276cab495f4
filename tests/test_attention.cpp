// attention: causal GQA against the double-precision reference with F32 and F16 caches, and the
// product promise: token t of an n-token call equals a 1-token call at position pos0+t, bit for
// bit, whatever the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "rewind/error.h"
#include "rewind/kernels/attention.h"

using namespace rwd;

namespace {

std::vector<SimdLevel> levels() { return supported_simd_levels(); }

// A filled cache of `len` positions in `type`, and queries for the new tokens.
struct Case {
    AttentionShape s;
    DType type;
    std::vector<float> q;
    std::vector<std::byte> k, v;
};

Case make_case(AttentionShape s, DType type, uint32_t seed, float q_sd = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    Case c{s, type, {}, {}, {}};
    const int64_t len = s.pos0 + s.n_tokens;
    const size_t eb = type == DType::F32 ? 4 : 2;
    const size_t elems = size_t(len * s.n_head_kv * s.head_dim);
    c.k.resize(elems * eb);
    c.v.resize(elems * eb);
    for (auto* buf : {&c.k, &c.v})
        for (size_t i = 0; i < elems; ++i) {
            const float x = nd(rng);
            if (type == DType::F32) std::memcpy(buf->data() + 4 * i, &x, 4);
            else {
                const uint16_t h = fp32_to_fp16(x);
                std::memcpy(buf->data() + 2 * i, &h, 2);
            }
        }
    c.q.resize(size_t(s.n_tokens * s.n_head * s.head_dim));
    for (auto& x : c.q) x = q_sd * nd(rng);
    return c;
}

std::vector<float> run(const Case& c, const AttentionShape& s, const float* q, ThreadPool* pool, SimdLevel level) {
    std::vector<float> out(size_t(s.n_tokens * s.n_head * s.head_dim), NAN);
    std::vector<float> scratch(size_t(attention_scratch_floats(s, pool ? pool->size() : 1)));
    attention(s, q, c.k.data(), c.v.data(), c.type, out.data(), scratch.data(), pool, level);
    return out;
}

} // namespace

TEST(Attention, MatchesReference) {
    const AttentionShape shapes[] = {
        {1, 0, 6, 2, 32},   // first token: attends to itself only
        {9, 40, 6, 2, 32},  // pycode-4m shape, GQA
        {5, 3, 3, 1, 32},   // MQA (pycode-600k)
        {4, 20, 8, 8, 8},   // MHA, head_dim 8
        {3, 17, 4, 2, 12},  // head_dim not a multiple of 8
        {2, 300, 2, 1, 64}, // long context, head_dim 64
        {17, 0, 2, 2, 4},   // prompt from scratch, tiny heads
    };
    for (SimdLevel level : levels()) {
        for (DType type : {DType::F32, DType::F16}) {
            for (const auto& s : shapes) {
                const Case c = make_case(s, type, uint32_t(s.pos0 * 31 + s.head_dim), 2.0f);
                const auto out = run(c, s, c.q.data(), nullptr, level);
                std::vector<float> ref(out.size());
                attention_reference(s, c.q.data(), c.k.data(), c.v.data(), type, ref.data());
                for (size_t i = 0; i < out.size(); ++i)
                    ASSERT_NEAR(out[i], ref[i], 2e-5) << simd_name(level) << " " << dtype_name(type) << " pos0 " << s.pos0 << " i " << i;
            }
        }
    }
}

TEST(Attention, FirstTokenReturnsItsValue) {
    const AttentionShape s{1, 0, 4, 2, 16};
    const Case c = make_case(s, DType::F32, 3);
    for (SimdLevel level : levels()) {
        const auto out = run(c, s, c.q.data(), nullptr, level);
        const float* v = reinterpret_cast<const float*>(c.v.data());
        for (int64_t h = 0; h < 4; ++h)
            for (int64_t d = 0; d < 16; ++d) EXPECT_EQ(out[size_t(h * 16 + d)], v[(h / 2) * 16 + d]);
    }
}

TEST(Attention, TokenCountNeverChangesAResult) {
    for (SimdLevel level : levels()) {
        for (DType type : {DType::F32, DType::F16}) {
            for (int64_t head_dim : {32, 12}) {
                const AttentionShape s{20, 23, 6, 2, head_dim};
                const Case c = make_case(s, type, uint32_t(head_dim), 2.0f);
                const int64_t row = s.n_head * s.head_dim;
                for (int64_t n = 1; n <= 20; ++n) { // one tile up to 17, two beyond
                    const AttentionShape sn{n, s.pos0, s.n_head, s.n_head_kv, s.head_dim};
                    const auto all = run(c, sn, c.q.data(), nullptr, level);
                    for (int64_t t = 0; t < n; ++t) {
                        const AttentionShape s1{1, s.pos0 + t, s.n_head, s.n_head_kv, s.head_dim};
                        const auto one = run(c, s1, c.q.data() + t * row, nullptr, level);
                        ASSERT_EQ(std::memcmp(one.data(), all.data() + t * row, size_t(row) * 4), 0)
                            << simd_name(level) << " " << dtype_name(type) << " n " << n << " t " << t;
                    }
                }
            }
        }
    }
}

// Past a few thousand cached positions a pass of 17 tokens runs in smaller tiles (bounded
// scratch); a token's bits stay those it gets alone.
TEST(Attention, LongPrefixTilesKeepEveryResult) {
    for (SimdLevel level : levels()) {
        const AttentionShape s{17, 9000, 2, 1, 16};
        const Case c = make_case(s, DType::F16, 31, 2.0f);
        const auto all = run(c, s, c.q.data(), nullptr, level);
        const int64_t row = s.n_head * s.head_dim;
        for (int64_t t = 0; t < s.n_tokens; ++t) {
            const AttentionShape s1{1, s.pos0 + t, s.n_head, s.n_head_kv, s.head_dim};
            const auto one = run(c, s1, c.q.data() + t * row, nullptr, level);
            ASSERT_EQ(std::memcmp(one.data(), all.data() + t * row, size_t(row) * 4), 0) << simd_name(level) << " t " << t;
        }
    }
}

TEST(Attention, ThreadCountNeverChangesAResult) {
    ThreadPool p2(2), p3(3);
    for (SimdLevel level : levels()) {
        for (DType type : {DType::F32, DType::F16}) {
            for (const AttentionShape& s : {AttentionShape{9, 500, 6, 2, 32}, AttentionShape{1, 511, 6, 2, 32},
                                            AttentionShape{17, 100, 3, 1, 32}}) {
                const Case c = make_case(s, type, 77);
                const auto y1 = run(c, s, c.q.data(), nullptr, level);
                const auto y2 = run(c, s, c.q.data(), &p2, level);
                const auto y3 = run(c, s, c.q.data(), &p3, level);
                ASSERT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 4), 0);
                ASSERT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * 4), 0);
            }
        }
    }
}

TEST(Attention, ExtremeScoresStayFinite) {
    // Large queries make softmax nearly one-hot; nothing may overflow or become NaN.
    const AttentionShape s{3, 60, 2, 1, 32};
    const Case c = make_case(s, DType::F32, 5, 40.0f);
    for (SimdLevel level : levels()) {
        const auto out = run(c, s, c.q.data(), nullptr, level);
        std::vector<float> ref(out.size());
        attention_reference(s, c.q.data(), c.k.data(), c.v.data(), DType::F32, ref.data());
        for (size_t i = 0; i < out.size(); ++i) {
            ASSERT_TRUE(std::isfinite(out[i]));
            EXPECT_NEAR(out[i], ref[i], 1e-4);
        }
    }
}

TEST(Attention, RejectsBadArguments) {
    const AttentionShape good{2, 3, 4, 2, 8};
    const Case c = make_case(good, DType::F32, 1);
    std::vector<float> out(64), scratch(static_cast<size_t>(attention_scratch_floats(good, 1)));
    auto call = [&](AttentionShape s, DType t) {
        attention(s, c.q.data(), c.k.data(), c.v.data(), t, out.data(), scratch.data(), nullptr);
    };
    EXPECT_NO_THROW(call(good, DType::F32));
    EXPECT_THROW(call({2, 3, 4, 3, 8}, DType::F32), Error); // 4 heads over 3 KV heads
    EXPECT_THROW(call({0, 3, 4, 2, 8}, DType::F32), Error);
    EXPECT_THROW(call({2, -1, 4, 2, 8}, DType::F32), Error);
    EXPECT_THROW(call({2, 3, 4, 2, 0}, DType::F32), Error);
    EXPECT_THROW(call(good, DType::Q8_0), Error);
    EXPECT_THROW(call(good, DType::BF16), Error);
    EXPECT_THROW(attention(good, nullptr, c.k.data(), c.v.data(), DType::F32, out.data(), scratch.data(), nullptr), Error);
    EXPECT_THROW(attention(good, c.q.data(), c.k.data(), c.v.data(), DType::F32, out.data(), nullptr, nullptr), Error);
    EXPECT_THROW(attention_scratch_floats(good, 0), Error);
    EXPECT_GE(attention_scratch_floats(good, 3), 3 * (good.pos0 + good.n_tokens));
    if (detect_simd() != SimdLevel::Avx512) {
        EXPECT_THROW(attention(good, c.q.data(), c.k.data(), c.v.data(), DType::F32, out.data(), scratch.data(), nullptr,
                               SimdLevel::Avx512),
                     Error);
    }
}

// The once-for-a-cache size (Context sizes its scratch by it) covers every call a cache of that
// capacity can make: any token count up to the pass limit, any last position, with a window too.
// No single shape is such a bound: a 17-token call near the end of a context needs more than a
// 256-token one there (its tile is 17 tokens, theirs 16).
TEST(Attention, ScratchUptoCoversEveryCallOfACache) {
    struct Bound {
        int64_t max_tokens, capacity, n_head, n_head_kv, head_dim;
    };
    for (const Bound b : {Bound{256, 512, 3, 1, 32}, Bound{256, 4113, 32, 8, 64}, Bound{40, 9001, 4, 2, 16},
                          Bound{17, 131, 6, 2, 8}, Bound{1, 200, 2, 2, 8}}) {
        SCOPED_TRACE(::testing::Message() << b.max_tokens << " tokens, capacity " << b.capacity);
        const int64_t n = std::min(b.max_tokens, b.capacity);
        const AttentionShape all{n, b.capacity - n, b.n_head, b.n_head_kv, b.head_dim};
        const int64_t bound = attention_scratch_floats_upto(all, 2);
        int64_t worst = 0;
        for (int64_t t = 1; t <= n; ++t) {
            for (int64_t p0 = 0; p0 + t <= b.capacity; ++p0) {
                AttentionShape s{t, p0, b.n_head, b.n_head_kv, b.head_dim};
                worst = std::max(worst, attention_scratch_floats(s, 2));
                s.window = 7;
                worst = std::max(worst, attention_scratch_floats(s, 2));
            }
        }
        EXPECT_GE(bound, worst);
        EXPECT_LE(bound, worst + 2 * 16) << "a bound far above the need wastes memory"; // rounding only
    }
    EXPECT_THROW(attention_scratch_floats_upto({2, 3, 4, 2, 8}, 0), Error);
}

// Sliding window: only the last `window` positions are visible (llama.cpp's standard SWA); the
// result matches the reference, equals plain attention over exactly those positions, and keeps
// a token's bits whatever the token count, thread count and SIMD level.
TEST(Attention, SlidingWindow) {
    ThreadPool p3(3);
    for (SimdLevel level : levels()) {
        for (DType type : {DType::F32, DType::F16}) {
            AttentionShape s{20, 50, 4, 2, 32};
            s.window = 7;
            const Case c = make_case(s, type, 5, 2.0f);
            const auto y = run(c, s, c.q.data(), nullptr, level);
            std::vector<float> ref(y.size());
            attention_reference(s, c.q.data(), c.k.data(), c.v.data(), type, ref.data());
            for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], 2e-5) << i;
            // A window larger than the prefix changes nothing.
            AttentionShape wide = s;
            wide.window = 1000;
            AttentionShape none = s;
            none.window = 0;
            ASSERT_EQ(0, std::memcmp(run(c, wide, c.q.data(), nullptr, level).data(),
                                     run(c, none, c.q.data(), nullptr, level).data(), y.size() * 4));
            ASSERT_EQ(0, std::memcmp(y.data(), run(c, s, c.q.data(), &p3, level).data(), y.size() * 4));
            const int64_t row = s.n_head * s.head_dim;
            for (int64_t t = 0; t < s.n_tokens; ++t) {
                AttentionShape s1{1, s.pos0 + t, s.n_head, s.n_head_kv, s.head_dim};
                s1.window = s.window;
                const auto one = run(c, s1, c.q.data() + t * row, nullptr, level);
                ASSERT_EQ(std::memcmp(one.data(), y.data() + t * row, size_t(row) * 4), 0)
                    << simd_name(level) << " " << dtype_name(type) << " t " << t;
            }
        }
    }
    // The window cuts positions that would dominate: a huge score 8 positions back is ignored.
    AttentionShape s{1, 9, 1, 1, 8};
    s.window = 8;
    Case c = make_case(s, DType::F32, 9);
    std::vector<float> kf(size_t(10 * 8), 0.0f), vf(size_t(10 * 8), 1.0f);
    // Position 9 sees 2..9 only; position 0 would take all the weight.
    for (int i = 0; i < 8; ++i) vf[size_t(i)] = -100.0f, kf[size_t(i)] = 100.0f;
    std::memcpy(c.k.data(), kf.data(), kf.size() * 4);
    std::memcpy(c.v.data(), vf.data(), vf.size() * 4);
    std::vector<float> q(8, 1.0f);
    const auto y = run(c, s, q.data(), nullptr, SimdLevel::Scalar);
    for (float x : y) EXPECT_EQ(x, 1.0f);
}

TEST(Attention, ScaleOverridesTheDefault) {
    AttentionShape s{3, 5, 2, 1, 16};
    const Case c = make_case(s, DType::F32, 3);
    AttentionShape pre = s;
    pre.scale = 1.0f;
    std::vector<float> q = c.q;
    for (float& x : q) x *= 0.25f; // 1/sqrt(16): exact, so pre-scaling Q gives the same scores
    for (SimdLevel level : levels())
        EXPECT_EQ(0, std::memcmp(run(c, s, c.q.data(), nullptr, level).data(), run(c, pre, q.data(), nullptr, level).data(),
                                 q.size() * 4));
    AttentionShape bad = s;
    bad.window = -1;
    std::vector<float> out(c.q.size()), scratch(size_t(attention_scratch_floats(s, 1)));
    EXPECT_THROW(attention(bad, c.q.data(), c.k.data(), c.v.data(), DType::F32, out.data(), scratch.data(), nullptr), Error);
    bad = s;
    bad.scale = NAN;
    EXPECT_THROW(attention(bad, c.q.data(), c.k.data(), c.v.data(), DType::F32, out.data(), scratch.data(), nullptr), Error);
}

// One arithmetic order for every body (kernels/src/attention_impl.h): each SIMD level gives the
// scalar model's bits exactly, over odd head sizes, GQA groups, windows, tiles of several tokens,
// block edges (64 positions), F16 and F32 caches, and a thread pool.
TEST(Attention, EveryLevelGivesTheScalarModelsBits) {
    ThreadPool p2(2);
    struct Shape {
        AttentionShape s;
        int64_t window;
    };
    const Shape shapes[] = {
        {{1, 0, 4, 2, 16}, 0},    {{9, 40, 6, 2, 32}, 0},   {{5, 3, 3, 1, 12}, 0},    {{3, 17, 4, 2, 20}, 0},
        {{17, 47, 8, 2, 8}, 0},   {{2, 300, 2, 1, 64}, 0},  {{7, 121, 4, 1, 40}, 9},  {{9, 64, 8, 2, 128}, 0},
        {{1, 127, 8, 2, 128}, 0}, {{4, 190, 6, 3, 100}, 70}, {{17, 63, 3, 3, 4}, 0},  {{20, 5, 5, 5, 33}, 0},
        // The Llama shape's unit (9 tokens x 4 heads, 64 dimensions) and a masked 4-vector row.
        {{9, 130, 8, 2, 64}, 0},  {{6, 70, 4, 1, 57}, 0},
    };
    for (DType type : {DType::F32, DType::F16}) {
        for (const Shape& sh : shapes) {
            AttentionShape s = sh.s;
            s.window = sh.window;
            const Case c = make_case(s, type, uint32_t(s.pos0 * 7 + s.head_dim), 2.0f);
            const auto model = run(c, s, c.q.data(), nullptr, SimdLevel::Scalar);
            for (SimdLevel level : levels()) {
                for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p2}) {
                    const auto y = run(c, s, c.q.data(), pool, level);
                    for (size_t i = 0; i < y.size(); ++i)
                        ASSERT_EQ(std::memcmp(&y[i], &model[i], 4), 0)
                            << simd_name(level) << " " << dtype_name(type) << " n " << s.n_tokens << " pos0 " << s.pos0
                            << " hd " << s.head_dim << " window " << s.window << " i " << i << ": " << y[i]
                            << " vs " << model[i];
                }
            }
        }
    }
}

// A unit may hold several adjacent KV heads (so each cached row is one contiguous read); how many
// depends on the thread count and on a score budget, never a bit: the Llama-1B shape at decode
// and verification sizes, MHA past the 16-head cap, a budget that splits 16 KV heads 6 + 6 + 4, and
// 3 threads over 8 KV heads (3 + 3 + 2), each against the scalar model.
TEST(Attention, UnitsOfSeveralKvHeadsKeepEveryHeadsBits) {
    ThreadPool p2(2), p3(3);
    const AttentionShape shapes[] = {{1, 200, 32, 8, 64}, {9, 130, 32, 8, 64}, {2, 70, 20, 20, 16}, {17, 5000, 16, 16, 8}};
    for (DType type : {DType::F32, DType::F16}) {
        for (const AttentionShape& s : shapes) {
            const Case c = make_case(s, type, uint32_t(s.pos0 + s.n_head), 2.0f);
            const auto model = run(c, s, c.q.data(), nullptr, SimdLevel::Scalar);
            for (SimdLevel level : levels())
                for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p2, &p3}) {
                    const auto y = run(c, s, c.q.data(), pool, level);
                    ASSERT_EQ(std::memcmp(y.data(), model.data(), y.size() * 4), 0)
                        << simd_name(level) << " " << dtype_name(type) << " n " << s.n_tokens << " pos0 " << s.pos0
                        << " heads " << s.n_head << "/" << s.n_head_kv << " threads " << (pool ? pool->size() : 1);
                }
        }
    }
}
