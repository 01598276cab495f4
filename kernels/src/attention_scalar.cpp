// Portable body of attention and the exact model of the SIMD bodies: row by row (token, head),
// every sum in the one fixed order of attention_impl.h, with std::fma and a step-by-step copy of
// the vector expf (exp_avx2 in simd_math_avx2.h).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "attention_impl.h"
#include "simd_math_model.h"

namespace rwd::detail {

namespace {

// The fixed sum of 16 lanes: j + j+8, j + j+4, j + j+2, then 0 + 1 (overwrites l).
float tree16(float l[16]) {
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) l[j] += l[j + w];
    return l[0];
}

} // namespace

void attend_scalar(const AttendGroup& a) {
    for (int64_t g = 0; g < a.rows(); ++g) {
        const float* q = a.q_row(g);
        float* out = a.out_row(g);
        float* e = a.scores + g * a.score_stride;
        const int64_t n = a.n_pos_row(g);
        float m = -INFINITY;
        for (int64_t p = 0; p < n; ++p) {
            float part[16] = {};
            for (int64_t i = 0; i < a.head_dim; ++i)
                part[i % 16] = std::fma(q[i], kv_at(a.k, a.kv_type, a.row(p) * a.kv_stride + i), part[i % 16]);
            const float s = tree16(part) * a.scale;
            e[p] = s;
            m = s > m ? s : m;
        }
        float lanes[16] = {};
        for (int64_t p = 0; p < n; ++p) {
            e[p] = exp_avx2_model(e[p] - m);
            lanes[p % 16] += e[p];
        }
        const float inv = 1.0f / tree16(lanes);
        for (int64_t d = 0; d < a.head_dim; ++d) {
            float acc = 0.0f;
            for (int64_t p = 0; p < n; ++p) acc = std::fma(e[p], kv_at(a.v, a.kv_type, a.row(p) * a.kv_stride + d), acc);
            out[d] = acc * inv;
        }
    }
}

} // namespace rwd::detail
