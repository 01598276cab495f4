// matmul on the 4/5/6-bit ggml formats (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) at every SIMD
// level this CPU has: each SIMD body bit for bit against the scalar body (the exact model of its
// arithmetic, kernels/src/matmul_quant.h), against the dequantize + Eigen reference, extreme blocks
// (no int overflow or saturation), and the product promise (token count, thread count).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "rewind/error.h"
#include "rewind/kernels/matmul.h"
#include "matmul_reference.h"

using namespace rwd;

namespace {

const DType kQuantTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

bool is_k(DType t) { return dtype_block_size(t) == 256; }

struct Weights {
    DType type;
    int64_t rows, cols;
    std::vector<std::byte> data;
    MatrixView view() const { return MatrixView{type, data.data(), rows, cols}; }
    const std::byte* row(int64_t r) const { return data.data() + size_t(r) * dtype_row_bytes(type, cols); }
};

// Rows of N(0, 0.5^2) (plus a per-row shift, so the formats' offsets matter), quantized by rewind.
Weights make_weights(DType type, int64_t rows, int64_t cols, uint32_t seed) {
    Weights w{type, rows, cols, std::vector<std::byte>(dtype_row_bytes(type, cols) * size_t(rows))};
    std::vector<float> x = test::randn(size_t(rows * cols), seed, 0.5f);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < cols; ++k) x[size_t(r * cols + k)] += 0.05f * float(r % 5);
        quantize_row(type, x.data() + r * cols, cols, const_cast<std::byte*>(w.row(r)));
    }
    return w;
}

// Random bytes in every quant field (so every bit pattern shows up), sane fp16 scales.
Weights random_block_weights(DType type, int64_t rows, int64_t cols, uint32_t seed, bool extreme) {
    Weights w{type, rows, cols, std::vector<std::byte>(dtype_row_bytes(type, cols) * size_t(rows))};
    std::mt19937 rng(seed);
    for (auto& b : w.data) b = std::byte(extreme ? 0xff : uint8_t(rng()));
    const size_t bb = dtype_row_bytes(type, dtype_block_size(type));
    const uint16_t one = fp32_to_fp16(extreme ? 1.0f : 0.01f), minus = fp32_to_fp16(extreme ? -1.0f : -0.005f);
    for (size_t o = 0; o < w.data.size(); o += bb) {
        std::byte* p = w.data.data() + o;
        switch (type) {
        case DType::Q4_0: case DType::Q5_0: std::memcpy(p, &one, 2); break;
        case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K:
            std::memcpy(p, &one, 2);
            std::memcpy(p + 2, &minus, 2);
            break;
        case DType::Q6_K:
            std::memcpy(p + 208, &one, 2);
            if (extreme) std::memset(p + 192, 0x80, 16); // every sub-block scale -128
            break;
        default: break;
        }
    }
    return w;
}

// The activations each type computes with, dequantized (ggml's Q8_0 rule; its Q8_K rule).
std::vector<float> quantized_x(DType type, const std::vector<float>& x, int64_t n, int64_t cols) {
    std::vector<float> out(x.size());
    for (int64_t t = 0; t < n; ++t) {
        const float* xt = x.data() + t * cols;
        float* ot = out.data() + t * cols;
        if (!is_k(type)) {
            std::vector<BlockQ8_0> q(size_t(cols / 32));
            quantize_row_q8_0(xt, cols, q.data());
            dequantize_row(DType::Q8_0, q.data(), cols, ot);
            continue;
        }
        for (int64_t b = 0; b < cols / 256; ++b) {
            float amax = 0, vmax = 0;
            for (int i = 0; i < 256; ++i)
                if (std::fabs(xt[256 * b + i]) > amax) amax = std::fabs(xt[256 * b + i]), vmax = xt[256 * b + i];
            const float iscale = amax != 0 ? -127.0f / vmax : 0.0f;
            for (int i = 0; i < 256; ++i) {
                const float q = amax != 0 ? std::min(127.0f, std::nearbyint(iscale * xt[256 * b + i])) : 0.0f;
                ot[256 * b + i] = amax != 0 ? q * (1.0f / iscale) : 0.0f;
            }
        }
    }
    return out;
}

