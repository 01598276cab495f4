// The ggml block formats beyond Q8_0 (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K): row
// dequantization, and rewind's own quantizer for each (valid blocks llama.cpp reads; chosen by a
// small deterministic search, not llama-quantize's).
#include "quant_impl.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace rwd::detail {

namespace {

// Round half to even (the default rounding mode), as an int.
int nearest(float v) { return int(std::nearbyint(v)); }
int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

uint32_t load_qh(const uint8_t* qh) {
    return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}
void store_qh(uint8_t* qh, uint32_t v) {
    for (int i = 0; i < 4; ++i) qh[i] = uint8_t(v >> (8 * i));
}

// Q4_0/Q5_0/Q4_1/Q5_1: the 32 quants of a block (0..15 or 0..31) from its packed fields.
void unpack32(const uint8_t* qs, const uint8_t* qh, uint8_t* q) {
    const uint32_t h = qh ? load_qh(qh) : 0;
    for (int i = 0; i < 16; ++i) {
        q[i] = uint8_t((qs[i] & 15) | (((h >> i) & 1u) << 4));
        q[i + 16] = uint8_t((qs[i] >> 4) | (((h >> (i + 16)) & 1u) << 4));
    }
}
void pack32(const uint8_t* q, uint8_t* qs, uint8_t* qh) {
    uint32_t h = 0;
    for (int i = 0; i < 16; ++i) {
        qs[i] = uint8_t((q[i] & 15) | (q[i + 16] & 15) << 4);
        h |= uint32_t((q[i] >> 4) & 1) << i;
        h |= uint32_t((q[i + 16] >> 4) & 1) << (i + 16);
    }
    if (qh) store_qh(qh, h);
}

void unpack_scales_k(const uint8_t* s, uint8_t* sc, uint8_t* m) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; ++j) {
        sc[j] = uint8_t((s[j + 4] & 15) | (s[j - 4] >> 6) << 4);
        m[j] = uint8_t((s[j + 4] >> 4) | (s[j] >> 6) << 4);
    }
}
void pack_scales_k(const uint8_t* sc, const uint8_t* m, uint8_t* s) {
    for (int j = 0; j < 4; ++j) {
        s[j] = uint8_t((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        s[j + 4] = uint8_t((m[j] & 63) | (m[j + 4] >> 4) << 6);
        s[j + 8] = uint8_t((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
}

// Least-squares fit x ~ a*q + b over n values with b <= 0 (a K-quant min is stored as -b >= 0).
void fit_affine(const float* x, const uint8_t* q, int n, float& a, float& b) {
    double sq = 0, sx = 0, sqq = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
        sq += q[i];
        sx += x[i];
        sqq += double(q[i]) * q[i];
        sqx += double(q[i]) * x[i];
    }
    const double den = n * sqq - sq * sq;
    double aa = den > 0 ? (n * sqx - sq * sx) / den : 0.0;
    double bb = (sx - aa * sq) / n;
    if (bb > 0) { // the offset may only lower values: refit through the origin
        bb = 0;
        aa = sqq > 0 ? sqx / sqq : 0.0;
    }
    if (aa < 0) {
        aa = 0;
        bb = std::min(0.0, sx / n);
    }
    a = float(aa);
    b = float(bb);
}

double sq_error_affine(const float* x, const uint8_t* q, int n, float a, float b) {
    double e = 0;
    for (int i = 0; i < n; ++i) {
        const double d = double(a) * q[i] + b - x[i];
        e += d * d;
    }
    return e;
}

// Scale a >= 0 and offset b <= 0 for one sub-block of n values on 0..nmax: a few candidate
// grids over [min(x, 0), max(x)], each refitted by least squares; the smallest squared error wins
// (the first on ties).
void search_affine(const float* x, int n, int nmax, float& best_a, float& best_b) {
    float lo = 0.0f, hi = x[0];
    for (int i = 0; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
    if (!(hi > lo)) {
        best_a = 0.0f;
        best_b = lo;
        return;
    }
    uint8_t q[32];
    best_a = (hi - lo) / float(nmax);
    best_b = lo;
    for (int i = 0; i < n; ++i) q[i] = uint8_t(clampi(nearest((x[i] - lo) / best_a), 0, nmax));
    double best_e = sq_error_affine(x, q, n, best_a, best_b);
    for (int step = -6; step <= 10; ++step) {
        const float iscale = (float(nmax) + 0.1f * float(step)) / (hi - lo);
        for (int i = 0; i < n; ++i) q[i] = uint8_t(clampi(nearest((x[i] - lo) * iscale), 0, nmax));
        float a, b;
        fit_affine(x, q, n, a, b);
        if (a > 0)
            for (int i = 0; i < n; ++i) q[i] = uint8_t(clampi(nearest((x[i] - b) / a), 0, nmax));
        const double e = sq_error_affine(x, q, n, a, b);
        if (e < best_e) {
            best_e = e;
            best_a = a;
            best_b = b;
        }
    }
}

// Signed scale a for one Q6_K sub-block of n values: x ~ a*q, q in -32..31. Candidates map the
// value of largest magnitude to about -32 (the asymmetric range's long end), refitted.
float search_symmetric(const float* x, int n) {
    float amax = 0.0f, vmax = 0.0f;
    for (int i = 0; i < n; ++i)
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            vmax = x[i];
        }
    if (amax == 0.0f) return 0.0f;
    float best = vmax / -32.0f;
    auto err = [&](float a) {
        double e = 0;
        for (int i = 0; i < n; ++i) {
            const int q = clampi(nearest(x[i] / a), -32, 31);
            const double d = double(a) * q - x[i];
            e += d * d;
        }
        return e;
    };
    double best_e = err(best);
    for (int step = -9; step <= 9; ++step) {
        if (step == 0) continue;
        const float iscale = -(32.0f + 0.1f * float(step)) / vmax;
        double sqx = 0, sqq = 0;
        for (int i = 0; i < n; ++i) {
            const int q = clampi(nearest(x[i] * iscale), -32, 31);
            sqx += double(q) * x[i];
            sqq += double(q) * q;
        }
        if (sqq <= 0) continue;
        const float a = float(sqx / sqq);
        if (a == 0.0f) continue;
        const double e = err(a);
        if (e < best_e) {
            best_e = e;
            best = a;
        }
    }
    return best;
}

// ---- dequantization ----

template <class B>
void dequant_32(const void* row, int64_t cols, float* out, bool five, bool with_min) {
    const auto* b = static_cast<const B*>(row);
    uint8_t q[32];
    for (int64_t i = 0; i < cols / 32; ++i) {
        const float d = fp16_to_fp32(b[i].d);
        const uint8_t* qh = nullptr;
        float m = 0.0f;
        if constexpr (requires { b[i].qh; }) qh = b[i].qh;
        if constexpr (requires { b[i].m; }) m = fp16_to_fp32(b[i].m);
        unpack32(b[i].qs, five ? qh : nullptr, q);
        const int off = with_min ? 0 : (five ? 16 : 8);
        for (int j = 0; j < 32; ++j) out[i * 32 + j] = with_min ? d * float(q[j]) + m : d * float(int(q[j]) - off);
    }
}

} // namespace

void unpack_q4k_scales(const uint8_t* s, uint8_t* sc, uint8_t* m) { unpack_scales_k(s, sc, m); }

void dequantize_row_new(DType t, const void* row, int64_t cols, float* out) {
    switch (t) {
    case DType::Q4_0: dequant_32<BlockQ4_0>(row, cols, out, false, false); return;
    case DType::Q4_1: dequant_32<BlockQ4_1>(row, cols, out, false, true); return;
    case DType::Q5_0: dequant_32<BlockQ5_0>(row, cols, out, true, false); return;
    case DType::Q5_1: dequant_32<BlockQ5_1>(row, cols, out, true, true); return;
    case DType::Q4_K:
    case DType::Q5_K: {
        const bool five = t == DType::Q5_K;
        for (int64_t i = 0; i < cols / kQKBlock; ++i) {
            const uint8_t *scales, *qs, *qh = nullptr;
            uint16_t hd, hdmin;
            if (five) {
                const auto& b = static_cast<const BlockQ5_K*>(row)[i];
                scales = b.scales, qs = b.qs, qh = b.qh, hd = b.d, hdmin = b.dmin;
            } else {
                const auto& b = static_cast<const BlockQ4_K*>(row)[i];
                scales = b.scales, qs = b.qs, hd = b.d, hdmin = b.dmin;
            }
            uint8_t sc[8], m[8];
            unpack_scales_k(scales, sc, m);
            const float d = fp16_to_fp32(hd), dmin = fp16_to_fp32(hdmin);
            float* y = out + i * kQKBlock;
            for (int k = 0; k < 4; ++k) {
                for (int h = 0; h < 2; ++h) {
                    const int j = 2 * k + h;
                    const float ds = d * float(sc[j]), dm = dmin * float(m[j]);
                    for (int l = 0; l < 32; ++l) {
                        int q = h ? qs[32 * k + l] >> 4 : qs[32 * k + l] & 15;
                        if (qh) q |= ((qh[l] >> j) & 1) << 4;
                        y[32 * j + l] = ds * float(q) - dm;
                    }
                }
            }
        }
        return;
    }
    case DType::Q6_K: {
        const auto* b = static_cast<const BlockQ6_K*>(row);
        for (int64_t i = 0; i < cols / kQKBlock; ++i) {
            const float d = fp16_to_fp32(b[i].d);
            float* y = out + i * kQKBlock;
            for (int e = 0; e < kQKBlock; ++e) y[e] = d * float(b[i].scales[e / 16]) * float(q6k_value(b[i], e) - 32);
        }
        return;
    }
    default: break;
    }
}

// ---- quantization ----

namespace {

// Q4_0 / Q5_0 (`five`): 32 values per block, one scale, symmetric around half the range.
void quantize_q4_0_q5_0(bool five, const float* x, int64_t cols, void* out) {
    const int nmax = five ? 31 : 15;
    const float half = five ? 16.0f : 8.0f;
    for (int64_t i = 0; i < cols / 32; ++i) {
        const float* xb = x + i * 32;
        float amax = 0.0f, vmax = 0.0f;
        for (int j = 0; j < 32; ++j)
            if (std::fabs(xb[j]) > amax) {
                amax = std::fabs(xb[j]);
                vmax = xb[j];
            }
        const float d = vmax / -half;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t q[32];
        for (int j = 0; j < 32; ++j) q[j] = uint8_t(std::min(nmax, int(xb[j] * id + half + 0.5f)));
        if (five) {
            auto& b = static_cast<BlockQ5_0*>(out)[i];
            b.d = fp32_to_fp16(d);
            pack32(q, b.qs, b.qh);
        } else {
            auto& b = static_cast<BlockQ4_0*>(out)[i];
            b.d = fp32_to_fp16(d);
            pack32(q, b.qs, nullptr);
        }
    }
}

// Q4_1 / Q5_1 (`five`): 32 values per block, a scale and a minimum.
void quantize_q4_1_q5_1(bool five, const float* x, int64_t cols, void* out) {
    const int nmax = five ? 31 : 15;
    for (int64_t i = 0; i < cols / 32; ++i) {
        const float* xb = x + i * 32;
        float lo = xb[0], hi = xb[0];
        for (int j = 1; j < 32; ++j) {
            lo = std::min(lo, xb[j]);
            hi = std::max(hi, xb[j]);
        }
        const float d = (hi - lo) / float(nmax);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t q[32];
        for (int j = 0; j < 32; ++j) q[j] = uint8_t(std::min(nmax, int((xb[j] - lo) * id + 0.5f)));
        if (five) {
            auto& b = static_cast<BlockQ5_1*>(out)[i];
            b.d = fp32_to_fp16(d);
            b.m = fp32_to_fp16(lo);
            pack32(q, b.qs, b.qh);
        } else {
            auto& b = static_cast<BlockQ4_1*>(out)[i];
            b.d = fp32_to_fp16(d);
            b.m = fp32_to_fp16(lo);
            pack32(q, b.qs, nullptr);
        }
    }
}

// Q4_K / Q5_K (`five`): 256-value super-blocks of eight 32-value sub-blocks, 6-bit scales and mins.
void quantize_q4_k_q5_k(bool five, const float* x, int64_t cols, void* out) {
    const int nmax = five ? 31 : 15;
    for (int64_t i = 0; i < cols / kQKBlock; ++i) {
        const float* xs = x + i * kQKBlock;
        float a[8], b[8];
        float max_a = 0.0f, max_m = 0.0f;
        for (int j = 0; j < 8; ++j) {
            search_affine(xs + 32 * j, 32, nmax, a[j], b[j]);
            max_a = std::max(max_a, a[j]);
            max_m = std::max(max_m, -b[j]);
        }
        const uint16_t hd = fp32_to_fp16(max_a / 63.0f), hdmin = fp32_to_fp16(max_m / 63.0f);
        const float d = fp16_to_fp32(hd), dmin = fp16_to_fp32(hdmin);
        uint8_t sc[8], m[8], q[256];
        for (int j = 0; j < 8; ++j) {
            sc[j] = uint8_t(d > 0 ? clampi(nearest(a[j] / d), 0, 63) : 0);
            m[j] = uint8_t(dmin > 0 ? clampi(nearest(-b[j] / dmin), 0, 63) : 0);
            const float ds = d * float(sc[j]), dm = dmin * float(m[j]);
            for (int l = 0; l < 32; ++l)
                q[32 * j + l] = uint8_t(ds > 0 ? clampi(nearest((xs[32 * j + l] + dm) / ds), 0, nmax) : 0);
        }
        uint8_t *scales, *qs, *qh = nullptr;
        if (five) {
            auto& blk = static_cast<BlockQ5_K*>(out)[i];
            blk.d = hd, blk.dmin = hdmin, scales = blk.scales, qs = blk.qs, qh = blk.qh;
            std::memset(qh, 0, 32);
        } else {
            auto& blk = static_cast<BlockQ4_K*>(out)[i];
            blk.d = hd, blk.dmin = hdmin, scales = blk.scales, qs = blk.qs;
        }
        pack_scales_k(sc, m, scales);
        for (int k = 0; k < 4; ++k)
            for (int l = 0; l < 32; ++l) {
                const uint8_t lo = q[64 * k + l], hi = q[64 * k + 32 + l];
                qs[32 * k + l] = uint8_t((lo & 15) | (hi & 15) << 4);
                if (qh) qh[l] |= uint8_t(((lo >> 4) & 1) << (2 * k) | ((hi >> 4) & 1) << (2 * k + 1));
            }
    }
}

// Q6_K: 256-value super-blocks of sixteen 16-value sub-blocks, 8-bit scales.
void quantize_q6_k(const float* x, int64_t cols, void* out) {
    for (int64_t i = 0; i < cols / kQKBlock; ++i) {
        const float* xs = x + i * kQKBlock;
        auto& blk = static_cast<BlockQ6_K*>(out)[i];
        float a[16];
        float amax = 0.0f, vmax = 0.0f;
        for (int j = 0; j < 16; ++j) {
            a[j] = search_symmetric(xs + 16 * j, 16);
            if (std::fabs(a[j]) > amax) {
                amax = std::fabs(a[j]);
                vmax = a[j];
            }
        }
        const float iscale = vmax != 0.0f ? -128.0f / vmax : 0.0f;
        blk.d = fp32_to_fp16(iscale != 0.0f ? 1.0f / iscale : 0.0f);
        const float d = fp16_to_fp32(blk.d);
        uint8_t q[256];
        for (int j = 0; j < 16; ++j) {
            blk.scales[j] = int8_t(clampi(nearest(iscale * a[j]), -128, 127));
            const float ds = d * float(blk.scales[j]);
            for (int l = 0; l < 16; ++l)
                q[16 * j + l] = uint8_t(ds != 0.0f ? clampi(nearest(xs[16 * j + l] / ds), -32, 31) + 32 : 32);
        }
        std::memset(blk.qh, 0, sizeof blk.qh);
        for (int h = 0; h < 2; ++h)
            for (int l = 0; l < 32; ++l) {
                const uint8_t q0 = q[128 * h + l], q1 = q[128 * h + 32 + l], q2 = q[128 * h + 64 + l],
                              q3 = q[128 * h + 96 + l];
                blk.ql[64 * h + l] = uint8_t((q0 & 15) | (q2 & 15) << 4);
                blk.ql[64 * h + 32 + l] = uint8_t((q1 & 15) | (q3 & 15) << 4);
                blk.qh[32 * h + l] = uint8_t((q0 >> 4) | (q1 >> 4) << 2 | (q2 >> 4) << 4 | (q3 >> 4) << 6);
            }
    }
}

} // namespace

void quantize_row_new(DType t, const float* x, int64_t cols, void* out) {
    switch (t) {
    case DType::Q4_0:
    case DType::Q5_0: quantize_q4_0_q5_0(t == DType::Q5_0, x, cols, out); return;
    case DType::Q4_1:
    case DType::Q5_1: quantize_q4_1_q5_1(t == DType::Q5_1, x, cols, out); return;
    case DType::Q4_K:
    case DType::Q5_K: quantize_q4_k_q5_k(t == DType::Q5_K, x, cols, out); return;
    case DType::Q6_K: quantize_q6_k(x, cols, out); return;
    default: break;
    }
}

} // namespace rwd::detail
