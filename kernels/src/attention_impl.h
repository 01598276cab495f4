// Internal interface between the attention front end and its per-ISA bodies. Not installed.
#pragma once
#include <cstdint>

#include "rewind/kernels/dtype.h"

namespace rewind::detail {

// One (token, head) of causal attention: positions 0 .. n_pos-1 of one KV head.
struct AttendRow {
    const float* q;      // [head_dim]
    const void* k;       // first element of this KV head at position 0; rows kv_stride apart
    const void* v;
    int64_t kv_stride;   // elements between positions (n_head_kv * head_dim)
    DType kv_type;       // F32 or F16
    int64_t head_dim;
    int64_t n_pos;       // pos0 + t + 1
    float scale;         // 1/sqrt(head_dim)
    float* out;          // [head_dim]
    float* scores;       // scratch, >= n_pos floats
};

// Scalar order: s[p] = (sequential dot) * scale; m = max; e[p] = expf(s[p]-m), sum ascending;
// out[d] = (sum_p e[p]*v[p][d], p ascending) * (1/sum).
void attend_scalar(const AttendRow& a);
// AVX2 order: dots as 8-lane FMA + fixed hsum (+ scalar tail); a vector exp; sums and the
// weighted V sum split over a fixed lane / even-odd layout. Depends only on the row's inputs.
void attend_avx2(const AttendRow& a);

} // namespace rewind::detail
