// dtype: half/bfloat conversions (exhaustive round trips, rounding edges, subnormals, inf/NaN, a
// cross-check against the CPU's F16C), row sizes, dequantization and the Q8_0 quantization rule.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "rewind/error.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace rwd;

namespace {

float f(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t hw_fp32_to_fp16(float x) {
    return uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT), 0));
}
__attribute__((target("f16c"))) float hw_fp16_to_fp32(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
#endif

} // namespace

TEST(Dtype, Names) {
    EXPECT_STREQ(dtype_name(DType::F32), "F32");
    EXPECT_STREQ(dtype_name(DType::F16), "F16");
    EXPECT_STREQ(dtype_name(DType::BF16), "BF16");
    EXPECT_STREQ(dtype_name(DType::Q8_0), "Q8_0");
}

TEST(Dtype, RowBytes) {
    EXPECT_EQ(dtype_row_bytes(DType::F32, 10), 40u);
    EXPECT_EQ(dtype_row_bytes(DType::F16, 10), 20u);
    EXPECT_EQ(dtype_row_bytes(DType::BF16, 7), 14u);
    EXPECT_EQ(dtype_row_bytes(DType::Q8_0, 64), 68u);
    EXPECT_EQ(dtype_row_bytes(DType::Q8_0, 0), 0u);
    EXPECT_THROW(dtype_row_bytes(DType::Q8_0, 33), Error);
    EXPECT_THROW(dtype_row_bytes(DType::F32, -1), Error);
    EXPECT_THROW(dtype_row_bytes(static_cast<DType>(99), 4), Error);
}

TEST(Dtype, Fp16KnownValues) {
    EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
    EXPECT_EQ(fp16_to_fp32(0xc000), -2.0f);
    EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
    EXPECT_EQ(fp16_to_fp32(0x0400), std::ldexp(1.0f, -14));          // smallest normal
    EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));          // smallest subnormal
    EXPECT_EQ(fp16_to_fp32(0x03ff), std::ldexp(1023.0f, -24));       // largest subnormal
    EXPECT_EQ(fp16_to_fp32(0x8001), -std::ldexp(1.0f, -24));
    EXPECT_EQ(bits(fp16_to_fp32(0x0000)), 0u);
    EXPECT_EQ(bits(fp16_to_fp32(0x8000)), 0x80000000u);
    EXPECT_EQ(fp16_to_fp32(0x7c00), std::numeric_limits<float>::infinity());
    EXPECT_EQ(fp16_to_fp32(0xfc00), -std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
    EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7c01)));
}

TEST(Dtype, Fp16RoundTripIsExactForEveryHalf) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float x = fp16_to_fp32(uint16_t(h));
        const uint16_t back = fp32_to_fp16(x);
        if (std::isnan(x)) {
            EXPECT_TRUE(std::isnan(fp16_to_fp32(back))) << h;
            EXPECT_EQ(back & 0x8000, h & 0x8000) << h;
        } else {
            ASSERT_EQ(back, h) << "half 0x" << std::hex << h;
        }
    }
}

TEST(Dtype, Fp16RoundsToNearestEven) {
    const float one = 1.0f, ulp = std::ldexp(1.0f, -10);
    EXPECT_EQ(fp32_to_fp16(one + ulp / 2), 0x3c00);                       // tie -> even (1.0)
    EXPECT_EQ(fp32_to_fp16(one + 3 * ulp / 2), 0x3c02);                   // tie -> even (1+2ulp)
    EXPECT_EQ(fp32_to_fp16(std::nextafter(one + ulp / 2, 2.0f)), 0x3c01); // just above the tie
    EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
    EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7bff);                             // below the overflow tie
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);                             // tie rounds up to inf
    EXPECT_EQ(fp32_to_fp16(1e10f), 0x7c00);
    EXPECT_EQ(fp32_to_fp16(-1e10f), 0xfc00);
    // Subnormal results.
    const float tiny = std::ldexp(1.0f, -24);
    EXPECT_EQ(fp32_to_fp16(tiny), 0x0001);
    EXPECT_EQ(fp32_to_fp16(tiny / 2), 0x0000);                             // tie -> even (0)
    EXPECT_EQ(fp32_to_fp16(std::nextafter(tiny / 2, 1.0f)), 0x0001);
    EXPECT_EQ(fp32_to_fp16(3 * tiny / 2), 0x0002);                         // tie -> even (2)
    EXPECT_EQ(fp32_to_fp16(5 * tiny / 2), 0x0002);                         // tie -> even (2)
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1023.5f, -24)), 0x0400);             // rounds up into the normals
    EXPECT_EQ(fp32_to_fp16(1e-10f), 0x0000);
    EXPECT_EQ(fp32_to_fp16(-1e-10f), 0x8000);
    EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
    EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
    EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
    const uint16_t nan = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(nan & 0x7c00, 0x7c00);
    EXPECT_NE(nan & 0x03ff, 0);
    EXPECT_NE(fp32_to_fp16(f(0x7f800001u)) & 0x03ff, 0); // signalling NaN with low payload stays NaN
}

