// matmul: every weight type at every SIMD level this CPU has, against the dequantize+Eigen
// reference; and the product promise: a token's outputs are bit-identical whatever the number of
// tokens in the call and whatever the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "rewind/error.h"
#include "rewind/kernels/matmul.h"
#include "rewind/kernels/q8_packed.h"
#include "matmul_reference.h"

using namespace rwd;

namespace {

std::vector<SimdLevel> levels() { return supported_simd_levels(); }

// A random weight matrix stored as `type`.
struct Weights {
    DType type;
    int64_t rows, cols;
    std::vector<std::byte> data;
    MatrixView view() const { return MatrixView{type, data.data(), rows, cols}; }
};

Weights make_weights(DType type, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.5f);
    Weights w{type, rows, cols, {}};
    const size_t rb = dtype_row_bytes(type, cols);
    w.data.resize(rb * size_t(rows));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (auto& v : row) v = nd(rng);
        std::byte* dst = w.data.data() + size_t(r) * rb;
        switch (type) {
        case DType::F32: std::memcpy(dst, row.data(), rb); break;
        case DType::F16:
        case DType::BF16:
            for (int64_t k = 0; k < cols; ++k) {
                const uint16_t h = type == DType::F16 ? fp32_to_fp16(row[size_t(k)]) : fp32_to_bf16(row[size_t(k)]);
                std::memcpy(dst + 2 * k, &h, 2);
            }
            break;
        case DType::Q8_0: quantize_row_q8_0(row.data(), cols, reinterpret_cast<BlockQ8_0*>(dst)); break;
        default: ADD_FAILURE() << "make_weights: no quantizer for " << dtype_name(type); break;
        }
    }
    return w;
}

std::vector<float> random_x(int64_t n, int64_t cols, uint32_t seed) { return test::randn(size_t(n * cols), seed); }

std::vector<float> run(const Weights& w, const std::vector<float>& x, int64_t n, ThreadPool* pool, SimdLevel level) {
    std::vector<std::byte> scratch(matmul_scratch_bytes(w.type, n, w.cols) + 1);
    std::vector<float> y(size_t(n * w.rows), NAN);
    matmul(w.view(), x.data(), n, y.data(), scratch, pool, level);
    return y;
}

const DType kTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0};

// Column counts: float types get odd widths (vector tails); Q8_0 needs multiples of 32 and gets
// odd block counts (the AVX-512 path pairs blocks).
std::vector<int64_t> widths(DType t) {
    if (t == DType::Q8_0) return {32, 96, 192, 160, 512};
    return {1, 7, 8, 31, 67, 192, 203};
}

} // namespace

TEST(Matmul, DetectsALevelAndNamesIt) {
    const SimdLevel l = detect_simd();
    EXPECT_STRNE(simd_name(l), "unknown");
    EXPECT_EQ(detect_simd(), l);
    EXPECT_NO_THROW(require_simd(SimdLevel::Scalar));
    EXPECT_NO_THROW(require_simd(l));
    if (l != SimdLevel::Avx512) {
        EXPECT_THROW(require_simd(SimdLevel::Avx512), Error);
    }
}

TEST(Matmul, MatchesReference) {
    for (SimdLevel level : levels()) {
        for (DType type : kTypes) {
            for (int64_t cols : widths(type)) {
                const int64_t rows = 37, n = 5;
                const Weights w = make_weights(type, rows, cols, uint32_t(cols * 7 + int(type)));
                const auto x = random_x(n, cols, 99);
                const auto y = run(w, x, n, nullptr, level);

                // Q8_0 quantizes x first: compare against the reference on the quantized x
                // (tight), and on the float x (loose).
                std::vector<float> xr = x;
                if (type == DType::Q8_0) {
                    std::vector<BlockQ8_0> q(static_cast<size_t>(cols / 32));
                    for (int64_t t = 0; t < n; ++t) {
                        quantize_row_q8_0(x.data() + t * cols, cols, q.data());
                        dequantize_row(DType::Q8_0, q.data(), cols, xr.data() + t * cols);
                    }
                }
                std::vector<float> ref(size_t(n * rows)), ref_float(size_t(n * rows));
                matmul_reference(w.view(), xr.data(), n, ref.data());
                matmul_reference(w.view(), x.data(), n, ref_float.data());
                std::vector<float> wf(static_cast<size_t>(cols));
                for (int64_t t = 0; t < n; ++t) {
                    for (int64_t r = 0; r < rows; ++r) {
                        dequantize_row(type, w.data.data() + size_t(r) * dtype_row_bytes(type, cols), cols, wf.data());
                        double mag = 0;
                        for (int64_t k = 0; k < cols; ++k) mag += std::fabs(double(wf[size_t(k)]) * xr[size_t(t * cols + k)]);
                        const size_t i = size_t(t * rows + r);
                        EXPECT_NEAR(y[i], ref[i], 1e-5 * mag + 1e-6)
                            << simd_name(level) << " " << dtype_name(type) << " cols " << cols << " t " << t << " r " << r;
                        if (type == DType::Q8_0) {
                            EXPECT_NEAR(y[i], ref_float[i], 0.02 * mag + 1e-3);
                        }
                    }
                }
            }
        }
    }
}

