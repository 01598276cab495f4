// Packed Q8_0 products (q8_packed.h): every body this CPU runs gives the scalar model's bits
// (memcmp), a token's outputs are the same bits whatever the tokens in the call and the thread
// count, results agree with the dequantize+Eigen reference, and bad input is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "rewind/error.h"
#include "rewind/kernels/q8_packed.h"
#include "matmul_reference.h"

using namespace rwd;

namespace {

struct Packed {
    int64_t rows, cols;
    std::vector<BlockQ8_0> blocks;
    std::unique_ptr<std::byte[]> mem;
    std::byte* packed = nullptr;
    MatrixView plain() const { return MatrixView{DType::Q8_0, blocks.data(), rows, cols}; }
    MatrixView view() const {
        MatrixView v = plain();
        v.packed = packed;
        return v;
    }
};

// Random Q8_0 weights; `raw` draws every int8 (-128 included) and random scales, which real
// quantizers never write but files may hold.
std::unique_ptr<Packed> make(int64_t rows, int64_t cols, uint32_t seed, bool raw = false) {
    auto p = std::make_unique<Packed>();
    p->rows = rows;
    p->cols = cols;
    p->blocks.resize(size_t(rows * cols / kQ8Block));
    if (raw) {
        std::mt19937 rng(seed);
        for (auto& b : p->blocks) {
            b.d = fp32_to_fp16(std::ldexp(float(rng() % 1000 + 1), -14));
            for (auto& q : b.qs) q = int8_t(int(rng() % 256) - 128);
        }
    } else {
        const std::vector<float> w = test::randn(size_t(rows * cols), seed, 0.5f);
        for (int64_t r = 0; r < rows; ++r) quantize_row_q8_0(w.data() + r * cols, cols, p->blocks.data() + r * (cols / kQ8Block));
    }
    const size_t bytes = q8_packed_bytes(DType::Q8_0, rows, cols);
    p->mem.reset(new std::byte[bytes + 64]);
    p->packed = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(p->mem.get()) + 63) & ~uintptr_t(63));
    repack_q8_0(p->plain(), {p->packed, bytes});
    return p;
}

std::vector<float> run(const Packed& w, const std::vector<float>& x, int64_t n, ThreadPool* pool, Q8Kernel k) {
    std::vector<std::byte> scratch(q8_input_bytes(n, w.cols));
    const Q8Input xq = quantize_input(x.data(), n, w.cols, scratch);
    std::vector<float> y(size_t(n * w.rows), NAN);
    matmul_q8_packed(w.view(), xq, y.data(), pool, k);
    return y;
}

const int64_t kRows[] = {1, 15, 16, 17, 40, 100};
const int64_t kCols[] = {32, 96, 512};
const int64_t kTokens[] = {1, 2, 5, 9, 17, 18, 40, 64, 65};

} // namespace

TEST(Q8Packed, SizeMatchesTheOriginalUpToPadding) {
    EXPECT_EQ(q8_packed_bytes(DType::Q8_0, 16, 64), size_t(2 * 512 + 64));
    EXPECT_EQ(q8_packed_bytes(DType::Q8_0, 2048, 2048), size_t(128) * (64 * 512 + 2048)); // = 2048 * 2048 / 32 * 34
    EXPECT_EQ(q8_packed_bytes(DType::Q8_0, 2048, 2048), size_t(2048) * 2048 / 32 * 34);
    EXPECT_THROW(q8_packed_bytes(DType::Q8_0, 16, 33), Error);
    EXPECT_THROW(q8_packed_bytes(DType::Q8_0, 0, 32), Error);
}

TEST(Q8Packed, EveryBodyGivesTheScalarModelsBits) {
    const auto kernels = supported_q8_kernels();
    ASSERT_EQ(kernels.front(), Q8Kernel::Scalar);
    for (bool raw : {false, true})
        for (int64_t rows : kRows)
            for (int64_t cols : kCols) {
                auto w = make(rows, cols, uint32_t(rows * 31 + cols), raw);
                for (int64_t n : kTokens) {
                    const auto x = test::randn(size_t(n * cols), uint32_t(n + cols));
                    const auto want = run(*w, x, n, nullptr, Q8Kernel::Scalar);
                    for (Q8Kernel k : kernels) {
                        const auto got = run(*w, x, n, nullptr, k);
                        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
                            << q8_kernel_name(k) << " rows " << rows << " cols " << cols << " n " << n << " raw " << raw;
                    }
                }
            }
}

