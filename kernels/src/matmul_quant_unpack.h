// Unpacking of one unit of a 4/5/6-bit weight row into what every matmul_quant body computes with
// (see matmul_quant.h): unsigned quants, per-16 scales and offset factors, the float factors.
// Included by the scalar and the SIMD bodies; in an anonymous namespace so that copies built with
// different ISA flags are never merged by the linker.
#pragma once
#include <cstdint>
#include <cstring>

#include "matmul_quant.h"
#include "quant_impl.h"

namespace rwd::detail {
namespace {

struct Unit {
    int16_t sc[16]; // scale of each 16 quants (1 for the 32-blocks)
    int16_t c[16];  // offset factor of each 16 quants (see matmul_quant.h)
    float d1, d2;   // d, and dmin (K) or m (Q4_1/Q5_1); d2 unused by the no-min formats
};

constexpr bool has_min(DType t) {
    return t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q4_K || t == DType::Q5_K;
}

// 32-block formats: quants q[0..32), the factors in u (sc, c for the two halves).
template <DType T>
inline void unpack32(const std::byte* blk, uint8_t* q, Unit& u) {
    const uint8_t* qs;
    uint32_t qh = 0;
    uint16_t hd, hm = 0;
    std::memcpy(&hd, blk, 2);
    if constexpr (T == DType::Q4_0) {
        qs = reinterpret_cast<const uint8_t*>(blk) + 2;
    } else if constexpr (T == DType::Q4_1) {
        std::memcpy(&hm, blk + 2, 2);
        qs = reinterpret_cast<const uint8_t*>(blk) + 4;
    } else if constexpr (T == DType::Q5_0) {
        std::memcpy(&qh, blk + 2, 4);
        qs = reinterpret_cast<const uint8_t*>(blk) + 6;
    } else {
        std::memcpy(&hm, blk + 2, 2);
        std::memcpy(&qh, blk + 4, 4);
        qs = reinterpret_cast<const uint8_t*>(blk) + 8;
    }
    for (int i = 0; i < 16; ++i) {
        q[i] = uint8_t((qs[i] & 15) | ((qh >> i) & 1u) << 4);
        q[i + 16] = uint8_t((qs[i] >> 4) | ((qh >> (i + 16)) & 1u) << 4);
    }
    u.d1 = fp16_to_fp32(hd);
    u.d2 = fp16_to_fp32(hm);
    const int16_t c = T == DType::Q4_0 ? 8 : T == DType::Q5_0 ? 16 : -1;
    u.sc[0] = u.sc[1] = 1;
    u.c[0] = u.c[1] = c;
}

// K-quant super-blocks: quants q[0..256) and the factors in u.
template <DType T>
inline void unpack256(const std::byte* blk, uint8_t* q, Unit& u) {
    if constexpr (T == DType::Q6_K) {
        BlockQ6_K b;
        std::memcpy(&b, blk, sizeof b);
        for (int h = 0; h < 2; ++h)
            for (int l = 0; l < 32; ++l) {
                const uint8_t l0 = b.ql[64 * h + l], l1 = b.ql[64 * h + 32 + l], hb = b.qh[32 * h + l];
                q[128 * h + l] = uint8_t((l0 & 15) | (hb & 3) << 4);
                q[128 * h + 32 + l] = uint8_t((l1 & 15) | ((hb >> 2) & 3) << 4);
                q[128 * h + 64 + l] = uint8_t((l0 >> 4) | ((hb >> 4) & 3) << 4);
                q[128 * h + 96 + l] = uint8_t((l1 >> 4) | (hb >> 6) << 4);
            }
        for (int k = 0; k < 16; ++k) {
            u.sc[k] = b.scales[k];
            u.c[k] = int16_t(32 * b.scales[k]);
        }
        u.d1 = fp16_to_fp32(b.d);
        u.d2 = 0.0f;
    } else {
        constexpr bool five = T == DType::Q5_K;
        uint16_t hd, hdmin;
        std::memcpy(&hd, blk, 2);
        std::memcpy(&hdmin, blk + 2, 2);
        const auto* scales = reinterpret_cast<const uint8_t*>(blk) + 4;
        const auto* qh = reinterpret_cast<const uint8_t*>(blk) + 16;
        const auto* qs = reinterpret_cast<const uint8_t*>(blk) + (five ? 48 : 16);
        uint8_t sc[8], m[8];
        unpack_q4k_scales(scales, sc, m);
        for (int k = 0; k < 4; ++k)
            for (int l = 0; l < 32; ++l) {
                uint8_t lo = qs[32 * k + l] & 15, hi = qs[32 * k + l] >> 4;
                if constexpr (five) {
                    lo = uint8_t(lo | ((qh[l] >> (2 * k)) & 1) << 4);
                    hi = uint8_t(hi | ((qh[l] >> (2 * k + 1)) & 1) << 4);
                }
                q[64 * k + l] = lo;
                q[64 * k + 32 + l] = hi;
            }
        for (int k = 0; k < 16; ++k) {
            u.sc[k] = sc[k / 2];
            u.c[k] = m[k / 2];
        }
        u.d1 = fp16_to_fp32(hd);
        u.d2 = fp16_to_fp32(hdmin);
    }
}

} // namespace
} // namespace rwd::detail