TEST(Matmul, TokenCountNeverChangesAResult) {
    for (SimdLevel level : levels()) {
        for (DType type : kTypes) {
            for (int64_t cols : widths(type)) {
                for (int64_t rows : {1, 5, 13, 37, 50}) {
                    const Weights w = make_weights(type, rows, cols, uint32_t(rows * 131 + cols));
                    const auto x = random_x(17, cols, uint32_t(rows + cols));
                    // Single-token outputs for each of the 17 tokens.
                    std::vector<std::vector<float>> single;
                    for (int64_t t = 0; t < 17; ++t) {
                        std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
                        single.push_back(run(w, xt, 1, nullptr, level));
                    }
                    for (int64_t n = 1; n <= 17; ++n) {
                        const auto y = run(w, x, n, nullptr, level);
                        for (int64_t t = 0; t < n; ++t)
                            ASSERT_EQ(std::memcmp(y.data() + t * rows, single[size_t(t)].data(), size_t(rows) * 4), 0)
                                << simd_name(level) << " " << dtype_name(type) << " rows " << rows << " cols " << cols
                                << " n " << n << " t " << t;
                    }
                }
            }
        }
    }
}

TEST(Matmul, ThreadCountNeverChangesAResult) {
    ThreadPool p2(2), p3(3);
    for (SimdLevel level : levels()) {
        for (DType type : kTypes) {
            for (int64_t rows : {67, 512, 1000}) {
                const int64_t cols = 192;
                const Weights w = make_weights(type, rows, cols, uint32_t(rows));
                for (int64_t n : {1, 4, 9, 17}) {
                    const auto x = random_x(n, cols, uint32_t(n));
                    const auto y1 = run(w, x, n, nullptr, level);
                    const auto y2 = run(w, x, n, &p2, level);
                    const auto y3 = run(w, x, n, &p3, level);
                    ASSERT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 4), 0) << dtype_name(type) << " " << rows << " " << n;
                    ASSERT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * 4), 0) << dtype_name(type) << " " << rows << " " << n;
                }
            }
        }
    }
}

// Q8_0 weights with a single 1 (scale 1.0) per row pick out one quantized activation each:
// y[r] = q_x[r] * d_x exactly, which exposes the activation quantization at every level.
TEST(Matmul, Q8ActivationQuantizationFollowsTheRule) {
    const int64_t cols = 64;
    Weights w{DType::Q8_0, cols, cols, std::vector<std::byte>(size_t(cols) * dtype_row_bytes(DType::Q8_0, cols))};
    for (int64_t r = 0; r < cols; ++r) {
        auto* blocks = reinterpret_cast<BlockQ8_0*>(w.data.data() + size_t(r) * dtype_row_bytes(DType::Q8_0, cols));
        for (int b = 0; b < 2; ++b) {
            blocks[b].d = fp32_to_fp16(1.0f);
            std::memset(blocks[b].qs, 0, 32);
        }
        blocks[r / 32].qs[r % 32] = 1;
    }
    std::vector<float> x = random_x(1, cols, 5);
    // Block 1: amax 127 so d = 1 and roundf's ties show (2.5 -> 3, -2.5 -> -3, 0.5 -> 1).
    const float ties[6] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, -126.5f};
    for (int j = 0; j < 6; ++j) x[size_t(32 + j)] = ties[j];
    for (int j = 6; j < 32; ++j) x[size_t(32 + j)] = float(j % 11) - 5.5f;
    BlockQ8_0 q[2];
    quantize_row_q8_0(x.data(), cols, q);
    for (SimdLevel level : levels()) {
        const auto y = run(w, x, 1, nullptr, level);
        for (int64_t k = 0; k < cols; ++k)
            EXPECT_EQ(y[size_t(k)], float(q[k / 32].qs[k % 32]) * fp16_to_fp32(q[k / 32].d)) << simd_name(level) << " k " << k;
        EXPECT_EQ(y[33], 3.0f);
        EXPECT_EQ(y[34], -3.0f);
        EXPECT_EQ(y[35], 1.0f);
        EXPECT_EQ(y[36], -1.0f);
    }
}