TEST(Q8Packed, ExtremeValuesDoNotSaturate) {
    // All weights -128 and all activations at +-127 (amax equal in every block): the largest
    // products the bodies' int paths see.
    auto w = make(32, 64, 7);
    for (auto& b : w->blocks) {
        b.d = fp32_to_fp16(1.0f);
        for (auto& q : b.qs) q = -128;
    }
    repack_q8_0(w->plain(), {w->packed, q8_packed_bytes(DType::Q8_0, 32, 64)});
    std::vector<float> x(2 * 64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? -1.0f : 1.0f;
    std::vector<float> want(2 * 32);
    matmul_reference(w->plain(), x.data(), 2, want.data());
    for (Q8Kernel k : supported_q8_kernels()) {
        const auto got = run(*w, x, 2, nullptr, k);
        for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-2f * std::fabs(want[i])) << q8_kernel_name(k);
    }
}

// Every pass size from 1 to 64 (register tiles, the wide path's spans and sub-tiles) and beyond
// (chunks of a prefill), on 1 to 3 threads: each token's outputs are the bits it gets alone.
TEST(Q8Packed, ATokensOutputsDoNotDependOnThePassOrThreads) {
    ThreadPool pool2(2), pool3(3);
    const int64_t kMaxN = 130;
    for (bool offsets : {false, true}) {
        auto w = make(100, 192, 11);
        if (offsets) w = make(40, 320, 12);
        for (Q8Kernel k : supported_q8_kernels()) {
            const auto x = test::randn(size_t(kMaxN * w->cols), 5);
            std::vector<float> alone(size_t(kMaxN * w->rows));
            for (int64_t t = 0; t < kMaxN; ++t) {
                const std::vector<float> xt(x.begin() + t * w->cols, x.begin() + (t + 1) * w->cols);
                const auto one = run(*w, xt, 1, nullptr, k);
                std::memcpy(alone.data() + t * w->rows, one.data(), one.size() * 4);
            }
            std::vector<int64_t> sizes;
            for (int64_t n = 2; n <= 66; ++n) sizes.push_back(n);
            for (int64_t n : {100, 129, 130}) sizes.push_back(n);
            for (int64_t n : sizes) {
                const std::vector<float> xn(x.begin(), x.begin() + n * w->cols);
                ThreadPool* pool = n % 3 == 0 ? nullptr : n % 3 == 1 ? &pool2 : &pool3;
                const auto got = run(*w, xn, n, pool, k);
                ASSERT_EQ(0, std::memcmp(got.data(), alone.data(), got.size() * 4)) << q8_kernel_name(k) << " n " << n;
            }
        }
    }
}

TEST(Q8Packed, AgreesWithTheReference) {
    auto w = make(70, 256, 3);
    const int64_t n = 9;
    const auto x = test::randn(size_t(n * w->cols), 9);
    std::vector<float> ref(size_t(n * w->rows));
    matmul_reference(w->plain(), x.data(), n, ref.data());
    const auto got = run(*w, x, n, nullptr, Q8Kernel::Auto);
    float scale = 0.0f;
    for (float v : ref) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 2e-2f * scale) << i;
}

TEST(Q8Packed, MatmulUsesThePackedFormAtEveryLevel) {
    auto w = make(40, 96, 4);
    const int64_t n = 6;
    const auto x = test::randn(size_t(n * w->cols), 2);
    const auto want = run(*w, x, n, nullptr, Q8Kernel::Scalar);
    ThreadPool pool(2);
    for (SimdLevel l : supported_simd_levels()) {
        std::vector<std::byte> scratch(matmul_scratch_bytes(DType::Q8_0, n, w->cols));
        std::vector<float> y(size_t(n * w->rows), NAN);
        matmul(w->view(), x.data(), n, y.data(), scratch, &pool, l);
        EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << simd_name(l);
    }
}

