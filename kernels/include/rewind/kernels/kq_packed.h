// Q4_K, Q5_K and Q6_K weights repacked at load for the decode and verification passes: 16 rows
// interleaved in 4-byte column groups per 256-column super-block, nibbles (and Q5_K/Q6_K's high bits)
// side by side across rows, the sub-block scales and fp16 factors as vectors across rows. A body
// then unpacks a super-block for 16 rows with a few vector instructions, once, and applies it to
// every token of the pass (vpdpbusd where the CPU has AVX512-VNNI or AVX-VNNI, maddubs on AVX2).
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

// Whether repack_kq handles weights of this type (Q4_K, Q5_K, Q6_K).
bool kq_repackable(DType t);

// Bytes of the packed form of a [rows, cols] Q4_K, Q5_K or Q6_K matrix. Per group of 16 rows (the
// last padded with zero rows), per super-block: Q4_K 2368 bytes (16 x 144 = 2304 in the file: +2.8 %,
// the 6-bit scales and mins kept as bytes), Q5_K 2880 (16 x 176 = 2816: +2.3 %), Q6_K 3392 (16 x
// 210 = 3360: +1 %, padding to 64 bytes).
// Throws rwd::Error (unsupported) for another type, (shape) for cols not a positive multiple of
// 256 or non-positive rows.
size_t kq_packed_bytes(DType type, int64_t rows, int64_t cols);

// Writes the packed form of w (Q4_K, Q5_K or Q6_K) to dst (at least kq_packed_bytes, 64-byte aligned).
// Reads w.data once. Throws rwd::Error on another type, null weights, a small or misaligned dst.
void repack_kq(const MatrixView& w, std::span<std::byte> dst, ThreadPool* pool = nullptr);

// Activations quantized for the packed products: per token, cols/256 Q8_K blocks (matmul_quant.h's
// Act256), exactly as matmul makes them for a Q4_K/Q5_K/Q6_K matrix. Several matrices that read the
// same input (Q, K, V; gate, up), whatever their K-quant types, can share one quantization and get
// the same bits as each matmul alone.
struct KqInput {
    const std::byte* act = nullptr; // [n_tokens] x act_bytes
    size_t act_bytes = 0;           // bytes of one token's blocks
    int64_t n_tokens = 0;
    int64_t cols = 0;
};

// Scratch bytes quantize_kq_input needs: matmul_scratch_bytes(DType::Q4_K, n_tokens, cols).
// Throws rwd::Error (shape) for a negative count or cols not a positive multiple of 256.
size_t kq_input_bytes(int64_t n_tokens, int64_t cols);

// Quantizes x: [n_tokens, cols] into scratch (4-byte aligned), tokens split over the pool (each
// token's blocks are computed alone, so the split never changes them). The result lives as long as
// scratch is not reused. Throws rwd::Error on null x (argument), non-positive sizes, cols not a
// multiple of 256, scratch too small or misaligned (shape), a level this CPU lacks (unsupported).
KqInput quantize_kq_input(const float* x, int64_t n_tokens, int64_t cols, std::span<std::byte> scratch,
                          ThreadPool* pool = nullptr, SimdLevel level = detect_simd());

// y[t*w.rows + r] = sum_k W[r,k] * x[t,k] for a Q4_K/Q5_K/Q6_K matrix with w.packed set (repack_kq) and
// activations from quantize_kq_input: the bits matmul gives. Throws rwd::Error on a null y or
// input, a matrix without packed data or of another type, mismatched cols, or a level this CPU
// lacks.
void matmul_kq_packed(const MatrixView& w, const KqInput& x, float* y, ThreadPool* pool,
                      SimdLevel level = detect_simd());

// One product of matmul_kq_packed_list: a packed Q4_K/Q5_K/Q6_K matrix, its input, its output
// ([x->n_tokens, w->rows]).
struct KqProduct {
    const MatrixView* w = nullptr;
    const KqInput* x = nullptr;
    float* y = nullptr;
};
inline constexpr size_t kKqProductsMax = 64; // a layer's experts: gate and up of 32, or 64 downs

// matmul_kq_packed for each of `products` (each its own matrix, input and output: the experts of
// a layer), all their row groups split over the pool as one job, so a layer of small products
// costs one wake-up and one join instead of one per product, and the threads' shares even out
// over all of them. Each product gets the bits it gets alone. Throws as matmul_kq_packed for any
// product (nothing is computed then), and rwd::Error (argument) for more than kKqProductsMax.
void matmul_kq_packed_list(std::span<const KqProduct> products, ThreadPool* pool, SimdLevel level = detect_simd());

} // namespace rwd
