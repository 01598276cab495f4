// Q4_K/Q5_K/Q6_K repacked at load (kq_packed.h): every body this CPU runs (scalar model, AVX2,
// AVX-VNNI, AVX-512 VNNI), on every SIMD level, gives bit for bit what matmul computes on the
// file's layout -- for quantized rows, random bit patterns in every field, extreme blocks (no int
// overflow or saturation), partial row groups, any token count and any thread count -- plus the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "rewind/error.h"
#include "rewind/kernels/kq_packed.h"
#include "rewind/kernels/matmul.h"
#include "rewind/kernels/packed.h"

using namespace rwd;

namespace {

struct Packed {
    DType type;
    int64_t rows, cols;
    std::vector<std::byte> data;
    std::unique_ptr<std::byte[]> mem;
    std::byte* packed = nullptr;
    MatrixView plain() const { return MatrixView{type, data.data(), rows, cols}; }
    MatrixView view() const {
        MatrixView v = plain();
        v.packed = packed;
        return v;
    }
};

// kind 0: rows of N(0, 0.5^2) plus a per-row shift, quantized by rewind; 1: random bytes in every
// field with sane fp16 scales; 2: every byte 0xff (largest quants, scales and mins; Q6_K scales
// -128), fp16 factors +-1.
std::unique_ptr<Packed> make(DType type, int64_t rows, int64_t cols, uint32_t seed, int kind, ThreadPool* pool = nullptr) {
    auto p = std::make_unique<Packed>();
    p->type = type;
    p->rows = rows;
    p->cols = cols;
    const size_t row_bytes = dtype_row_bytes(type, cols);
    p->data.resize(row_bytes * size_t(rows));
    if (kind == 0) {
        std::vector<float> x = test::randn(size_t(rows * cols), seed, 0.5f);
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t k = 0; k < cols; ++k) x[size_t(r * cols + k)] += 0.05f * float(r % 5);
            quantize_row(type, x.data() + r * cols, cols, p->data.data() + size_t(r) * row_bytes);
        }
    } else {
        std::mt19937 rng(seed);
        for (auto& b : p->data) b = std::byte(kind == 2 ? 0xff : uint8_t(rng()));
        const size_t bb = dtype_row_bytes(type, 256);
        const uint16_t one = fp32_to_fp16(kind == 2 ? 1.0f : 0.01f), minus = fp32_to_fp16(kind == 2 ? -1.0f : -0.005f);
        for (size_t o = 0; o < p->data.size(); o += bb) {
            std::byte* b = p->data.data() + o;
            if (type == DType::Q4_K || type == DType::Q5_K) {
                std::memcpy(b, &one, 2);
                std::memcpy(b + 2, &minus, 2);
            } else {
                std::memcpy(b + 208, &one, 2);
                if (kind == 2) std::memset(b + 192, 0x80, 16);
            }
        }
    }
    const size_t bytes = kq_packed_bytes(type, rows, cols);
    p->mem.reset(new std::byte[bytes + 64]);
    p->packed = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(p->mem.get()) + 63) & ~uintptr_t(63));
    repack_kq(p->plain(), {p->packed, bytes}, pool);
    return p;
}

std::vector<float> run(const MatrixView& w, const std::vector<float>& x, int64_t n, ThreadPool* pool, SimdLevel level) {
    std::vector<std::byte> scratch(matmul_scratch_bytes(w.type, n, w.cols));
    std::vector<float> y(size_t(n * w.rows), NAN);
    matmul(w, x.data(), n, y.data(), scratch, pool, level);
    return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const DType kTypes[] = {DType::Q4_K, DType::Q5_K, DType::Q6_K};

} // namespace

