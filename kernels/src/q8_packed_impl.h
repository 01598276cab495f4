// Internal interface between the packed-Q8_0 front end (q8_packed.cpp) and its bodies
// (q8_packed_*.cpp). Not installed. Layout of one group of 16 rows (group_bytes apart):
//   qs:     [nb][8 groups of 4 columns][16 rows][4]  int8   (512 bytes per block)
//   scales: [nb][16 rows]                             fp16   (then padding to 64 bytes)
//   mins:   [nb][16 rows]                             fp16   (Q4_1 / Q5_1 only; padded likewise)
#pragma once
#include <cstddef>
#include <cstdint>

#include "rewind/kernels/q8_packed.h"
#include "token_tiles.h"

namespace rwd::detail {

constexpr int64_t kQ8PackBlockBytes = 512; // 16 rows x 32 int8

// Bytes of one group's scales (and of its mins), padded to whole lines.
inline size_t q8_packed_scale_bytes(int64_t nb) { return ((size_t(nb) * 32 + 63) / 64) * 64; }
inline size_t q8_packed_group_bytes(int64_t nb, bool mins) {
    return size_t(nb) * kQ8PackBlockBytes + q8_packed_scale_bytes(nb) * (mins ? 2 : 1);
}

struct Q8PackedJob {
    const std::byte* w;  // packed weights
    size_t group_bytes;  // bytes per group of 16 rows
    int64_t nb;          // blocks per row (cols / 32)
    int64_t rows;        // real rows (the last group may be partial); row stride of y
    bool mins;           // Q4_1 / Q5_1: after each block's step, s = fma(float(sum x), m_w * d_x, s)
    Q8Input x;
    float* y;            // [n_tokens, rows]
};

// A group's fp16 scales and mins (null without mins).
inline const uint16_t* q8p_scales(const Q8PackedJob& job, const std::byte* grp) {
    return reinterpret_cast<const uint16_t*>(grp + size_t(job.nb) * kQ8PackBlockBytes);
}
inline const uint16_t* q8p_mins(const Q8PackedJob& job, const std::byte* grp) {
    return job.mins ? reinterpret_cast<const uint16_t*>(grp + size_t(job.nb) * kQ8PackBlockBytes + q8_packed_scale_bytes(job.nb))
                    : nullptr;
}

// Each computes y for row groups [g0, g1) and every token.
void q8p_groups_scalar(const Q8PackedJob& job, int64_t g0, int64_t g1);
void q8p_groups_avx2(const Q8PackedJob& job, int64_t g0, int64_t g1);
void q8p_groups_avxvnni(const Q8PackedJob& job, int64_t g0, int64_t g1);
void q8p_groups_avx512(const Q8PackedJob& job, int64_t g0, int64_t g1);
void q8p_groups_avx512vnni(const Q8PackedJob& job, int64_t g0, int64_t g1);

} // namespace rwd::detail
