// Q4_K and Q6_K weights repacked at load for the decode and verification passes: 16 rows
// interleaved in 4-byte column groups per 256-column super-block, nibbles (and Q6_K's high bits)
// side by side across rows, the sub-block scales and fp16 factors as vectors across rows. A body
// then unpacks a super-block for 16 rows with a few vector instructions, once, and applies it to
// every token of the pass (vpdpbusd where the CPU has AVX512-VNNI).
//
// The arithmetic is exactly the one kernels/src/matmul_quant.h states for the file's layout (same
// exact int sums per (token, row, super-block), same float sequence), so a packed matrix gives the
// same bits as the unpacked one, at every SIMD level, whatever the token and thread counts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "rewind/kernels/matmul.h"

namespace rwd {

constexpr int64_t kKqPackRows = 16; // rows interleaved per group

// Whether repack_kq handles weights of this type (Q4_K, Q6_K).
bool kq_repackable(DType t);

// Bytes of the packed form of a [rows, cols] Q4_K or Q6_K matrix. Per group of 16 rows (the last
// padded with zero rows), per super-block: Q4_K 2368 bytes (16 x 144 = 2304 in the file: +2.8 %,
// the 6-bit scales and mins kept as bytes), Q6_K 3392 (16 x 210 = 3360: +1 %, padding to 64 bytes).
// Throws rwd::Error (unsupported) for another type, (shape) for cols not a positive multiple of
// 256 or non-positive rows.
size_t kq_packed_bytes(DType type, int64_t rows, int64_t cols);

// Writes the packed form of w (Q4_K or Q6_K) to dst (at least kq_packed_bytes, 64-byte aligned).
// Reads w.data once. Throws rwd::Error on another type, null weights, a small or misaligned dst.
void repack_kq(const MatrixView& w, std::span<std::byte> dst, ThreadPool* pool = nullptr);

} // namespace rwd