TEST(KqPacked, Sizes) {
    EXPECT_EQ(kq_packed_bytes(DType::Q4_K, 16, 256), size_t(2368));
    EXPECT_EQ(kq_packed_bytes(DType::Q4_K, 17, 512), size_t(2 * 2 * 2368));
    EXPECT_EQ(kq_packed_bytes(DType::Q6_K, 2048, 2048), size_t(128) * 8 * 3392);
    EXPECT_TRUE(kq_repackable(DType::Q4_K));
    EXPECT_TRUE(kq_repackable(DType::Q6_K));
    EXPECT_TRUE(kq_repackable(DType::Q5_K));
    EXPECT_EQ(kq_packed_bytes(DType::Q5_K, 16, 256), size_t(2880)); // 16 x 176 = 2816 in the file: +2.3 %
    EXPECT_FALSE(kq_repackable(DType::Q4_0));
    EXPECT_THROW(kq_packed_bytes(DType::Q4_0, 16, 256), Error);
    EXPECT_THROW(kq_packed_bytes(DType::Q4_K, 16, 320), Error);
    EXPECT_THROW(kq_packed_bytes(DType::Q4_K, 0, 256), Error);
}

// Every level (and so every body) on the packed layout = the scalar body on the file's layout.
TEST(KqPacked, EveryBodyGivesTheFileLayoutsBits) {
    for (DType type : kTypes)
        for (int kind : {0, 1, 2})
            for (int64_t rows : {16, 37, 64, 144})
                for (int64_t cols : {256, 768}) {
                    const auto w = make(type, rows, cols, uint32_t(rows + cols + kind), kind);
                    for (int64_t n : {1, 2, 3, 4, 5, 9, 10, 17, 19, 33, 64, 65}) {
                        auto x = test::randn(size_t(n * cols), uint32_t(n + 7 * kind));
                        if (kind == 2)
                            for (size_t i = 0; i < x.size(); ++i) x[i] = i % 3 == 0 ? -1.0f : 1.0f; // activations -127 / 127
                        const auto model = run(w->plain(), x, n, nullptr, SimdLevel::Scalar);
                        for (SimdLevel level : supported_simd_levels()) {
                            const auto y = run(w->view(), x, n, nullptr, level);
                            ASSERT_TRUE(same_bits(model, y)) << simd_name(level) << " " << dtype_name(type) << " kind " << kind
                                                            << " rows " << rows << " cols " << cols << " n " << n;
                        }
                    }
                }
}

// Every pass size from 1 to 64 (register tiles, the wide path's super-block sweeps and
// sub-tiles) and beyond (chunks of a prefill), on 1 to 3 threads, at every level: each token's
// outputs are the bits it gets alone.
TEST(KqPacked, TokenAndThreadCountsNeverChangeAResult) {
    ThreadPool p2(2), p3(3);
    const int64_t kMaxN = 130, rows = 40, cols = 512; // a partial last row group
    for (DType type : kTypes) {
        const auto w = make(type, rows, cols, 5, 0, &p3);
        const auto x = test::randn(size_t(kMaxN * cols), 9);
        for (SimdLevel level : supported_simd_levels()) {
            std::vector<float> alone(size_t(kMaxN * rows));
            for (int64_t t = 0; t < kMaxN; ++t) {
                const std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
                const auto one = run(w->view(), xt, 1, nullptr, level);
                std::memcpy(alone.data() + t * rows, one.data(), one.size() * sizeof(float));
            }
            std::vector<int64_t> sizes;
            for (int64_t n = 2; n <= 66; ++n) sizes.push_back(n);
            for (int64_t n : {100, 129, 130}) sizes.push_back(n);
            for (int64_t n : sizes) {
                const std::vector<float> xn(x.begin(), x.begin() + n * cols);
                ThreadPool* pool = n % 3 == 0 ? nullptr : n % 3 == 1 ? &p2 : &p3;
                const auto got = run(w->view(), xn, n, pool, level);
                ASSERT_EQ(std::memcmp(got.data(), alone.data(), got.size() * sizeof(float)), 0)
                    << simd_name(level) << " " << dtype_name(type) << " n " << n;
            }
        }
    }
}

