// The ggml block formats beyond Q8_0: sizes, the element layout of each block (checked against a
// decoder written independently here from the GGUF layout, in ggml's loop form), rewind's quantizer
// (error bounds per type, every type round-trips through dequantize_row) and its failure rules.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "rewind/error.h"
#include "rewind/kernels/dtype.h"

using namespace rwd;

namespace {

const DType kAll[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                      DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = uint8_t(rng());
    return v;
}

// Random blocks with sane fp16 scales (random bits could be inf/NaN).
std::vector<uint8_t> random_row(DType t, int64_t cols, uint32_t seed) {
    std::vector<uint8_t> v = random_bytes(dtype_row_bytes(t, cols), seed);
    std::mt19937 rng(seed + 1);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    auto half = [&](uint8_t* p) {
        const uint16_t h = fp32_to_fp16(u(rng));
        std::memcpy(p, &h, 2);
    };
    const size_t bb = dtype_row_bytes(t, dtype_block_size(t));
    for (size_t o = 0; o < v.size(); o += bb) {
        switch (t) {
        case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: half(&v[o]); break;
        case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: half(&v[o]); half(&v[o + 2]); break;
        case DType::Q6_K: half(&v[o + 208]); break;
        default: break;
        }
    }
    return v;
}

float h2f(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fp16_to_fp32(h);
}

// Independent decoders of one block, in ggml's loop form.
void ref_block(DType t, const uint8_t* b, float* y) {
    switch (t) {
    case DType::Q4_0:
    case DType::Q4_1: {
        const bool m = t == DType::Q4_1;
        const float d = h2f(b), mn = m ? h2f(b + 2) : 0.0f;
        const uint8_t* qs = b + (m ? 4 : 2);
        for (int j = 0; j < 16; ++j) {
            y[j] = m ? d * float(qs[j] & 0x0F) + mn : d * float((qs[j] & 0x0F) - 8);
            y[j + 16] = m ? d * float(qs[j] >> 4) + mn : d * float((qs[j] >> 4) - 8);
        }
        return;
    }
    case DType::Q5_0:
    case DType::Q5_1: {
        const bool m = t == DType::Q5_1;
        const float d = h2f(b), mn = m ? h2f(b + 2) : 0.0f;
        uint32_t qh;
        std::memcpy(&qh, b + (m ? 4 : 2), 4);
        const uint8_t* qs = b + (m ? 8 : 6);
        for (int j = 0; j < 16; ++j) {
            const int xh0 = ((qh >> j) << 4) & 0x10;
            const int xh1 = ((qh >> (j + 12))) & 0x10;
            const int x0 = (qs[j] & 0x0F) | xh0, x1 = (qs[j] >> 4) | xh1;
            y[j] = m ? d * float(x0) + mn : d * float(x0 - 16);
            y[j + 16] = m ? d * float(x1) + mn : d * float(x1 - 16);
        }
        return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
        const bool five = t == DType::Q5_K;
        const float d = h2f(b), dmin = h2f(b + 2);
        const uint8_t* sc = b + 4;
        const uint8_t* qh = b + 16;
        const uint8_t* q = b + (five ? 48 : 16);
        auto scale_min = [&](int j, int& s, int& m) {
            if (j < 4) {
                s = sc[j] & 63;
                m = sc[j + 4] & 63;
            } else {
                s = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
                m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
            }
        };
        int is = 0;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < 256; j += 64) {
            int s, m;
            scale_min(is, s, m);
            const float d1 = d * float(s), m1 = dmin * float(m);
            scale_min(is + 1, s, m);
            const float d2 = d * float(s), m2 = dmin * float(m);
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * float((q[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * float((q[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
            q += 32;
            is += 2;
            u1 = uint8_t(u1 << 2);
            u2 = uint8_t(u2 << 2);
        }
        return;
    }
    case DType::Q6_K: {
        const float d = h2f(b + 208);
        const uint8_t* ql = b;
        const uint8_t* qh = b + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
        for (int n = 0; n < 256; n += 128) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * float(sc[is]) * float(q1);
                y[l + 32] = d * float(sc[is + 2]) * float(q2);
                y[l + 64] = d * float(sc[is + 4]) * float(q3);
                y[l + 96] = d * float(sc[is + 6]) * float(q4);
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
        return;
    }
    default: FAIL() << "no reference decoder for " << dtype_name(t);
    }
}

} // namespace

TEST(QuantFormats, BlockSizesAndRowBytes) {
    EXPECT_EQ(dtype_block_size(DType::F32), 1);
    EXPECT_EQ(dtype_block_size(DType::Q4_0), 32);
    EXPECT_EQ(dtype_block_size(DType::Q5_1), 32);
    EXPECT_EQ(dtype_block_size(DType::Q4_K), 256);
    EXPECT_EQ(dtype_block_size(DType::Q6_K), 256);
    EXPECT_EQ(dtype_row_bytes(DType::Q4_0, 64), 36u);
    EXPECT_EQ(dtype_row_bytes(DType::Q4_1, 64), 40u);
    EXPECT_EQ(dtype_row_bytes(DType::Q5_0, 64), 44u);
    EXPECT_EQ(dtype_row_bytes(DType::Q5_1, 64), 48u);
    EXPECT_EQ(dtype_row_bytes(DType::Q4_K, 512), 288u);
    EXPECT_EQ(dtype_row_bytes(DType::Q5_K, 256), 176u);
    EXPECT_EQ(dtype_row_bytes(DType::Q6_K, 256), 210u);
    EXPECT_THROW(dtype_row_bytes(DType::Q4_K, 192), Error);
    EXPECT_THROW(dtype_row_bytes(DType::Q5_0, 48), Error);
    EXPECT_THROW(dtype_block_size(static_cast<DType>(99)), Error);
    EXPECT_STREQ(dtype_name(DType::Q5_K), "Q5_K");
}

TEST(QuantFormats, DequantizeMatchesTheGgufLayout) {
    for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
        const int64_t bs = dtype_block_size(t);
        const int64_t cols = 3 * bs;
        const std::vector<uint8_t> row = random_row(t, cols, 11 + uint32_t(t));
        std::vector<float> got(cols), want(cols);
        dequantize_row(t, row.data(), cols, got.data());
        const size_t bb = dtype_row_bytes(t, bs);
        for (int64_t b = 0; b < 3; ++b) ref_block(t, row.data() + b * bb, want.data() + b * bs);
        for (int64_t i = 0; i < cols; ++i) ASSERT_EQ(got[i], want[i]) << dtype_name(t) << " element " << i;
    }
}

// Relative RMS error of quantize -> dequantize on N(0, 1) rows (and a shifted row for the formats
// with an offset); bounds are about 1.3x what each type measures, so a layout slip shows at once.
TEST(QuantFormats, QuantizeRoundTripsWithinTypeBounds) {
    struct Case {
        DType t;
        double bound;
    };
    // Measured (plain, shifted): F16 2.1e-4, BF16 1.7e-3, Q8_0 5.3e-3, Q4_0 0.083/0.080,
    // Q4_1 0.078/0.064, Q5_0 0.042, Q5_1 0.038/0.031, Q4_K 0.071/0.058, Q5_K 0.036/0.029, Q6_K 0.018.
    const Case cases[] = {{DType::F32, 0.0},   {DType::F16, 3e-4},  {DType::BF16, 2.5e-3}, {DType::Q8_0, 7e-3},
                          {DType::Q4_0, 0.11}, {DType::Q4_1, 0.1},  {DType::Q5_0, 0.055},  {DType::Q5_1, 0.05},
                          {DType::Q4_K, 0.09}, {DType::Q5_K, 0.047}, {DType::Q6_K, 0.023}};
    const int64_t cols = 1024;
    for (const Case& c : cases) {
        for (float shift : {0.0f, 0.7f}) {
            std::vector<float> x = test::randn(cols, 5, 1.0f);
            for (auto& v : x) v += shift;
            std::vector<uint8_t> q(dtype_row_bytes(c.t, cols));
            quantize_row(c.t, x.data(), cols, q.data());
            std::vector<uint8_t> q2(q.size());
            quantize_row(c.t, x.data(), cols, q2.data());
            EXPECT_EQ(q, q2) << dtype_name(c.t) << ": quantize_row must be deterministic";
            std::vector<float> y(cols);
            dequantize_row(c.t, q.data(), cols, y.data());
            double e = 0, n = 0;
            for (int64_t i = 0; i < cols; ++i) {
                e += double(y[i] - x[i]) * (y[i] - x[i]);
                n += double(x[i]) * x[i];
            }
            const double rel = std::sqrt(e / n);
            EXPECT_LE(rel, c.bound) << dtype_name(c.t) << " shift " << shift;
            if (c.bound > 0) {
                EXPECT_GT(rel, 0.0) << dtype_name(c.t);
            }
            RecordProperty(std::string(dtype_name(c.t)) + (shift != 0 ? "_shifted" : ""), std::to_string(rel));
        }
    }
}

TEST(QuantFormats, QuantizeEdgeRows) {
    for (DType t : kAll) {
        const int64_t cols = 256;
        std::vector<uint8_t> q(dtype_row_bytes(t, cols));
        std::vector<float> y(cols);
        // All zero: dequantizes to zero.
        std::vector<float> x(cols, 0.0f);
        quantize_row(t, x.data(), cols, q.data());
        dequantize_row(t, q.data(), cols, y.data());
        for (int64_t i = 0; i < cols; ++i) ASSERT_EQ(y[i], 0.0f) << dtype_name(t) << " " << i;
        // A constant row, positive or negative, and one large outlier among tiny values.
        for (float c : {0.25f, -3.0f}) {
            std::fill(x.begin(), x.end(), c);
            quantize_row(t, x.data(), cols, q.data());
            dequantize_row(t, q.data(), cols, y.data());
            for (int64_t i = 0; i < cols; ++i) ASSERT_NEAR(y[i], c, std::fabs(c) * 0.07) << dtype_name(t) << " " << i;
        }
        std::fill(x.begin(), x.end(), 1e-3f);
        x[7] = 100.0f;
        quantize_row(t, x.data(), cols, q.data());
        dequantize_row(t, q.data(), cols, y.data());
        EXPECT_NEAR(y[7], 100.0f, 7.0f) << dtype_name(t);
        for (int64_t i = 0; i < cols; ++i) ASSERT_TRUE(std::isfinite(y[i])) << dtype_name(t);
    }
}

TEST(QuantFormats, QuantizeRefusesBadInput) {
    std::vector<float> x(256, 1.0f);
    std::vector<uint8_t> q(1024, 0xAB);
    const std::vector<uint8_t> before = q;
    x[100] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_THROW(quantize_row(DType::Q4_K, x.data(), 256, q.data()), Error);
    x[100] = std::numeric_limits<float>::infinity();
    EXPECT_THROW(quantize_row(DType::Q4_0, x.data(), 256, q.data()), Error);
    EXPECT_EQ(q, before) << "nothing written when refused";
    x[100] = 7e4f; // beyond fp16: the block scales would be infinite
    for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0, DType::Q5_1, DType::Q4_K, DType::Q6_K})
        EXPECT_THROW(quantize_row(t, x.data(), 256, q.data()), Error) << dtype_name(t);
    EXPECT_EQ(q, before) << "nothing written when refused";
    EXPECT_NO_THROW(quantize_row(DType::BF16, x.data(), 256, q.data()));
    x[100] = -65504.0f; // the edge of the range is fine, and stays finite
    for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K,
                    DType::Q5_K, DType::Q6_K}) {
        quantize_row(t, x.data(), 256, q.data());
        std::vector<float> y(256);
        dequantize_row(t, q.data(), 256, y.data());
        for (float v : y) ASSERT_TRUE(std::isfinite(v)) << dtype_name(t);
        EXPECT_NEAR(y[100], -65504.0f, 65504.0f * 0.07f) << dtype_name(t);
    }
    x[100] = 1.0f;
    EXPECT_THROW(quantize_row(DType::Q6_K, x.data(), 128, q.data()), Error);
    EXPECT_THROW(quantize_row(DType::Q5_1, x.data(), 40, q.data()), Error);
    EXPECT_THROW(quantize_row(DType::Q4_0, nullptr, 32, q.data()), Error);
    EXPECT_THROW(quantize_row(DType::Q4_0, x.data(), 32, nullptr), Error);
    EXPECT_THROW(quantize_row(static_cast<DType>(77), x.data(), 32, q.data()), Error);
    EXPECT_THROW(dequantize_row(DType::Q4_K, q.data(), 100, x.data()), Error);
}
