// Portable body of one (token, head) of attention: every sum sequential in a fixed order
// (see attention_impl.h), expf from libm.
#include <cmath>

#include "attention_impl.h"

namespace rewind::detail {

namespace {

inline float kv_at(const void* base, DType type, int64_t idx) {
    if (type == DType::F32) return static_cast<const float*>(base)[idx];
    return fp16_to_fp32(static_cast<const uint16_t*>(base)[idx]);
}

} // namespace

void attend_scalar(const AttendRow& a) {
    float m = -INFINITY;
    for (int64_t p = 0; p < a.n_pos; ++p) {
        float s = 0.0f;
        for (int64_t i = 0; i < a.head_dim; ++i) s += a.q[i] * kv_at(a.k, a.kv_type, p * a.kv_stride + i);
        s *= a.scale;
        a.scores[p] = s;
        m = s > m ? s : m;
    }
    float sum = 0.0f;
    for (int64_t p = 0; p < a.n_pos; ++p) {
        const float e = std::exp(a.scores[p] - m);
        a.scores[p] = e;
        sum += e;
    }
    for (int64_t i = 0; i < a.head_dim; ++i) a.out[i] = 0.0f;
    for (int64_t p = 0; p < a.n_pos; ++p)
        for (int64_t i = 0; i < a.head_dim; ++i) a.out[i] += a.scores[p] * kv_at(a.v, a.kv_type, p * a.kv_stride + i);
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < a.head_dim; ++i) a.out[i] *= inv;
}

} // namespace rewind::detail