std::vector<float> run(const Weights& w, const std::vector<float>& x, int64_t n, ThreadPool* pool, SimdLevel level) {
    std::vector<std::byte> scratch(matmul_scratch_bytes(w.type, n, w.cols) + 4);
    std::vector<float> y(size_t(n * w.rows), NAN);
    matmul(w.view(), x.data(), n, y.data(), scratch, pool, level);
    return y;
}

std::vector<int64_t> widths(DType t) {
    if (is_k(t)) return {256, 512, 768};
    return {32, 96, 160, 192, 512};
}

// Checks y against the reference on the activations the kernel sees: within float rounding of a
// sum of |w x| (tight), and against the float x (the activation quantization's error: 2 %).
void expect_near_reference(const Weights& w, const std::vector<float>& x, int64_t n, const std::vector<float>& y,
                           const std::string& what) {
    const std::vector<float> xq = quantized_x(w.type, x, n, w.cols);
    std::vector<float> ref(size_t(n * w.rows)), ref_float(size_t(n * w.rows));
    matmul_reference(w.view(), xq.data(), n, ref.data());
    matmul_reference(w.view(), x.data(), n, ref_float.data());
    std::vector<float> wf(size_t(w.cols));
    for (int64_t r = 0; r < w.rows; ++r) {
        dequantize_row(w.type, w.row(r), w.cols, wf.data());
        for (int64_t t = 0; t < n; ++t) {
            double mag = 0, magf = 0;
            for (int64_t k = 0; k < w.cols; ++k) {
                mag += std::fabs(double(wf[size_t(k)]) * xq[size_t(t * w.cols + k)]);
                magf += std::fabs(double(wf[size_t(k)]) * x[size_t(t * w.cols + k)]);
            }
            const size_t i = size_t(t * w.rows + r);
            ASSERT_NEAR(y[i], ref[i], 1e-5 * mag + 1e-6) << what << " t " << t << " r " << r;
            ASSERT_NEAR(y[i], ref_float[i], 0.02 * magf + 1e-4) << what << " t " << t << " r " << r;
        }
    }
}

} // namespace

TEST(MatmulQuant, EveryBodyMatchesItsScalarModelBitForBit) {
    const auto levels = supported_simd_levels();
    ASSERT_EQ(levels.front(), SimdLevel::Scalar);
    for (DType type : kQuantTypes) {
        for (int64_t cols : widths(type)) {
            for (int64_t rows : {1, 8, 13, 40}) {
                for (int kind = 0; kind < 3; ++kind) {
                    const Weights w = kind == 0 ? make_weights(type, rows, cols, uint32_t(cols + rows))
                                                : random_block_weights(type, rows, cols, uint32_t(rows), kind == 2);
                    const int64_t n = 7;
                    std::vector<float> x = test::randn(size_t(n * cols), uint32_t(cols * 3 + rows), 1.0f);
                    if (kind == 2)
                        for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? -1.0f : 1.0f; // quants of +-127
                    const auto model = run(w, x, n, nullptr, SimdLevel::Scalar);
                    for (SimdLevel level : levels) {
                        const auto y = run(w, x, n, nullptr, level);
                        ASSERT_EQ(std::memcmp(y.data(), model.data(), y.size() * 4), 0)
                            << simd_name(level) << " " << dtype_name(type) << " cols " << cols << " rows " << rows
                            << " kind " << kind;
                    }
                    if (kind != 0) expect_near_reference(w, x, n, model, std::string(dtype_name(type)) + " blocks");
                }
            }
        }
    }
}

TEST(MatmulQuant, MatchesReference) {
    for (SimdLevel level : supported_simd_levels())
        for (DType type : kQuantTypes)
            for (int64_t cols : widths(type)) {
                const int64_t rows = 37, n = 5;
                const Weights w = make_weights(type, rows, cols, uint32_t(cols * 7 + int(type)));
                const auto x = test::randn(size_t(n * cols), 99);
                expect_near_reference(w, x, n, run(w, x, n, nullptr, level),
                                      std::string(simd_name(level)) + " " + dtype_name(type) + " cols " + std::to_string(cols));
            }
}

