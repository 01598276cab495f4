// Q8_0 weights (and Q4_0, Q4_1, Q5_0, Q5_1 ones, widened to int8) repacked at load for multi-token products
// (the verification pass) and decoding alike: 16 rows
// interleaved in 4-byte groups, their scales side by side, so one read of a weight block serves
// every token of a pass while it sits in registers, with int8 dot products (vpdpbusd where the CPU
// has VNNI). Activations are quantized once per input vector (Q8Input) and may be shared by every
// matrix that reads the same vector (Q, K, V; gate, up).
//
// Reduction order for one (token t, row r), the same in every body (scalar, AVX2, AVX-VNNI,
// AVX-512, AVX-512 VNNI), so they all give the same bits: s = 0; for each 32-column block b
// ascending: isum = exact int32 dot of the block's int8 weights and activations; s = fma(float(isum),
// d_w * d_x, s) (d_w * d_x is exact in float: two fp16-precision values); for the formats with an
// offset (Q4_1, Q5_1) then s = fma(float(sum of the block's x), m_w * d_x, s). Tiles, token counts
// and thread splits never change it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "rewind/kernels/matmul.h"

namespace rwd {

constexpr int64_t kQ8PackRows = 16; // rows interleaved per group

// Whether repack_q8_0 takes matrices of type t: Q8_0, and the 32-blocks widened exactly to int8
// with the same fp16 scale: Q4_0 / Q5_0 as q - 8 / q - 16, Q4_1 / Q5_1 as q with their fp16 offset
// m kept beside the scale. A widened matrix's products give the bits of its file layout
// (matmul_quant.h's rules: the no-min one, s = fma(float(isum - msum), d * dx, s), is this form's
// order with isum - msum as one exact int dot; the Q4_1 / Q5_1 one is this form's two steps), for
// 34 bytes per block (36 with m) instead of 18 / 22 (20 / 24).
bool q8_packable(DType t);

// Bytes of the packed form of a [rows, cols] matrix of q8_packable type t. Per group of 16 rows
// (the last one padded with zero rows): cols/32 blocks of 16 rows x 8 groups of 4 int8 (512
// bytes), then the blocks' 16 fp16 scales each, padded to 64 bytes, and for Q4_1 / Q5_1 their 16
// fp16 offsets each, padded likewise. Q8_0: the original's size (34 bytes per 32 values) up to
// that padding. Throws rwd::Error if cols is not a positive multiple of 32, rows is not positive,
// or t is not q8_packable.
size_t q8_packed_bytes(DType t, int64_t rows, int64_t cols);

// Writes the packed form of `w` (q8_packable type, rows x cols) to dst (at least q8_packed_bytes,
// 64-byte aligned). Reads w.data once. Throws rwd::Error on another type, a small or misaligned dst.
void repack_q8_0(const MatrixView& w, std::span<std::byte> dst, ThreadPool* pool = nullptr);

// Activations quantized to Q8_0 blocks by ggml's rule (quantize_row_q8_0), stored for the packed
// bodies block-major (the tokens of one block side by side, so a body walks all tokens of a block
// with fixed offsets): int8 values, each block's scale as float (the fp16-rounded value) and its
// int sum.
struct Q8Input {
    const int8_t* qs = nullptr;   // [cols/32, n_tokens, 32]
    const float* d = nullptr;     // [cols/32, n_tokens]
    const int32_t* sum = nullptr; // [cols/32, n_tokens] sum of the block's qs
    int64_t n_tokens = 0;
    int64_t cols = 0;
};

// Scratch bytes quantize_input needs (alignment slack included).
size_t q8_input_bytes(int64_t n_tokens, int64_t cols);

// Quantizes x: [n_tokens, cols] into scratch. The result lives as long as scratch is not reused.
// Throws rwd::Error on null x, non-positive sizes, cols not a multiple of 32, scratch too small.
Q8Input quantize_input(const float* x, int64_t n_tokens, int64_t cols, std::span<std::byte> scratch,
                       SimdLevel level = detect_simd());

// The bodies of the packed product; all give the same bits. Auto picks the fastest for a level.
enum class Q8Kernel { Auto, Scalar, Avx2, AvxVnni, Avx512, Avx512Vnni };
const char* q8_kernel_name(Q8Kernel k);
// Every body this CPU can run (Scalar first): what the tests compare.
std::vector<Q8Kernel> supported_q8_kernels();
// The body Auto means at `level` on this CPU: Scalar, Avx2 (maddubs, even where the CPU has
// AVX-VNNI: the level is a cap), AvxVnni, Avx512 (Avx512Vnni where the CPU has it).
Q8Kernel q8_kernel_for(SimdLevel level);

// y[t*w.rows + r] = sum_k W[r,k] * x[t,k] for a matrix with w.packed set by repack_q8_0 and
// activations from quantize_input. Throws rwd::Error on null pointers, a matrix without packed
// data, mismatched cols, or a kernel this CPU cannot run.
void matmul_q8_packed(const MatrixView& w, const Q8Input& x, float* y, ThreadPool* pool,
                      Q8Kernel kernel = Q8Kernel::Auto);

// One output of matmul_q8_packed_many: y = w x, as matmul_q8_packed writes it.
struct Q8PackedOut {
    const MatrixView* w = nullptr;
    float* y = nullptr;
};
constexpr size_t kQ8PackedManyMax = 4; // Q, K, V; gate, up

// The products of up to kQ8PackedManyMax matrices with the same activations (Q, K and V; gate and
// up) as one job over the pool instead of one per matrix: fewer wake-ups and joins per layer, and
// the threads' work balanced over all the matrices together. Every y gets the bits
// matmul_q8_packed gives it (a row group's sums do not depend on who computes it). Checks every
// output as matmul_q8_packed does, before computing any; also throws rwd::Error (argument) for no
// outputs, more than kQ8PackedManyMax, or a null matrix.
void matmul_q8_packed_many(std::span<const Q8PackedOut> outs, const Q8Input& x, ThreadPool* pool,
                           Q8Kernel kernel = Q8Kernel::Auto);

} // namespace rwd