#if defined(__x86_64__)
TEST(Dtype, Fp16MatchesF16cHardware) {
    if (!rwd::cpu_features().f16c) GTEST_SKIP() << "this CPU has no F16C instructions to compare with";
    std::mt19937 rng(1234);
    for (int i = 0; i < 2000000; ++i) {
        uint32_t u = rng();
        if (i % 2) u = (u & 0x807fffffu) | (uint32_t(100 + rng() % 50) << 23); // dense near the half range
        const float x = f(u);
        if (std::isnan(x)) continue;
        ASSERT_EQ(fp32_to_fp16(x), hw_fp32_to_fp16(x)) << "bits 0x" << std::hex << u;
    }
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float a = fp16_to_fp32(uint16_t(h)), b = hw_fp16_to_fp32(uint16_t(h));
        if (std::isnan(b)) {
            EXPECT_TRUE(std::isnan(a));
        } else {
            ASSERT_EQ(bits(a), bits(b)) << h;
        }
    }
}
#endif

TEST(Dtype, Bf16) {
    EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
    EXPECT_EQ(bf16_to_fp32(0xc000), -2.0f);
    EXPECT_EQ(bf16_to_fp32(0x7f80), std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isnan(bf16_to_fp32(0x7fc0)));
    EXPECT_EQ(bf16_to_fp32(0x0001), f(0x00010000u)); // subnormal passes through
    const float ulp = std::ldexp(1.0f, -7);
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(fp32_to_bf16(1.0f + ulp / 2), 0x3f80);      // tie -> even
    EXPECT_EQ(fp32_to_bf16(1.0f + 3 * ulp / 2), 0x3f82);  // tie -> even
    EXPECT_EQ(fp32_to_bf16(std::nextafter(1.0f + ulp / 2, 2.0f)), 0x3f81);
    EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7f80); // rounds to inf
    EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
    EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(f(0x7f800001u)))));
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float x = bf16_to_fp32(uint16_t(h));
        if (std::isnan(x)) continue;
        ASSERT_EQ(fp32_to_bf16(x), h);
    }
}

TEST(Dtype, DequantizeRow) {
    const float src[4] = {1.5f, -2.0f, 0.25f, 1e-3f};
    float out[4];
    dequantize_row(DType::F32, src, 4, out);
    EXPECT_EQ(std::memcmp(out, src, sizeof src), 0);

    uint16_t h[4], b[4];
    for (int i = 0; i < 4; ++i) {
        h[i] = fp32_to_fp16(src[i]);
        b[i] = fp32_to_bf16(src[i]);
    }
    dequantize_row(DType::F16, h, 4, out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], fp16_to_fp32(h[i]));
    dequantize_row(DType::BF16, b, 4, out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], bf16_to_fp32(b[i]));

    BlockQ8_0 q[2];
    for (int blk = 0; blk < 2; ++blk) {
        q[blk].d = fp32_to_fp16(blk ? 0.5f : 0.125f);
        for (int j = 0; j < 32; ++j) q[blk].qs[j] = int8_t(j - 16 + blk);
    }
    float qo[64];
    dequantize_row(DType::Q8_0, q, 64, qo);
    for (int blk = 0; blk < 2; ++blk)
        for (int j = 0; j < 32; ++j) EXPECT_EQ(qo[blk * 32 + j], (blk ? 0.5f : 0.125f) * float(j - 16 + blk));
    EXPECT_THROW(dequantize_row(DType::Q8_0, q, 48, qo), Error);
    EXPECT_THROW(dequantize_row(DType::F32, nullptr, 4, out), Error);
}

TEST(Dtype, QuantizeQ8_0FollowsGgmlRule) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> x(96);
    for (auto& v : x) v = nd(rng);
    // Ties: with amax = 127 the scale is 1, so x*id is x and roundf's half-away rule shows.
    const float ties[8] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, -126.5f, 3.49999f};
    for (int j = 0; j < 8; ++j) x[64 + j] = ties[j];
    for (int j = 8; j < 32; ++j) x[64 + j] = float(j) - 16.0f;
    std::vector<BlockQ8_0> q(3);
    quantize_row_q8_0(x.data(), 96, q.data());
    for (int blk = 0; blk < 3; ++blk) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[blk * 32 + j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        EXPECT_EQ(q[blk].d, fp32_to_fp16(d));
        for (int j = 0; j < 32; ++j) EXPECT_EQ(q[blk].qs[j], int8_t(std::roundf(x[blk * 32 + j] * id))) << blk << "," << j;
    }
    EXPECT_EQ(q[2].qs[0], 127);
    EXPECT_EQ(q[2].qs[1], 3);
    EXPECT_EQ(q[2].qs[2], -3);
    EXPECT_EQ(q[2].qs[3], 1);
    EXPECT_EQ(q[2].qs[4], -1);
    EXPECT_EQ(q[2].qs[5], 2);
    EXPECT_EQ(q[2].qs[6], -127);
    EXPECT_EQ(q[2].qs[7], 3);

    std::vector<float> zeros(32, 0.0f);
    quantize_row_q8_0(zeros.data(), 32, q.data());
    EXPECT_EQ(q[0].d, 0);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(q[0].qs[j], 0);
    EXPECT_THROW(quantize_row_q8_0(x.data(), 40, q.data()), Error);
}
