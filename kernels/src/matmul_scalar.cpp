// Portable matmul body. Reduction order for one (token, row): a single float sum, k ascending
// (Q8_0: per-block exact int32 dot, then sum += float(isum) * (d_w * d_x), blocks ascending).
#include <algorithm>
#include <cstddef>

#include "matmul_impl.h"

namespace rwd::detail {

namespace {

// F32/F16/BF16: the weight row is converted to float in pieces of kPiece (on the stack, no
// allocation) and each piece is dotted with every token. Sums carry across pieces, so the order is
// still k ascending.
constexpr int64_t kPiece = 256;

void rows_float(const MatmulJob& job, int64_t r0, int64_t r1) {
    float wf[kPiece];
    float acc[16];
    for (int64_t r = r0; r < r1; ++r) {
        const auto* row = static_cast<const std::byte*>(job.w) + size_t(r) * job.row_bytes;
        for (int64_t t0 = 0; t0 < job.n_tokens; t0 += 16) {
            const int64_t nt = std::min<int64_t>(16, job.n_tokens - t0);
            for (int64_t t = 0; t < nt; ++t) acc[t] = 0.0f;
            for (int64_t k0 = 0; k0 < job.cols; k0 += kPiece) {
                const int64_t nk = std::min(kPiece, job.cols - k0);
                const float* w;
                if (job.type == DType::F32) {
                    w = reinterpret_cast<const float*>(row) + k0;
                } else {
                    dequantize_row(job.type, row + size_t(k0) * 2, nk, wf);
                    w = wf;
                }
                for (int64_t t = 0; t < nt; ++t) {
                    const float* x = job.x + (t0 + t) * job.cols + k0;
                    float s = acc[t];
                    for (int64_t k = 0; k < nk; ++k) s += w[k] * x[k];
                    acc[t] = s;
                }
            }
            for (int64_t t = 0; t < nt; ++t) job.y[(t0 + t) * job.rows + r] = acc[t];
        }
    }
}

void rows_q8_0(const MatmulJob& job, int64_t r0, int64_t r1) {
    const int64_t nb = job.cols / kQ8Block;
    for (int64_t r = r0; r < r1; ++r) {
        const auto* wb = reinterpret_cast<const BlockQ8_0*>(static_cast<const std::byte*>(job.w) + size_t(r) * job.row_bytes);
        for (int64_t t = 0; t < job.n_tokens; ++t) {
            const BlockQ8_0* xb = job.xq + t * nb;
            float s = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                int32_t isum = 0;
                for (int j = 0; j < kQ8Block; ++j) isum += int32_t(wb[b].qs[j]) * int32_t(xb[b].qs[j]);
                s += float(isum) * (fp16_to_fp32(wb[b].d) * fp16_to_fp32(xb[b].d));
            }
            job.y[t * job.rows + r] = s;
        }
    }
}

} // namespace

void matmul_rows_scalar(const MatmulJob& job, int64_t r0, int64_t r1) {
    if (job.type == DType::Q8_0) rows_q8_0(job, r0, r1);
    else rows_float(job, r0, r1);
}

} // namespace rwd::detail
