// Matmul for the 4/5/6-bit ggml formats, portable part: per-token activation quantization and
// the scalar body, which is also the exact model of the SIMD bodies (matmul_quant.h gives the
// arithmetic all of them share).
#include "matmul_quant.h"

#include <cmath>

#include "matmul_quant_unpack.h"

namespace rwd::detail {

bool is_quant_type(DType t) {
    switch (t) {
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return true;
    default: return false;
    }
}

int64_t quant_unit(DType t) { return dtype_block_size(t); }

size_t quant_act_bytes(DType t, int64_t cols) {
    return quant_unit(t) == 32 ? size_t(cols / 32) * sizeof(Act32) : size_t(cols / 256) * sizeof(Act256);
}

void quantize_act(DType t, const float* x, int64_t cols, void* act) {
    if (quant_unit(t) == 32) {
        auto* a = static_cast<Act32*>(act);
        for (int64_t b = 0; b < cols / 32; ++b) {
            BlockQ8_0 q;
            quantize_row_q8_0(x + 32 * b, 32, &q);
            a[b].d = fp16_to_fp32(q.d);
            for (int h = 0; h < 2; ++h) {
                int s = 0;
                for (int i = 0; i < 16; ++i) s += q.qs[16 * h + i];
                a[b].bsums[h] = int16_t(s);
            }
            std::memcpy(a[b].qs, q.qs, 32);
        }
        return;
    }
    auto* a = static_cast<Act256*>(act);
    for (int64_t b = 0; b < cols / 256; ++b) {
        const float* xb = x + 256 * b;
        float amax = 0.0f, vmax = 0.0f;
        for (int i = 0; i < 256; ++i)
            if (std::fabs(xb[i]) > amax) {
                amax = std::fabs(xb[i]);
                vmax = xb[i];
            }
        if (amax == 0.0f) {
            std::memset(&a[b], 0, sizeof(Act256));
            continue;
        }
        const float iscale = -127.0f / vmax;
        for (int i = 0; i < 256; ++i) {
            // Clamped as a float: a NaN (from a NaN input) has no int value, so converting it is
            // undefined in C++; it becomes -127, as x86's conversion (INT_MIN) clamps to in the
            // SIMD bodies.
            const float v = std::nearbyint(iscale * xb[i]);
            a[b].qs[i] = int8_t(v > 127.0f ? 127 : (v >= -127.0f ? int(v) : -127));
        }
        for (int k = 0; k < 16; ++k) {
            int s = 0;
            for (int i = 0; i < 16; ++i) s += a[b].qs[16 * k + i];
            a[b].bsums[k] = int16_t(s);
        }
        a[b].d = 1.0f / iscale;
    }
}

namespace {

template <DType T, int U>
void rows_scalar(const QuantJob& job, int64_t r0, int64_t r1) {
    const int64_t nu = job.cols / U;
    const size_t unit_bytes = job.row_bytes / size_t(nu);
    uint8_t q[U];
    Unit u;
    for (int64_t r = r0; r < r1; ++r) {
        const auto* row = static_cast<const std::byte*>(job.w) + size_t(r) * job.row_bytes;
        for (int64_t t = 0; t < job.n_tokens; ++t) {
            const auto* act = reinterpret_cast<const ActBlock<U>*>(static_cast<const std::byte*>(job.act) + size_t(t) * job.act_bytes);
            float s = 0.0f;
            for (int64_t b = 0; b < nu; ++b) {
                if constexpr (U == 32) unpack32<T>(row + size_t(b) * unit_bytes, q, u);
                else unpack256<T>(row + size_t(b) * unit_bytes, q, u);
                const ActBlock<U>& a = act[b];
                int32_t isum = 0, msum = 0;
                for (int k = 0; k < U / 16; ++k) {
                    int32_t p = 0;
                    for (int i = 0; i < 16; ++i) p += int32_t(q[16 * k + i]) * int32_t(a.qs[16 * k + i]);
                    isum += int32_t(u.sc[k]) * p;
                    msum += int32_t(u.c[k]) * int32_t(a.bsums[k]);
                }
                if constexpr (has_min(T)) {
                    s = std::fma(float(isum), u.d1 * a.d, s);
                    s = std::fma(float(-msum), u.d2 * a.d, s);
                } else {
                    s = std::fma(float(isum - msum), u.d1 * a.d, s);
                }
            }
            job.y[t * job.rows + r] = s;
        }
    }
}

} // namespace

void quant_rows_scalar(const QuantJob& job, int64_t r0, int64_t r1) {
    switch (job.type) {
    case DType::Q4_0: rows_scalar<DType::Q4_0, 32>(job, r0, r1); break;
    case DType::Q4_1: rows_scalar<DType::Q4_1, 32>(job, r0, r1); break;
    case DType::Q5_0: rows_scalar<DType::Q5_0, 32>(job, r0, r1); break;
    case DType::Q5_1: rows_scalar<DType::Q5_1, 32>(job, r0, r1); break;
    case DType::Q4_K: rows_scalar<DType::Q4_K, 256>(job, r0, r1); break;
    case DType::Q5_K: rows_scalar<DType::Q5_K, 256>(job, r0, r1); break;
    case DType::Q6_K: rows_scalar<DType::Q6_K, 256>(job, r0, r1); break;
    default: break;
    }
}

} // namespace rwd::detail