TEST(Q8Packed, RefusesBadInput) {
    auto w = make(16, 64, 1);
    std::vector<std::byte> scratch(q8_input_bytes(1, 64));
    const auto x = test::randn(64, 1);
    const Q8Input xq = quantize_input(x.data(), 1, 64, scratch);
    std::vector<float> y(16);
    EXPECT_THROW(matmul_q8_packed(w->plain(), xq, y.data(), nullptr), Error); // no packed data
    Q8Input bad = xq;
    bad.cols = 32;
    EXPECT_THROW(matmul_q8_packed(w->view(), bad, y.data(), nullptr), Error);
    EXPECT_THROW(matmul_q8_packed(w->view(), xq, nullptr, nullptr), Error);
    EXPECT_THROW(quantize_input(x.data(), 1, 64, std::span<std::byte>(scratch.data(), 10)), Error);
    EXPECT_THROW(quantize_input(x.data(), 1, 48, scratch), Error);
    std::vector<float> f32(64);
    EXPECT_THROW(repack_q8_0(MatrixView{DType::F32, f32.data(), 1, 64}, {w->packed, 1088}), Error);
    EXPECT_THROW(repack_q8_0(w->plain(), {w->packed, 100}), Error);
    EXPECT_THROW(repack_q8_0(w->plain(), {w->packed + 1, 2000}), Error);
}

TEST(Q8Packed, ManyOutputsGiveEachProductsBits) {
    // Q, K, V shapes in miniature (partial last groups, big enough to be split over the pool):
    // one job over the pool must give every output the bits of its own matmul_q8_packed, at any
    // thread count.
    constexpr int64_t kC = 256;
    auto wq = make(600, kC, 11), wk = make(17, kC, 12), wv = make(40, kC, 13);
    ThreadPool pool2(2), pool3(3);
    for (Q8Kernel k : supported_q8_kernels())
        for (int64_t n : {int64_t{1}, int64_t{9}, int64_t{18}}) {
            const auto x = test::randn(size_t(n * kC), uint32_t(n + 7));
            std::vector<std::byte> scratch(q8_input_bytes(n, kC));
            const Q8Input xq = quantize_input(x.data(), n, kC, scratch);
            const MatrixView mq = wq->view(), mk = wk->view(), mv = wv->view();
            std::vector<float> rq(size_t(n * 600)), rk(size_t(n * 17)), rv(size_t(n * 40));
            matmul_q8_packed(mq, xq, rq.data(), nullptr, k);
            matmul_q8_packed(mk, xq, rk.data(), nullptr, k);
            matmul_q8_packed(mv, xq, rv.data(), nullptr, k);
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
                std::vector<float> yq(rq.size(), NAN), yk(rk.size(), NAN), yv(rv.size(), NAN);
                const Q8PackedOut outs[] = {{&mq, yq.data()}, {&mk, yk.data()}, {&mv, yv.data()}};
                matmul_q8_packed_many(outs, xq, pool, k);
                EXPECT_EQ(0, std::memcmp(rq.data(), yq.data(), rq.size() * 4)) << q8_kernel_name(k) << " n " << n;
                EXPECT_EQ(0, std::memcmp(rk.data(), yk.data(), rk.size() * 4)) << q8_kernel_name(k) << " n " << n;
                EXPECT_EQ(0, std::memcmp(rv.data(), yv.data(), rv.size() * 4)) << q8_kernel_name(k) << " n " << n;
            }
        }
}

TEST(Q8Packed, ManyOutputsRefuseBadInputBeforeComputing) {
    auto w = make(16, 64, 3), w2 = make(16, 32, 4);
    const auto x = test::randn(64, 1);
    std::vector<std::byte> scratch(q8_input_bytes(1, 64));
    const Q8Input xq = quantize_input(x.data(), 1, 64, scratch);
    const MatrixView mw = w->view(), m2 = w2->view();
    std::vector<float> y(16, NAN), y2(16, NAN);
    auto code = [&](std::span<const Q8PackedOut> outs) -> std::optional<ErrorCode> {
        try {
            matmul_q8_packed_many(outs, xq, nullptr);
        } catch (const Error& e) {
            return e.code();
        }
        return std::nullopt;
    };
    EXPECT_EQ(ErrorCode::argument, code({}));
    const Q8PackedOut five[] = {{&mw, y.data()}, {&mw, y.data()}, {&mw, y.data()}, {&mw, y.data()}, {&mw, y.data()}};
    EXPECT_EQ(ErrorCode::argument, code(five));
    const Q8PackedOut null_w[] = {{&mw, y.data()}, {nullptr, y2.data()}};
    EXPECT_EQ(ErrorCode::argument, code(null_w));
    // The second output's width does not match the activations: nothing is written to the first.
    const Q8PackedOut mixed[] = {{&mw, y.data()}, {&m2, y2.data()}};
    EXPECT_EQ(ErrorCode::shape, code(mixed));
    for (float v : y) EXPECT_TRUE(std::isnan(v));
}