// Wide passes take a row group's super-blocks a span at a time, each unpacked once and applied to
// every token of the pass: rows of several spans (5 and 9 super-blocks: spans of 4, 4 and 1) and
// extreme blocks give the file layout's bits at every level, on 1 to 3 threads.
TEST(KqPacked, WidePassesOverSeveralSpans) {
    ThreadPool p2(2), p3(3);
    for (DType type : kTypes)
        for (int kind : {0, 2})
            for (int64_t cols : {1280, 2304}) {
                const auto w = make(type, 40, cols, uint32_t(cols + kind), kind);
                for (int64_t n : {10, 17, 33, 64, 65, 130}) {
                    auto x = test::randn(size_t(n * cols), uint32_t(n + kind));
                    if (kind == 2)
                        for (size_t i = 0; i < x.size(); ++i) x[i] = i % 3 == 0 ? -1.0f : 1.0f;
                    const auto model = run(w->plain(), x, n, nullptr, SimdLevel::Scalar);
                    ThreadPool* pool = n % 3 == 0 ? nullptr : n % 3 == 1 ? &p2 : &p3;
                    for (SimdLevel level : supported_simd_levels())
                        ASSERT_TRUE(same_bits(model, run(w->view(), x, n, pool, level)))
                            << simd_name(level) << " " << dtype_name(type) << " kind " << kind << " cols " << cols << " n " << n;
                }
            }
}

// One quantize_kq_input shared by a Q4_K and a Q6_K matrix (as Q, K, V or gate, up share it),
// the tokens quantized on a pool or not: each product is matmul's, bit for bit.
TEST(KqPacked, SharedInputGivesEachMatmulsBits) {
    ThreadPool p2(2), p3(3);
    const auto a = make(DType::Q4_K, 40, 512, 3, 0), b = make(DType::Q6_K, 21, 512, 4, 1);
    for (int64_t n : {1, 2, 9, 17, 40}) { // 40 x 512: enough values for the pool to split the tokens
        const auto x = test::randn(size_t(n * 512), uint32_t(n));
        for (SimdLevel level : supported_simd_levels())
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p2, &p3}) {
                std::vector<std::byte> scratch(kq_input_bytes(n, 512));
                const KqInput xq = quantize_kq_input(x.data(), n, 512, scratch, pool, level);
                for (const Packed* w : {a.get(), b.get()}) {
                    std::vector<float> y(size_t(n * w->rows), NAN);
                    matmul_kq_packed(w->view(), xq, y.data(), pool, level);
                    ASSERT_TRUE(same_bits(y, run(w->view(), x, n, nullptr, level)))
                        << simd_name(level) << " " << dtype_name(w->type) << " n " << n;
                }
            }
    }
}

TEST(KqPacked, SharedInputRefusesBadInput) {
    const auto w = make(DType::Q4_K, 16, 512, 1, 0);
    std::vector<float> x(2 * 512, 0.5f), y(2 * 16);
    std::vector<std::byte> scratch(kq_input_bytes(2, 512));
    EXPECT_THROW(kq_input_bytes(-1, 512), Error);
    EXPECT_THROW(kq_input_bytes(1, 300), Error);
    EXPECT_THROW(quantize_kq_input(nullptr, 2, 512, scratch), Error);
    EXPECT_THROW(quantize_kq_input(x.data(), 0, 512, scratch), Error);
    EXPECT_THROW(quantize_kq_input(x.data(), 2, 512, {scratch.data(), scratch.size() - 1}), Error);
    EXPECT_THROW(quantize_kq_input(x.data(), 2, 512, {scratch.data() + 1, scratch.size() - 4}), Error);
    const KqInput xq = quantize_kq_input(x.data(), 2, 512, scratch, nullptr, SimdLevel::Scalar);
    EXPECT_THROW(matmul_kq_packed(w->plain(), xq, y.data(), nullptr, SimdLevel::Scalar), Error); // not packed
    EXPECT_THROW(matmul_kq_packed(w->view(), xq, nullptr, nullptr, SimdLevel::Scalar), Error);
    const auto narrow = make(DType::Q4_K, 16, 256, 1, 0);
    EXPECT_THROW(matmul_kq_packed(narrow->view(), xq, y.data(), nullptr, SimdLevel::Scalar), Error); // cols differ
    KqInput none = xq;
    none.act = nullptr;
    EXPECT_THROW(matmul_kq_packed(w->view(), none, y.data(), nullptr, SimdLevel::Scalar), Error);
}

