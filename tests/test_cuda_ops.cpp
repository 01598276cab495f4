// CUDA per-token kernels (kernels/cuda/ops.cu) against the CPU kernels (kernels/ops.h): values
// within a tolerance per op, bit-identical rows however many rows share a call, and the host-side
// argument checks (which run, and must hold, on machines without a GPU too).
#include <gtest/gtest.h>

#if defined(REWIND_HAVE_CUDA)

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cuda_test_util.h"
#include "kernel_test_util.h"
#include "rewind/error.h"
#include "rewind/kernels/cuda_ops.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/ops.h"

namespace {

using rwd::test::device_array;
using rwd::test::randn;
using rwd::test::to_device;
using rwd::test::to_host;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel, float abs_tol,
                  const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], abs_tol + rel * std::fabs(want[i])) << what << " at " << i;
}

// ---- Checks that need no device: they must refuse before any CUDA call.

TEST(CudaOps, RejectsBadArgumentsOnTheHost) {
    float* f = reinterpret_cast<float*>(uintptr_t(256)); // never dereferenced: the checks come first
    const int32_t* ids = reinterpret_cast<const int32_t*>(uintptr_t(256));
    auto code_of = [](auto&& fn) {
        try {
            fn();
        } catch (const rwd::Error& e) {
            return e.code();
        }
        return rwd::ErrorCode::state; // "did not throw"
    };
    using rwd::ErrorCode;
    EXPECT_EQ(code_of([&] { rwd::cuda::rms_norm(nullptr, f, 1, 4, 1e-5f, f, nullptr); }), ErrorCode::argument);
    EXPECT_EQ(code_of([&] { rwd::cuda::rms_norm(f, f, 0, 4, 1e-5f, f, nullptr); }), ErrorCode::shape);
    rwd::RopeParams p;
    p.n_rot = 3;
    EXPECT_EQ(code_of([&] { rwd::cuda::rope(f, ids, 1, 1, 4, p, nullptr); }), ErrorCode::shape);
    p.n_rot = 4;
    p.fused = true;
    EXPECT_EQ(code_of([&] { rwd::cuda::rope(f, ids, 1, 1, 4, p, nullptr); }), ErrorCode::unsupported);
    EXPECT_EQ(code_of([&] { rwd::cuda::swiglu(f, f, 2, 8, 4, 8, f, 8, nullptr); }), ErrorCode::shape);
    EXPECT_EQ(code_of([&] { rwd::cuda::softcap(f, 4, 0.0f, nullptr); }), ErrorCode::argument);
    EXPECT_EQ(code_of([&] { rwd::cuda::get_rows(rwd::DType::Q4_0, f, 4, 32, ids, 1, f, nullptr); }),
              ErrorCode::unsupported);
    EXPECT_EQ(code_of([&] { rwd::cuda::get_rows(rwd::DType::Q8_0, f, 4, 33, ids, 1, f, nullptr); }), ErrorCode::shape);
    EXPECT_EQ(code_of([&] { rwd::cuda::store_kv(f, 4, rwd::DType::BF16, f, nullptr); }), ErrorCode::unsupported);
    EXPECT_EQ(code_of([&] { rwd::cuda::argmax(f, 1, 0, nullptr, nullptr); }), ErrorCode::argument);
}

