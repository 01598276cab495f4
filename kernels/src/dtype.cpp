// Storage-type helpers: IEEE half and bfloat conversions done on the bits (no F16C needed, so
// they are exact on any CPU), row dequantization and ggml's Q8_0 quantization rule.
#include "rewind/kernels/dtype.h"

#include <cmath>
#include <cstring>
#include <string>

#include "quant_impl.h"
#include "rewind/error.h"

namespace rwd {

namespace {

uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
float bits_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

} // namespace

const char* dtype_name(DType t) {
    switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_1: return "Q4_1";
    case DType::Q5_0: return "Q5_0";
    case DType::Q5_1: return "Q5_1";
    case DType::Q4_K: return "Q4_K";
    case DType::Q5_K: return "Q5_K";
    case DType::Q6_K: return "Q6_K";
    }
    return "unknown";
}

namespace {

size_t block_bytes(DType t) {
    switch (t) {
    case DType::F32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::Q8_0: return sizeof(BlockQ8_0);
    case DType::Q4_0: return sizeof(BlockQ4_0);
    case DType::Q4_1: return sizeof(BlockQ4_1);
    case DType::Q5_0: return sizeof(BlockQ5_0);
    case DType::Q5_1: return sizeof(BlockQ5_1);
    case DType::Q4_K: return sizeof(BlockQ4_K);
    case DType::Q5_K: return sizeof(BlockQ5_K);
    case DType::Q6_K: return sizeof(BlockQ6_K);
    }
    return 0;
}

} // namespace

int64_t dtype_block_size(DType t) {
    switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return 1;
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1: return kQ8Block;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return kQKBlock;
    }
    throw Error(ErrorCode::unsupported, "dtype_block_size: unknown dtype " + std::to_string(uint32_t(t)));
}

size_t dtype_row_bytes(DType t, int64_t cols) {
    if (cols < 0) throw Error(ErrorCode::shape, "dtype_row_bytes: negative column count " + std::to_string(cols));
    const int64_t bs = dtype_block_size(t); // throws for an unknown type
    if (cols % bs != 0)
        throw Error(ErrorCode::shape, std::string("dtype_row_bytes: ") + dtype_name(t) + " row of " + std::to_string(cols) +
                    " columns is not a multiple of " + std::to_string(bs));
    return size_t(cols / bs) * block_bytes(t);
}