// A layer's experts as one job: products of three types, widths and row counts, each with its own
// input and token count (1 to 17, the wide tiles among them), give each the bits it gets alone,
// at every level and thread count; a bad product anywhere is refused before anything is written.
TEST(KqPacked, ProductListGivesEachProductsBits) {
    ThreadPool p2(2), p3(3);
    const auto a = make(DType::Q4_K, 40, 512, 5, 0), b = make(DType::Q6_K, 21, 512, 6, 1), c = make(DType::Q5_K, 33, 256, 7, 0);
    const Packed* ws[] = {a.get(), b.get(), c.get(), a.get(), b.get()};
    const int64_t ns[] = {1, 3, 17, 9, 2};
    std::vector<std::vector<float>> xs;
    for (size_t i = 0; i < 5; ++i) xs.push_back(test::randn(size_t(ns[i] * ws[i]->cols), uint32_t(20 + i)));
    for (SimdLevel level : supported_simd_levels())
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p2, &p3}) {
            std::vector<std::vector<std::byte>> scratch;
            std::vector<KqInput> in;
            std::vector<MatrixView> views;
            std::vector<std::vector<float>> ys;
            for (size_t i = 0; i < 5; ++i) {
                scratch.emplace_back(kq_input_bytes(ns[i], ws[i]->cols));
                in.push_back(quantize_kq_input(xs[i].data(), ns[i], ws[i]->cols, scratch.back(), pool, level));
                views.push_back(ws[i]->view());
                ys.emplace_back(size_t(ns[i] * ws[i]->rows), NAN);
            }
            std::vector<KqProduct> prods;
            for (size_t i = 0; i < 5; ++i) prods.push_back(KqProduct{&views[i], &in[i], ys[i].data()});
            matmul_kq_packed_list(prods, pool, level);
            for (size_t i = 0; i < 5; ++i)
                ASSERT_TRUE(same_bits(ys[i], run(views[i], xs[i], ns[i], nullptr, level)))
                    << simd_name(level) << " product " << i;
            // The first product good, the second's input of another width: nothing is written.
            std::vector<float> y0(ys[0].size(), NAN);
            const KqProduct bad[] = {{&views[0], &in[0], y0.data()}, {&views[2], &in[0], ys[2].data()}};
            EXPECT_THROW(matmul_kq_packed_list(bad, pool, level), Error);
            EXPECT_TRUE(std::isnan(y0[0]));
        }
    std::vector<KqProduct> many(kKqProductsMax + 1);
    EXPECT_THROW(matmul_kq_packed_list(many, nullptr), Error);
    const MatrixView v0 = ws[0]->view();
    const KqProduct null_input[] = {{&v0, nullptr, nullptr}};
    EXPECT_THROW(matmul_kq_packed_list(null_input, nullptr), Error);
}

TEST(KqPacked, RefusesBadInput) {
    const auto w = make(DType::Q4_K, 16, 256, 1, 0);
    std::vector<float> f32(256);
    EXPECT_THROW(repack_kq(MatrixView{DType::F32, f32.data(), 1, 256}, {w->packed, 4096}), Error);
    EXPECT_THROW(repack_kq(w->plain(), {w->packed, 100}), Error);
    EXPECT_THROW(repack_kq(w->plain(), {w->packed + 1, 4096}), Error);
    EXPECT_THROW(repack_kq(MatrixView{DType::Q4_K, nullptr, 16, 256}, {w->packed, 4096}), Error);
    MatrixView mis = w->view();
    mis.packed = w->packed + 4;
    const auto x = test::randn(256, 3);
    EXPECT_THROW(run(mis, x, 1, nullptr, SimdLevel::Scalar), Error);
}

