// Portable body of attention, row by row (token, head): every sum sequential in a fixed order
// (see attention_impl.h), expf from libm.
#include <cmath>

#include "attention_impl.h"

namespace rwd::detail {

void attend_scalar(const AttendGroup& a) {
    for (int64_t g = 0; g < a.rows(); ++g) {
        const float* q = a.q_row(g);
        float* out = a.out_row(g);
        float* scores = a.scores + g * a.score_stride;
        const int64_t n_pos = a.n_pos_row(g);
        float m = -INFINITY;
        for (int64_t p = 0; p < n_pos; ++p) {
            float s = 0.0f;
            for (int64_t i = 0; i < a.head_dim; ++i) s += q[i] * kv_at(a.k, a.kv_type, p * a.kv_stride + i);
            s *= a.scale;
            scores[p] = s;
            m = s > m ? s : m;
        }
        float sum = 0.0f;
        for (int64_t p = 0; p < n_pos; ++p) {
            const float e = std::exp(scores[p] - m);
            scores[p] = e;
            sum += e;
        }
        for (int64_t i = 0; i < a.head_dim; ++i) out[i] = 0.0f;
        for (int64_t p = 0; p < n_pos; ++p)
            for (int64_t i = 0; i < a.head_dim; ++i) out[i] += scores[p] * kv_at(a.v, a.kv_type, p * a.kv_stride + i);
        const float inv = 1.0f / sum;
        for (int64_t i = 0; i < a.head_dim; ++i) out[i] *= inv;
    }
}

} // namespace rwd::detail