float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13)); // inf / NaN (payload kept)
    if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0) return bits_f32(sign);
    // Subnormal half: normalise so the leading one becomes the implicit bit of a float.
    int e = 113; // float exponent field of 2^-14
    while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --e;
    }
    return bits_f32(sign | (uint32_t(e) << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t fp32_to_fp16(float f) {
    const uint32_t x = f32_bits(f);
    const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
    const uint32_t exp = (x >> 23) & 0xffu;
    const uint32_t mant = x & 0x7fffffu;
    if (exp == 0xff) {
        if (mant == 0) return uint16_t(sign | 0x7c00u);
        return uint16_t(sign | 0x7e00u | (mant >> 13)); // quiet NaN, top payload bits kept
    }
    const int e = int(exp) - 127 + 15; // half exponent field before rounding
    if (e >= 31) return uint16_t(sign | 0x7c00u);
    if (e <= 0) {
        // Result is subnormal (or zero) in half: value = m * 2^(exp-150), unit 2^-24.
        const uint32_t m = mant | 0x800000u;
        const int shift = 126 - int(exp); // >= 14
        if (shift >= 25) return sign;  // below half the smallest subnormal
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) ++q; // may become the smallest normal: fine
        return uint16_t(sign | q);
    }
    uint32_t q = (uint32_t(e) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q; // a carry rolls into the exponent (to inf at the top)
    return uint16_t(sign | q);
}

float bf16_to_fp32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }

uint16_t fp32_to_bf16(float f) {
    const uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u); // NaN stays NaN
    return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

void dequantize_row(DType t, const void* row_data, int64_t cols, float* out) {
    if (!row_data || !out) throw Error("dequantize_row: null pointer");
    if (cols < 0) throw Error(ErrorCode::shape, "dequantize_row: negative column count");
    if (t != DType::F32 && t != DType::F16 && t != DType::BF16) dtype_row_bytes(t, cols); // throws for bad widths
    switch (t) {
    case DType::F32:
        std::memcpy(out, row_data, size_t(cols) * 4);
        return;
    case DType::F16: {
        const auto* h = static_cast<const uint16_t*>(row_data);
        for (int64_t i = 0; i < cols; ++i) out[i] = fp16_to_fp32(h[i]);
        return;
    }
    case DType::BF16: {
        const auto* h = static_cast<const uint16_t*>(row_data);
        for (int64_t i = 0; i < cols; ++i) out[i] = bf16_to_fp32(h[i]);
        return;
    }
    case DType::Q8_0: {
        if (cols % kQ8Block != 0) throw Error(ErrorCode::shape, "dequantize_row: Q8_0 row length not a multiple of 32");
        const auto* b = static_cast<const BlockQ8_0*>(row_data);
        for (int64_t i = 0; i < cols / kQ8Block; ++i) {
            const float d = fp16_to_fp32(b[i].d);
            for (int j = 0; j < kQ8Block; ++j) out[i * kQ8Block + j] = d * float(b[i].qs[j]);
        }
        return;
    }
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: detail::dequantize_row_new(t, row_data, cols, out); return;
    }
    throw Error(ErrorCode::unsupported, "dequantize_row: unknown dtype " + std::to_string(uint32_t(t)));
}

void quantize_row(DType t, const float* x, int64_t cols, void* out) {
    if (!x || !out) throw Error("quantize_row: null pointer");
    dtype_row_bytes(t, cols); // throws for an unknown type or a bad width
    // Every block type keeps fp16 scales (and mins): beyond fp16's range they would turn infinite.
    const bool half_range = t != DType::F32 && t != DType::BF16;
    for (int64_t i = 0; i < cols; ++i)
        if (!std::isfinite(x[i]) || (half_range && std::fabs(x[i]) > 65504.0f))
            throw Error(std::string("quantize_row: ") + dtype_name(t) + ": value " + std::to_string(x[i]) +
                        " at column " + std::to_string(i) +
                        (half_range ? " is outside fp16's finite range (|x| <= 65504)" : " is not finite"));
    switch (t) {
    case DType::F32: std::memcpy(out, x, size_t(cols) * 4); return;
    case DType::F16: {
        auto* h = static_cast<uint16_t*>(out);
        for (int64_t i = 0; i < cols; ++i) h[i] = fp32_to_fp16(x[i]);
        return;
    }
    case DType::BF16: {
        auto* h = static_cast<uint16_t*>(out);
        for (int64_t i = 0; i < cols; ++i) h[i] = fp32_to_bf16(x[i]);
        return;
    }
    case DType::Q8_0: quantize_row_q8_0(x, cols, static_cast<BlockQ8_0*>(out)); return;
    default: detail::quantize_row_new(t, x, cols, out); return;
    }
}

void quantize_row_q8_0(const float* x, int64_t cols, BlockQ8_0* out) {
    if (!x || !out) throw Error("quantize_row_q8_0: null pointer");
    if (cols < 0 || cols % kQ8Block != 0)
        throw Error(ErrorCode::shape, "quantize_row_q8_0: row of " + std::to_string(cols) + " is not a multiple of 32");
    for (int64_t b = 0; b < cols / kQ8Block; ++b) {
        const float* xb = x + b * kQ8Block;
        float amax = 0.0f;
        for (int j = 0; j < kQ8Block; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        out[b].d = fp32_to_fp16(d);
        for (int j = 0; j < kQ8Block; ++j) {
            // Clamped as a float: a NaN input has no int value (converting it is undefined in
            // C++); it becomes -128, what the AVX2 body's saturating packs give it.
            const float r = std::roundf(xb[j] * id);
            out[b].qs[j] = int8_t(r >= -128.0f && r <= 127.0f ? int(r) : (r > 0.0f ? 127 : -128));
        }
    }
}

} // namespace rwd