TEST(MatmulQuant, TokenCountNeverChangesAResult) {
    for (SimdLevel level : supported_simd_levels())
        for (DType type : kQuantTypes)
            for (int64_t rows : {5, 16, 37}) {
                const int64_t cols = is_k(type) ? 512 : 192;
                const Weights w = make_weights(type, rows, cols, uint32_t(rows * 131 + cols));
                const int64_t nmax = 35; // past two of the bodies' 16-token chunks
                const auto x = test::randn(size_t(nmax * cols), uint32_t(rows + cols));
                std::vector<std::vector<float>> single;
                for (int64_t t = 0; t < nmax; ++t) {
                    std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
                    single.push_back(run(w, xt, 1, nullptr, level));
                }
                for (int64_t n : {1, 2, 3, 8, 9, 16, 17, 33, 35}) {
                    const auto y = run(w, x, n, nullptr, level);
                    for (int64_t t = 0; t < n; ++t)
                        ASSERT_EQ(std::memcmp(y.data() + t * rows, single[size_t(t)].data(), size_t(rows) * 4), 0)
                            << simd_name(level) << " " << dtype_name(type) << " rows " << rows << " n " << n << " t " << t;
                }
            }
}

TEST(MatmulQuant, ThreadCountNeverChangesAResult) {
    ThreadPool p2(2), p3(3);
    for (SimdLevel level : supported_simd_levels())
        for (DType type : kQuantTypes)
            for (int64_t rows : {67, 512}) {
                const int64_t cols = is_k(type) ? 512 : 192;
                const Weights w = make_weights(type, rows, cols, uint32_t(rows));
                for (int64_t n : {1, 9, 17}) {
                    const auto x = test::randn(size_t(n * cols), uint32_t(n));
                    const auto y1 = run(w, x, n, nullptr, level);
                    const auto y2 = run(w, x, n, &p2, level);
                    const auto y3 = run(w, x, n, &p3, level);
                    ASSERT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 4), 0) << dtype_name(type) << " " << rows << " " << n;
                    ASSERT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * 4), 0) << dtype_name(type) << " " << rows << " " << n;
                }
            }
}

TEST(MatmulQuant, RefusesBadShapesAndScratch) {
    const Weights w = make_weights(DType::Q4_K, 8, 256, 1);
    const auto x = test::randn(256, 2);
    std::vector<float> y(8);
    std::vector<std::byte> small(matmul_scratch_bytes(DType::Q4_K, 1, 256) - 1);
    EXPECT_THROW(matmul(w.view(), x.data(), 1, y.data(), small, nullptr), Error);
    EXPECT_THROW(matmul(w.view(), x.data(), 1, y.data(), {}, nullptr), Error);
    MatrixView bad = w.view();
    bad.cols = 192; // not a whole super-block
    std::vector<std::byte> scratch(4096);
    EXPECT_THROW(matmul(bad, x.data(), 1, y.data(), scratch, nullptr), Error);
    EXPECT_THROW(matmul_scratch_bytes(DType::Q5_0, 1, 48), Error);
    EXPECT_EQ(matmul_scratch_bytes(DType::F32, 3, 48), 0u);
}

// The 256-block activation quantizer has an AVX2 twin (same bytes): ties in magnitude (the first
// value wins), exact halves after scaling (round half to even), an all-zero block, NaN skipped
// in the maximum; every level must give the scalar body's bits.
TEST(MatmulQuant, ActivationEdgeCasesAgreeAcrossLevels) {
    const Weights w = make_weights(DType::Q4_K, 16, 1024, 4);
    std::vector<float> x = test::randn(1024, 5);
    x[3] = -4.0f;
    x[7] = 4.0f; // block 0: same magnitude, the first (negative) one sets the scale
    for (int i = 256; i < 512; ++i) x[size_t(i)] = float(i % 9 - 4) + 0.5f; // scale 1 (below): exact halves
    x[300] = 127.0f;
    for (int i = 512; i < 768; ++i) x[size_t(i)] = 0.0f; // block 2: all zero
    x[800] = NAN;                                        // block 3: NaN skipped by the maximum
    const auto model = run(w, x, 1, nullptr, SimdLevel::Scalar);
    for (SimdLevel level : supported_simd_levels()) {
        const auto y = run(w, x, 1, nullptr, level);
        ASSERT_EQ(std::memcmp(model.data(), y.data(), y.size() * 4), 0) << simd_name(level);
    }
}