TEST(CudaOps, NoDeviceIsAClearUnsupportedError) {
    if (rwd::cuda::device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device: the no-device path cannot be shown";
    try {
        rwd::cuda::Stream s(0);
        FAIL() << "a stream was created without a device";
    } catch (const rwd::Error& e) {
        EXPECT_EQ(e.code(), rwd::ErrorCode::unsupported);
        EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
    }
    EXPECT_THROW(rwd::cuda::DeviceBuffer(0, 64), rwd::Error);
    EXPECT_THROW(rwd::cuda::device_info(0), rwd::Error);
}

// ---- Device tests.

TEST(CudaOps, RmsNormMatchesCpuAndRowsAreIndependent) {
    REWIND_REQUIRE_CUDA_DEVICE();
    rwd::cuda::Stream s(0);
    const int64_t rows = 5, dim = 1000; // not a multiple of the block size
    const auto x = randn(size_t(rows * dim), 1, 3.0f);
    const auto w = randn(size_t(dim), 2);
    std::vector<float> want(x.size());
    rwd::rms_norm(x.data(), w.data(), rows, dim, 1e-6f, want.data());
    auto dx = to_device(x, s), dw = to_device(w, s);
    auto dout = device_array<float>(x.size());
    rwd::cuda::rms_norm(dx.as<float>(), dw.as<float>(), rows, dim, 1e-6f, dout.as<float>(), s.get());
    const auto got = to_host<float>(dout.data(), x.size(), s);
    expect_close(got, want, 1e-5f, 1e-6f, "rms_norm");
    // Row 3 alone gives the same bits as row 3 among five.
    auto one = device_array<float>(size_t(dim));
    rwd::cuda::rms_norm(dx.as<float>() + 3 * dim, dw.as<float>(), 1, dim, 1e-6f, one.as<float>(), s.get());
    const auto got1 = to_host<float>(one.data(), size_t(dim), s);
    EXPECT_EQ(0, std::memcmp(got1.data(), got.data() + 3 * dim, size_t(dim) * 4));
}

TEST(CudaOps, RopeBothModesWithFactorsMatchCpu) {
    REWIND_REQUIRE_CUDA_DEVICE();
    rwd::cuda::Stream s(0);
    const int64_t nt = 4, nh = 3, hd = 64;
    const std::vector<int32_t> pos = {0, 7, 1000, 32767};
    std::vector<float> factors(24);
    for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.5f * float(i);
    for (rwd::RopeMode mode : {rwd::RopeMode::Norm, rwd::RopeMode::Neox}) {
        for (bool with_factors : {false, true}) {
            rwd::RopeParams p;
            p.mode = mode;
            p.n_rot = 48; // fewer than head_dim: the rest passes through
            p.freq_base = 500000.0f;
            p.freq_scale = 0.5f;
            p.freq_factors = with_factors ? factors.data() : nullptr;
            auto want = randn(size_t(nt * nh * hd), 3);
            auto dx = to_device(want, s);
            auto dpos = to_device(pos, s);
            auto dfac = to_device(factors, s);
            rwd::RopeParams dp = p;
            dp.freq_factors = with_factors ? dfac.as<float>() : nullptr;
            rwd::cuda::rope(dx.as<float>(), dpos.as<int32_t>(), nt, nh, hd, dp, s.get());
            rwd::rope(want.data(), pos.data(), nt, nh, hd, p);
            const auto got = to_host<float>(dx.data(), want.size(), s);
            // cosf/sinf of angles up to ~3e4 rad: a few ulps of the angle's magnitude apart.
            expect_close(got, want, 1e-4f, 2e-4f, mode == rwd::RopeMode::Norm ? "rope norm" : "rope neox");
        }
    }
}

TEST(CudaOps, GatedActivationsMatchCpuWithStrides) {
    REWIND_REQUIRE_CUDA_DEVICE();
    rwd::cuda::Stream s(0);
    const int64_t rows = 3, n = 777;
    const auto gu = randn(size_t(rows * 2 * n), 4, 4.0f); // fused [gate; up] rows of 2n
    auto dgu = to_device(gu, s);
    auto dout = device_array<float>(size_t(rows * n));
    for (bool gelu : {false, true}) {
        if (gelu)
            rwd::cuda::geglu(dgu.as<float>(), dgu.as<float>() + n, rows, n, 2 * n, 2 * n, dout.as<float>(), n, s.get());
        else
            rwd::cuda::swiglu(dgu.as<float>(), dgu.as<float>() + n, rows, n, 2 * n, 2 * n, dout.as<float>(), n, s.get());
        const auto got = to_host<float>(dout.data(), size_t(rows * n), s);
        std::vector<float> want(size_t(rows * n));
        for (int64_t t = 0; t < rows; ++t) {
            const float* g = gu.data() + t * 2 * n;
            if (gelu) rwd::geglu(g, g + n, n, want.data() + t * n);
            else rwd::swiglu(g, g + n, n, want.data() + t * n, rwd::SimdLevel::Scalar);
        }
        expect_close(got, want, 1e-5f, 1e-6f, gelu ? "geglu" : "swiglu");
    }
}

TEST(CudaOps, ElementwiseOpsMatchCpuExactly) {
    REWIND_REQUIRE_CUDA_DEVICE();
    rwd::cuda::Stream s(0);
    const int64_t rows = 3, dim = 130;
    auto x = randn(size_t(rows * dim), 5);
    const auto b = randn(size_t(dim), 6);
    const auto y = randn(size_t(rows * dim), 7);
    auto dx = to_device(x, s), db = to_device(b, s), dy = to_device(y, s);
    rwd::cuda::add_bias(dx.as<float>(), db.as<float>(), rows, dim, s.get());
    rwd::cuda::scale_inplace(dx.as<float>(), rows * dim, 0.125f, s.get());
    rwd::cuda::add_inplace(dx.as<float>(), dy.as<float>(), rows * dim, s.get());
    rwd::add_bias(x.data(), b.data(), rows, dim);
    rwd::scale_inplace(x.data(), rows * dim, 0.125f);
    rwd::add_inplace(x.data(), y.data(), rows * dim);
    const auto got = to_host<float>(dx.data(), x.size(), s);
    EXPECT_EQ(0, std::memcmp(got.data(), x.data(), x.size() * 4)); // one rounding each: exact
    rwd::cuda::softcap(dx.as<float>(), rows * dim, 30.0f, s.get());
    const auto capped = to_host<float>(dx.data(), x.size(), s);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(capped[i], 30.0f * std::tanh(x[i] / 30.0f), 1e-5f);
}

TEST(CudaOps, GetRowsOfEveryTypeIsTheCpuDequantisation) {
    REWIND_REQUIRE_CUDA_DEVICE();
    rwd::cuda::Stream s(0);
    const int64_t n_rows = 6, cols = 64;
    const auto src = randn(size_t(n_rows * cols), 8);
    const std::vector<int32_t> ids = {5, 0, 5, 2};
    auto dids = to_device(ids, s);
    for (rwd::DType t : {rwd::DType::F32, rwd::DType::F16, rwd::DType::BF16, rwd::DType::Q8_0}) {
        const size_t rb = rwd::dtype_row_bytes(t, cols);
        std::vector<uint8_t> table(rb * size_t(n_rows));
        for (int64_t r = 0; r < n_rows; ++r) rwd::quantize_row(t, src.data() + r * cols, cols, table.data() + size_t(r) * rb);
        auto dtab = to_device(table, s);
        auto dout = device_array<float>(ids.size() * size_t(cols));
        rwd::cuda::get_rows(t, dtab.data(), n_rows, cols, dids.as<int32_t>(), int64_t(ids.size()), dout.as<float>(), s.get());
        const auto got = to_host<float>(dout.data(), ids.size() * size_t(cols), s);
        std::vector<float> want(got.size());
        for (size_t i = 0; i < ids.size(); ++i)
            rwd::dequantize_row(t, table.data() + size_t(ids[i]) * rb, cols, want.data() + i * size_t(cols));
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << rwd::dtype_name(t);
    }
}

TEST(CudaOps, StoreKvRoundsToHalfAsTheCpu) {
    REWIND_REQUIRE_CUDA_DEVICE();
    rwd::cuda::Stream s(0);
    auto x = randn(1000, 9, 100.0f);
    x[0] = 65519.0f; // rounds to 65504, the largest finite half
    x[1] = 1e-8f;    // subnormal half
    auto dx = to_device(x, s);
    auto dh = device_array<uint16_t>(x.size());
    rwd::cuda::store_kv(dx.as<float>(), int64_t(x.size()), rwd::DType::F16, dh.data(), s.get());
    const auto got = to_host<uint16_t>(dh.data(), x.size(), s);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], rwd::fp32_to_fp16(x[i])) << i;
}

