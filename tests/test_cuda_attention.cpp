// CUDA flash-decoding attention (kernels/cuda/attention.cu) against the CPU reference
// (kernels/attention.h) for F32 and F16 caches, GQA, sliding windows and caches spanning many
// splits, and query-count invariance: a token's output in a k+1-token call is bit-identical
// (memcmp) to its 1-token call.
#include <gtest/gtest.h>

#if defined(REWIND_HAVE_CUDA)

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernel_test_util.h"
#include "rewind/error.h"
#include "rewind/kernels/attention.h"
#include "rewind/kernels/cuda_attention.h"
#include "rewind/kernels/dtype.h"

namespace {

using rwd::DType;
using rwd::test::device_array;
using rwd::test::randn;
using rwd::test::to_device;
using rwd::test::to_host;

rwd::ErrorCode code_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const rwd::Error& e) {
        return e.code();
    }
    return rwd::ErrorCode::state; // did not throw
}

TEST(CudaAttention, RejectsBadArgumentsOnTheHost) {
    float* f = reinterpret_cast<float*>(uintptr_t(256)); // never dereferenced: the checks come first
    using rwd::ErrorCode;
    rwd::AttentionShape s{2, 10, 6, 4, 64}; // 6 heads over 4 KV heads
    EXPECT_EQ(code_of([&] { rwd::cuda::attention(s, f, f, f, DType::F32, f, f, 1 << 20, nullptr); }), ErrorCode::shape);
    s = {2, 10, 8, 4, 512};
    EXPECT_EQ(code_of([&] { rwd::cuda::attention(s, f, f, f, DType::F32, f, f, 1 << 20, nullptr); }),
              ErrorCode::unsupported);
    s = {2, 10, 8, 4, 64};
    EXPECT_EQ(code_of([&] { rwd::cuda::attention(s, f, f, f, DType::BF16, f, f, 1 << 20, nullptr); }),
              ErrorCode::unsupported);
    EXPECT_EQ(code_of([&] { rwd::cuda::attention(s, f, f, f, DType::F32, f, f, 10, nullptr); }), ErrorCode::shape);
    EXPECT_EQ(code_of([&] { rwd::cuda::attention(s, nullptr, f, f, DType::F32, f, f, 1 << 20, nullptr); }),
              ErrorCode::argument);
    // Splits at fixed positions: the scratch grows with the last position, not the call alone.
    EXPECT_EQ(rwd::cuda::attention_scratch_floats({1, 0, 8, 4, 64}), 8 * 66);
    EXPECT_EQ(rwd::cuda::attention_scratch_floats({1, 256, 8, 4, 64}), 2 * 8 * 66);
}

struct Case {
    DType kv;
    int64_t n_tokens, pos0, n_head, n_head_kv, head_dim, window;
    float scale;
};

TEST(CudaAttention, MatchesCpuReferenceAndIsQueryCountInvariant) {
    REWIND_REQUIRE_CUDA_DEVICE();
    rwd::cuda::Stream st(0);
    const Case cases[] = {
        {DType::F32, 9, 0, 8, 2, 64, 0, 0.0f},      {DType::F32, 9, 700, 8, 8, 128, 0, 0.0f},
        {DType::F16, 9, 1100, 16, 4, 128, 0, 0.0f}, {DType::F16, 5, 900, 4, 1, 256, 300, 1.0f},
        {DType::F32, 3, 40, 2, 1, 80, 16, 0.25f}, // head_dim not a multiple of 32; window inside one split
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(std::string(rwd::dtype_name(c.kv)) + " pos0 " + std::to_string(c.pos0) + " hd " +
                     std::to_string(c.head_dim) + " window " + std::to_string(c.window));
        rwd::AttentionShape s{c.n_tokens, c.pos0, c.n_head, c.n_head_kv, c.head_dim};
        s.window = c.window;
        s.scale = c.scale;
        const int64_t len = c.pos0 + c.n_tokens, kv = c.n_head_kv * c.head_dim, qd = c.n_head * c.head_dim;
        const auto q = randn(size_t(c.n_tokens * qd), 21, c.scale == 1.0f ? 0.1f : 1.0f);
        const auto kf = randn(size_t(len * kv), 22), vf = randn(size_t(len * kv), 23);
        std::vector<uint8_t> k, v; // the cache in its storage type
        const size_t esz = c.kv == DType::F32 ? 4 : 2;
        k.resize(kf.size() * esz);
        v.resize(vf.size() * esz);
        rwd::quantize_row(c.kv, kf.data(), int64_t(kf.size()), k.data());
        rwd::quantize_row(c.kv, vf.data(), int64_t(vf.size()), v.data());
        std::vector<float> want(q.size());
        rwd::attention_reference(s, q.data(), k.data(), v.data(), c.kv, want.data());

        auto dq = to_device(q, st), dk = to_device(k, st), dv = to_device(v, st);
        auto dout = device_array<float>(q.size());
        const int64_t sf = rwd::cuda::attention_scratch_floats(s);
        auto scratch = device_array<float>(size_t(sf));
        rwd::cuda::attention(s, dq.as<float>(), dk.data(), dv.data(), c.kv, dout.as<float>(), scratch.as<float>(), sf,
                             st.get());
        const auto got = to_host<float>(dout.data(), q.size(), st);
        for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5f + 2e-5f * std::fabs(want[i])) << i;

        for (int64_t t = 0; t < c.n_tokens; ++t) {
            rwd::AttentionShape s1 = s;
            s1.n_tokens = 1;
            s1.pos0 = c.pos0 + t;
            auto d1 = device_array<float>(size_t(qd));
            rwd::cuda::attention(s1, dq.as<float>() + t * qd, dk.data(), dv.data(), c.kv, d1.as<float>(),
                                 scratch.as<float>(), sf, st.get());
            const auto one = to_host<float>(d1.data(), size_t(qd), st);
            ASSERT_EQ(0, std::memcmp(one.data(), got.data() + t * qd, size_t(qd) * 4)) << "token " << t;
        }
    }
}

} // namespace

#else

TEST(CudaAttention, NotBuilt) { GTEST_SKIP() << "built without the CUDA backend (REWIND_CUDA=OFF or no CUDA toolkit)"; }

#endif
