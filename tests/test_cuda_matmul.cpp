// CUDA matrix products (kernels/cuda/matmul.cu) against the CPU reference (kernels/matmul.h) for
// F32, F16, BF16 and Q8_0 weights, and the query-count invariance the speculative decoder needs:
// a token's outputs in a k+1-token call are bit-identical (memcmp) to its 1-token call.
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
#include "rewind/kernels/cuda_matmul.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/matmul.h"
#include "matmul_reference.h"

namespace {

using rwd::DType;
using rwd::test::device_array;
using rwd::test::randn;
using rwd::test::to_device;
using rwd::test::to_host;

struct Weights {
    std::vector<uint8_t> bytes; // rows of dtype_row_bytes(type, cols)
    rwd::MatrixView view() const { return {type, bytes.data(), rows, cols, nullptr}; }
    DType type;
    int64_t rows, cols;
};

Weights make_weights(DType t, int64_t rows, int64_t cols, uint32_t seed) {
    const auto src = randn(size_t(rows * cols), seed, 0.1f);
    Weights w{{}, t, rows, cols};
    const size_t rb = rwd::dtype_row_bytes(t, cols);
    w.bytes.resize(rb * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) rwd::quantize_row(t, src.data() + r * cols, cols, w.bytes.data() + size_t(r) * rb);
    return w;
}

rwd::ErrorCode code_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const rwd::Error& e) {
        return e.code();
    }
    return rwd::ErrorCode::state; // did not throw
}

TEST(CudaMatmul, RejectsBadArgumentsOnTheHost) {
    void* p = reinterpret_cast<void*>(uintptr_t(256)); // never dereferenced: the checks come first
    float* f = static_cast<float*>(p);
    using rwd::ErrorCode;
    EXPECT_EQ(code_of([&] { rwd::cuda::matmul({DType::Q4_0, p, 4, 32}, f, 1, f, nullptr); }), ErrorCode::unsupported);
    EXPECT_EQ(code_of([&] { rwd::cuda::matmul({DType::Q8_0, p, 4, 48}, f, 1, f, nullptr); }), ErrorCode::shape);
    EXPECT_EQ(code_of([&] { rwd::cuda::matmul({DType::F16, p, 4, 32}, f, 0, f, nullptr); }), ErrorCode::shape);
    EXPECT_EQ(code_of([&] { rwd::cuda::matmul({DType::F16, nullptr, 4, 32}, f, 1, f, nullptr); }), ErrorCode::argument);
    EXPECT_EQ(code_of([&] { rwd::cuda::matmul({DType::F16, p, 4, 32}, f + 1, 1, f, nullptr); }), ErrorCode::argument);
    EXPECT_TRUE(rwd::cuda::matmul_supports(DType::BF16));
    EXPECT_FALSE(rwd::cuda::matmul_supports(DType::Q6_K));
}

// Each type, a vector-path width and (for the float types) an odd width that takes the scalar body.
TEST(CudaMatmul, MatchesCpuReferenceAndIsQueryCountInvariant) {
    REWIND_REQUIRE_CUDA_DEVICE();
    rwd::cuda::Stream s(0);
    struct Case {
        DType type;
        int64_t rows, cols;
        float tol; // relative to sum |w x|
    };
    const Case cases[] = {{DType::F32, 67, 256, 1e-5f},  {DType::F32, 33, 99, 1e-5f},  {DType::F16, 67, 512, 1e-5f},
                          {DType::F16, 9, 77, 1e-5f},    {DType::BF16, 130, 384, 1e-5f}, {DType::BF16, 5, 31, 1e-5f},
                          {DType::Q8_0, 67, 1024, 1e-5f}, {DType::Q8_0, 3, 32, 1e-5f}};
    for (const Case& c : cases) {
        SCOPED_TRACE(std::string(rwd::dtype_name(c.type)) + " " + std::to_string(c.rows) + "x" + std::to_string(c.cols));
        const Weights w = make_weights(c.type, c.rows, c.cols, 11);
        const int64_t n = 17; // two full tiles of 8 and one more
        const auto x = randn(size_t(n * c.cols), 12);
        std::vector<float> want(size_t(n * c.rows));
        rwd::matmul_reference(w.view(), x.data(), n, want.data());
        // Magnitudes for the tolerance: sum |w||x| per output.
        std::vector<float> wf(size_t(c.rows * c.cols));
        for (int64_t r = 0; r < c.rows; ++r)
            rwd::dequantize_row(c.type, w.bytes.data() + size_t(r) * rwd::dtype_row_bytes(c.type, c.cols), c.cols,
                                wf.data() + r * c.cols);

        auto dw = to_device(w.bytes, s);
        auto dx = to_device(x, s);
        auto dy = device_array<float>(want.size());
        const rwd::cuda::DeviceMatrix dm{c.type, dw.data(), c.rows, c.cols};
        rwd::cuda::matmul(dm, dx.as<float>(), n, dy.as<float>(), s.get());
        const auto got = to_host<float>(dy.data(), want.size(), s);
        for (int64_t t = 0; t < n; ++t)
            for (int64_t r = 0; r < c.rows; ++r) {
                double mag = 0;
                for (int64_t k = 0; k < c.cols; ++k) mag += std::fabs(double(wf[size_t(r * c.cols + k)]) * x[size_t(t * c.cols + k)]);
                ASSERT_NEAR(got[size_t(t * c.rows + r)], want[size_t(t * c.rows + r)], c.tol * mag + 1e-6)
                    << "token " << t << " row " << r;
            }
        // Every token alone, and the 9-token verification shape: the same bits.
        auto d1 = device_array<float>(size_t(c.rows));
        for (int64_t t = 0; t < n; ++t) {
            rwd::cuda::matmul(dm, dx.as<float>() + t * c.cols, 1, d1.as<float>(), s.get());
            const auto one = to_host<float>(d1.data(), size_t(c.rows), s);
            ASSERT_EQ(0, std::memcmp(one.data(), got.data() + t * c.rows, size_t(c.rows) * 4)) << "token " << t;
        }
        auto d9 = device_array<float>(size_t(9 * c.rows));
        rwd::cuda::matmul(dm, dx.as<float>() + 5 * c.cols, 9, d9.as<float>(), s.get());
        const auto nine = to_host<float>(d9.data(), size_t(9 * c.rows), s);
        EXPECT_EQ(0, std::memcmp(nine.data(), got.data() + 5 * c.rows, nine.size() * 4));
    }
}

} // namespace

#else

TEST(CudaMatmul, NotBuilt) { GTEST_SKIP() << "built without the CUDA backend (REWIND_CUDA=OFF or no CUDA toolkit)"; }

#endif