// ggml's quantizer never writes -128, but a Q8_0 file may hold it; the SIMD dots take |w| as an
// unsigned byte, which must still give the exact product.
TEST(Matmul, Q8WeightsMayHoldMinus128) {
    const int64_t rows = 13, cols = 96, n = 3;
    Weights w = make_weights(DType::Q8_0, rows, cols, 21);
    for (int64_t r = 0; r < rows; ++r) {
        auto* blocks = reinterpret_cast<BlockQ8_0*>(w.data.data() + size_t(r) * dtype_row_bytes(DType::Q8_0, cols));
        for (int b = 0; b < 3; ++b)
            for (int j = int(r + b) % 5; j < 32; j += 5) blocks[b].qs[j] = -128;
    }
    const auto x = random_x(n, cols, 22);
    std::vector<float> xr(x.size());
    std::vector<BlockQ8_0> q(3);
    for (int64_t t = 0; t < n; ++t) {
        quantize_row_q8_0(x.data() + t * cols, cols, q.data());
        dequantize_row(DType::Q8_0, q.data(), cols, xr.data() + t * cols);
    }
    std::vector<float> ref(size_t(n * rows));
    matmul_reference(w.view(), xr.data(), n, ref.data());
    for (SimdLevel level : levels()) {
        const auto y = run(w, x, n, nullptr, level);
        for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-4 * (1 + std::fabs(ref[i]))) << simd_name(level) << " " << i;
    }
}

TEST(Matmul, ScalarOrderIsSequential) {
    // The scalar path's documented order: one float sum, k ascending.
    const int64_t rows = 3, cols = 45;
    const Weights w = make_weights(DType::F32, rows, cols, 3);
    const auto x = random_x(2, cols, 4);
    const auto y = run(w, x, 2, nullptr, SimdLevel::Scalar);
    const float* wf = reinterpret_cast<const float*>(w.data.data());
    for (int64_t t = 0; t < 2; ++t)
        for (int64_t r = 0; r < rows; ++r) {
            float s = 0.0f;
            for (int64_t k = 0; k < cols; ++k) s += wf[r * cols + k] * x[size_t(t * cols + k)];
            EXPECT_EQ(y[size_t(t * rows + r)], s);
        }
}

// The exact scalar model of the AVX2 / AVX-512 float bodies (matmul_tiles.h): `lanes`
// accumulators, lane j taking k = j mod lanes ascending by fma; AVX-512 folds lane i + lane i+8;
// then ((0+1)+(2+3)) + ((4+5)+(6+7)); then the cols % lanes tail as s += w*x, k ascending.
float simd_float_model(const float* w, const float* x, int64_t cols, int lanes) {
    float acc[16] = {};
    const int64_t kv = cols - cols % lanes;
    for (int64_t k = 0; k < kv; k += lanes)
        for (int j = 0; j < lanes; ++j) acc[j] = std::fma(w[k + j], x[k + j], acc[j]);
    float f[8];
    for (int i = 0; i < 8; ++i) f[i] = lanes == 16 ? acc[i] + acc[i + 8] : acc[i];
    float s = ((f[0] + f[1]) + (f[2] + f[3])) + ((f[4] + f[5]) + (f[6] + f[7]));
    for (int64_t k = kv; k < cols; ++k) s += w[k] * x[k];
    return s;
}

