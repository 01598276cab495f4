// Internal interface between the packed Q4_K/Q5_K/Q6_K front end (kq_packed.cpp) and its bodies
// (kq_packed_*.cpp). Not installed. One group of 16 rows is nb super-blocks, sb_bytes each, every
// one 64-byte aligned. Within a super-block ("cg" = column group of 4 consecutive columns, a
// 64-byte vector holds one cg for 16 rows: [16 rows][4 bytes]):
//   Q4_K (2368 bytes):
//     0     nibbles [8 sub-blocks j][4 k][16 rows][4]: low nibble = cg k of sub-block j (columns
//           32j + 4k..), high nibble = cg k + 4 (columns 32j + 16 + 4k..)
//     2048  sc  [8 j][16 rows] uint8      2176  m  [8 j][16 rows] uint8
//     2304  d   [16 rows] fp16            2336  dmin [16 rows] fp16
//   Q5_K (2880 bytes): Q4_K's 2368, then
//     2368  high bits [8 j][16 rows][4]: bit k (0..3) of a byte = bit 4 of the quant in the low
//           nibble of cg k, bit 4 + k = bit 4 of the quant in its high nibble (cg k + 4)
//   Q6_K (3392 bytes):
//     0     low nibbles [8 chunks h of 32 columns][4 k][16 rows][4]: low nibble = cg k of chunk h,
//           high nibble = cg k + 4
//     2048  high bits [8 h][2 e][16 rows][4]: bits 2i..2i+1 of a byte = bits 4..5 of the quant in
//           cg 4e + i of chunk h
//     3072  sc  [16 sub-blocks of 16][16 rows] int8
//     3328  d   [16 rows] fp16, then zero padding to 3392
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "rewind/kernels/kq_packed.h"
#include "token_tiles.h"

namespace rwd::detail {

constexpr size_t kKqSbBytesQ4K = 2368;
constexpr size_t kKqSbBytesQ5K = 2880;
constexpr size_t kKqSbBytesQ6K = 3392;

struct KqPackedJob {
    DType type;          // Q4_K, Q5_K or Q6_K
    const std::byte* w;  // packed weights
    size_t group_bytes;  // bytes per group of 16 rows
    size_t sb_bytes;     // bytes per super-block of a group
    int64_t nb;          // super-blocks per row (cols / 256)
    int64_t rows;        // real rows (the last group may be partial); row stride of y
    const std::byte* act; // [n_tokens] x act_bytes: ActBlock<256> per super-block (matmul_quant.h)
    size_t act_bytes;
    int64_t n_tokens;
    float* y;            // [n_tokens, rows]
};

// Each computes y for row groups [g0, g1) and every token.
void kqp_groups_scalar(const KqPackedJob& job, int64_t g0, int64_t g1);
void kqp_groups_avx2(const KqPackedJob& job, int64_t g0, int64_t g1);
void kqp_groups_avxvnni(const KqPackedJob& job, int64_t g0, int64_t g1);
void kqp_groups_avx512vnni(const KqPackedJob& job, int64_t g0, int64_t g1);

// The packed product for the matmul front end: activations already quantized (quantize_act),
// body picked for `level`, row groups split over the pool in several chunks per thread.
void matmul_kq_packed(const KqPackedJob& job, ThreadPool* pool, SimdLevel level);
// The same for several jobs as one pool job over all their row groups.
void matmul_kq_packed_jobs(std::span<const KqPackedJob> jobs, ThreadPool* pool, SimdLevel level);

} // namespace rwd::detail