// Q4_0 and Q5_0 widened by repack_q8_0 (q - 8, q - 16, the same scale) and Q4_1 / Q5_1 (q, the
// same scale and offset): every packed body gives exactly the bits of the file layout's product
// (matmul_quant's rules), for every int the blocks can hold (random bytes and scales, not only
// what a quantizer writes), at every token count.
TEST(Q8Packed, WidenedFormatsGiveTheFileLayoutsBits) {
    for (DType type : {DType::Q4_0, DType::Q5_0, DType::Q4_1, DType::Q5_1}) {
        const bool offset = type == DType::Q4_1 || type == DType::Q5_1;
        ASSERT_TRUE(q8_packable(type));
        for (int64_t rows : {int64_t{1}, int64_t{17}, int64_t{40}})
            for (int64_t cols : {int64_t{32}, int64_t{96}, int64_t{896}}) {
                std::mt19937 rng(uint32_t(rows * 7 + cols));
                const size_t row_bytes = dtype_row_bytes(type, cols);
                const size_t block_bytes = row_bytes / size_t(cols / kQ8Block);
                std::vector<std::byte> file(row_bytes * size_t(rows));
                for (size_t b = 0; b < file.size(); b += block_bytes) {
                    const uint16_t d = fp32_to_fp16(std::ldexp(float(rng() % 1000 + 1), -16));
                    std::memcpy(&file[b], &d, 2);
                    size_t i = 2;
                    if (offset) { // a finite offset of either sign
                        const uint16_t m = fp32_to_fp16(std::ldexp(float(int(rng() % 2001) - 1000), -12));
                        std::memcpy(&file[b + 2], &m, 2);
                        i = 4;
                    }
                    for (; i < block_bytes; ++i) file[b + i] = std::byte(rng() & 0xff);
                }
                const MatrixView plain{type, file.data(), rows, cols};
                const size_t bytes = q8_packed_bytes(type, rows, cols);
                std::vector<std::byte> mem(bytes + 64);
                auto* packed = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(mem.data()) + 63) & ~uintptr_t(63));
                repack_q8_0(plain, {packed, bytes});
                MatrixView view = plain;
                view.packed = packed;
                for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{9}, int64_t{17}, int64_t{18}}) {
                    const auto x = test::randn(size_t(n * cols), uint32_t(n + cols));
                    std::vector<std::byte> scratch(matmul_scratch_bytes(type, n, cols));
                    std::vector<float> want(size_t(n * rows), NAN);
                    matmul(plain, x.data(), n, want.data(), scratch, nullptr, SimdLevel::Scalar);
                    const Q8Input xq = quantize_input(x.data(), n, cols, scratch);
                    for (Q8Kernel k : supported_q8_kernels()) {
                        std::vector<float> got(want.size(), NAN);
                        matmul_q8_packed(view, xq, got.data(), nullptr, k);
                        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4))
                            << dtype_name(type) << " " << q8_kernel_name(k) << " rows " << rows << " cols " << cols << " n " << n;
                    }
                    for (SimdLevel l : supported_simd_levels()) { // matmul takes the packed form when it is set
                        std::vector<float> got(want.size(), NAN);
                        matmul(view, x.data(), n, got.data(), scratch, nullptr, l);
                        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4)) << dtype_name(type) << " " << simd_name(l);
                    }
                }
            }
    }
    // The offsets' line after the scales: one more 64-byte line per 2 blocks of a group.
    EXPECT_EQ(q8_packed_bytes(DType::Q5_1, 16, 64), size_t(2 * 512 + 2 * 64));
    EXPECT_EQ(q8_packed_bytes(DType::Q4_1, 2048, 2048), size_t(2048) * 2048 / 32 * 36);
    // The K-quants have their own packed form.
    EXPECT_FALSE(q8_packable(DType::Q4_K));
    EXPECT_THROW(q8_packed_bytes(DType::Q6_K, 16, 256), Error);
    std::vector<std::byte> q4k(dtype_row_bytes(DType::Q4_K, 256)), dst(1088 + 64);
    auto* d64 = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(dst.data()) + 63) & ~uintptr_t(63));
    EXPECT_THROW(repack_q8_0(MatrixView{DType::Q4_K, q4k.data(), 1, 256}, {d64, 1088}), Error);
}