TEST(Matmul, FloatBodiesMatchTheirScalarModelBitForBit) {
    // Every token count 1..17 (all token blocks and tile shapes), row counts that leave every
    // possible remainder of the tile heights, widths with and without a vector tail.
    for (SimdLevel level : levels()) {
        if (level == SimdLevel::Scalar) continue; // its order is ScalarOrderIsSequential's
        const int lanes = level == SimdLevel::Avx512 ? 16 : 8;
        for (DType type : {DType::F32, DType::F16, DType::BF16}) {
            for (int64_t cols : {5, 16, 40, 192, 203}) {
                for (int64_t rows : {1, 7, 13, 64}) {
                    const Weights w = make_weights(type, rows, cols, uint32_t(rows * 17 + cols));
                    std::vector<float> wf(size_t(rows * cols));
                    for (int64_t r = 0; r < rows; ++r)
                        dequantize_row(type, w.data.data() + size_t(r) * dtype_row_bytes(type, cols), cols,
                                       wf.data() + r * cols);
                    const auto x = random_x(17, cols, uint32_t(cols + 5));
                    for (int64_t n = 1; n <= 17; ++n) {
                        const auto y = run(w, x, n, nullptr, level);
                        for (int64_t t = 0; t < n; ++t)
                            for (int64_t r = 0; r < rows; ++r) {
                                const float m = simd_float_model(wf.data() + r * cols, x.data() + t * cols, cols, lanes);
                                ASSERT_EQ(std::memcmp(&y[size_t(t * rows + r)], &m, 4), 0)
                                    << simd_name(level) << " " << dtype_name(type) << " cols " << cols << " rows " << rows
                                    << " n " << n << " t " << t << " r " << r;
                            }
                    }
                }
            }
        }
    }
}

TEST(Matmul, RejectsBadArguments) {
    const Weights w = make_weights(DType::F32, 4, 8, 1);
    const Weights q = make_weights(DType::Q8_0, 4, 32, 1);
    std::vector<float> x(64), y(64);
    std::vector<std::byte> scratch(1024);
    EXPECT_THROW(matmul(w.view(), nullptr, 1, y.data(), scratch, nullptr), Error);
    EXPECT_THROW(matmul(w.view(), x.data(), 1, nullptr, scratch, nullptr), Error);
    MatrixView bad = w.view();
    bad.data = nullptr;
    EXPECT_THROW(matmul(bad, x.data(), 1, y.data(), scratch, nullptr), Error);
    bad = w.view();
    bad.rows = 0;
    EXPECT_THROW(matmul(bad, x.data(), 1, y.data(), scratch, nullptr), Error);
    bad = w.view();
    bad.cols = -8;
    EXPECT_THROW(matmul(bad, x.data(), 1, y.data(), scratch, nullptr), Error);
    EXPECT_THROW(matmul(w.view(), x.data(), 0, y.data(), scratch, nullptr), Error);
    // Q8_0: width not a multiple of 32, scratch too small or missing.
    bad = q.view();
    bad.cols = 40;
    EXPECT_THROW(matmul(bad, x.data(), 1, y.data(), scratch, nullptr), Error);
    // Room for either layout: 2 ggml blocks in the file's layout, a Q8Input when packed.
    EXPECT_EQ(matmul_scratch_bytes(DType::Q8_0, 2, 32), std::max(2 * sizeof(BlockQ8_0), q8_input_bytes(2, 32)));
    EXPECT_EQ(matmul_scratch_bytes(DType::F32, 2, 32), 0u);
    EXPECT_THROW(matmul(q.view(), x.data(), 2, y.data(), std::span<std::byte>(scratch.data(), 67), nullptr), Error);
    EXPECT_THROW(matmul(q.view(), x.data(), 1, y.data(), std::span<std::byte>(), nullptr), Error);
    EXPECT_NO_THROW(matmul(q.view(), x.data(), 2, y.data(), std::span<std::byte>(scratch.data(), 68), nullptr));
    EXPECT_NO_THROW(matmul(w.view(), x.data(), 1, y.data(), std::span<std::byte>(), nullptr));
    if (detect_simd() != SimdLevel::Avx512) {
        EXPECT_THROW(matmul(w.view(), x.data(), 1, y.data(), scratch, nullptr, SimdLevel::Avx512), Error);
    }
    EXPECT_THROW(matmul_reference(bad, x.data(), 1, y.data()), Error);
}