TEST(CudaOps, ArgmaxTakesTheLowestIndexOnTiesAndSkipsNaN) {
    REWIND_REQUIRE_CUDA_DEVICE();
    rwd::cuda::Stream s(0);
    const int64_t n = 5000;
    std::vector<float> x(size_t(3 * n), 0.0f);
    x[100] = 2.0f;
    x[4000] = 2.0f; // tie: 100 wins
    x[size_t(n) + 7] = std::numeric_limits<float>::quiet_NaN();
    x[size_t(n) + 4999] = 1.0f; // NaN never wins
    for (int64_t i = 0; i < n; ++i) x[size_t(2 * n + i)] = std::numeric_limits<float>::quiet_NaN();
    auto dx = to_device(x, s);
    auto dout = device_array<int32_t>(3);
    rwd::cuda::argmax(dx.as<float>(), 3, n, dout.as<int32_t>(), s.get());
    const auto got = to_host<int32_t>(dout.data(), 3, s);
    EXPECT_EQ(got[0], 100);
    EXPECT_EQ(got[1], 4999);
    EXPECT_EQ(got[2], 0);
}

} // namespace

#else

TEST(CudaOps, NotBuilt) { GTEST_SKIP() << "built without the CUDA backend (REWIND_CUDA=OFF or no CUDA toolkit)"; }

#endif