// packed.h's one front end over both layouts: a Q8_0 matrix repacked by repack() and the K-quants
// here, one quantize_packed input per layout shared by matmul_packed_many: each product is
// matmul's, bit for bit, at every level; a matrix of the other layout is refused.
TEST(PackedFrontEnd, EachLayoutGivesMatmulsBits) {
    EXPECT_EQ(packed_layout(DType::Q8_0), PackedLayout::Q8);
    EXPECT_EQ(packed_layout(DType::Q5_0), PackedLayout::Q8);
    EXPECT_EQ(packed_layout(DType::Q6_K), PackedLayout::Kq);
    EXPECT_EQ(packed_layout(DType::F16), PackedLayout::None);
    EXPECT_FALSE(packable(DType::F32));
    EXPECT_EQ(packed_bytes(DType::Q4_K, 16, 256), kq_packed_bytes(DType::Q4_K, 16, 256));
    const int64_t cols = 512, n = 9;
    const auto q4k = make(DType::Q4_K, 40, cols, 3, 0), q6k = make(DType::Q6_K, 21, cols, 4, 1);
    Packed q8;
    q8.type = DType::Q8_0;
    q8.rows = 33;
    q8.cols = cols;
    const auto src = test::randn(size_t(q8.rows * cols), 5, 0.5f);
    q8.data.resize(dtype_row_bytes(DType::Q8_0, cols) * size_t(q8.rows));
    for (int64_t r = 0; r < q8.rows; ++r)
        quantize_row(DType::Q8_0, src.data() + r * cols, cols, q8.data.data() + size_t(r) * dtype_row_bytes(DType::Q8_0, cols));
    const size_t bytes = packed_bytes(DType::Q8_0, q8.rows, cols);
    q8.mem.reset(new std::byte[bytes + 64]);
    q8.packed = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(q8.mem.get()) + 63) & ~uintptr_t(63));
    repack(q8.plain(), {q8.packed, bytes});
    ThreadPool p2(2);
    const auto x = test::randn(size_t(n * cols), 11);
    std::vector<std::byte> scratch(std::max(matmul_scratch_bytes(DType::Q8_0, n, cols), kq_input_bytes(n, cols)));
    for (SimdLevel level : supported_simd_levels()) {
        const PackedInput xk = quantize_packed(PackedLayout::Kq, x.data(), n, cols, scratch, &p2, level);
        std::vector<float> ya(size_t(n * q4k->rows), NAN), yb(size_t(n * q6k->rows), NAN);
        const MatrixView va = q4k->view(), vb = q6k->view(), v8 = q8.view();
        const PackedOut outs[] = {{&va, ya.data()}, {&vb, yb.data()}};
        matmul_packed_many(outs, xk, &p2, level);
        ASSERT_TRUE(same_bits(ya, run(va, x, n, nullptr, level))) << simd_name(level);
        ASSERT_TRUE(same_bits(yb, run(vb, x, n, nullptr, level))) << simd_name(level);
        std::vector<float> y8(size_t(n * q8.rows), NAN);
        EXPECT_THROW(matmul_packed(v8, xk, y8.data(), &p2, level), Error); // a Q8 matrix, a Kq input
        const PackedInput x8 = quantize_packed(PackedLayout::Q8, x.data(), n, cols, scratch, &p2, level);
        matmul_packed(v8, x8, y8.data(), &p2, level);
        ASSERT_TRUE(same_bits(y8, run(v8, x, n, nullptr, level))) << simd_name(level);
    }
}
