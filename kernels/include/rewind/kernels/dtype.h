// Storage types the kernels compute with, half/bfloat conversions, and ggml's quantized block
// layouts (byte for byte as in GGUF files): row dequantization and rewind's own quantizer.
#pragma once
#include <cstddef>
#include <cstdint>

namespace rwd {

enum class DType : uint32_t { F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K };

// Block layouts. All fp16 fields are IEEE half bits; element i of a block is written x[i].
constexpr int64_t kQ8Block = 32; // elements per block of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1
constexpr int64_t kQKBlock = 256; // elements per super-block of Q4_K, Q5_K, Q6_K
struct BlockQ8_0 {
    uint16_t d;     // fp16 scale
    int8_t qs[32];  // x[i] = d * qs[i]
};
static_assert(sizeof(BlockQ8_0) == 34);
struct BlockQ4_0 {
    uint16_t d;      // fp16 scale
    uint8_t qs[16];  // x[i] = d * ((qs[i] & 15) - 8), x[i+16] = d * ((qs[i] >> 4) - 8), i < 16
};
static_assert(sizeof(BlockQ4_0) == 18);
struct BlockQ4_1 {
    uint16_t d, m;   // fp16 scale and offset
    uint8_t qs[16];  // x[i] = d * (qs[i] & 15) + m, x[i+16] = d * (qs[i] >> 4) + m
};
static_assert(sizeof(BlockQ4_1) == 20);
struct BlockQ5_0 {
    uint16_t d;      // fp16 scale
    uint8_t qh[4];   // bit j (little-endian 32-bit word) = bit 4 of element j
    uint8_t qs[16];  // low 4 bits as Q4_0; x[i] = d * (q[i] - 16)
};
static_assert(sizeof(BlockQ5_0) == 22);
struct BlockQ5_1 {
    uint16_t d, m;   // fp16 scale and offset
    uint8_t qh[4];   // as Q5_0
    uint8_t qs[16];  // x[i] = d * q[i] + m
};
static_assert(sizeof(BlockQ5_1) == 24);
// K-quants: a super-block of 256 elements in 8 sub-blocks of 32 (Q4_K, Q5_K: a 6-bit scale sc_j
// and min m_j each, packed in 12 bytes) or 16 of 16 (Q6_K: int8 scales).
// Q4_K: x = d * sc_j * q - dmin * m_j, q in 0..15; element 64k + i (i < 32) is qs[32k + i] & 15
// (sub-block 2k), element 64k + 32 + i is qs[32k + i] >> 4 (sub-block 2k + 1).
struct BlockQ4_K {
    uint16_t d, dmin;     // fp16 super-block scales of the sub-block scales and mins
    uint8_t scales[12];   // j < 4: sc = s[j] & 63, m = s[j+4] & 63; j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4,
                          // m = (s[j+4] >> 4) | (s[j] >> 6) << 4
    uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144);
// Q5_K: as Q4_K with q in 0..31; bit 4 of element 64k + i is bit 2k of qh[i], of 64k + 32 + i bit 2k+1.
struct BlockQ5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176);
// Q6_K: x = d * sc[j] * (q - 32), q in 0..63, sub-blocks of 16. In each half h (128 elements) and
// for i < 32: element 128h + i is ql[64h+i] & 15 | (qh[32h+i] & 3) << 4; + 32: ql[64h+32+i] & 15 |
// ((qh >> 2) & 3) << 4; + 64: ql[64h+i] >> 4 | ((qh >> 4) & 3) << 4; + 96: ql[64h+32+i] >> 4 |
// (qh >> 6) << 4.
struct BlockQ6_K {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

const char* dtype_name(DType t);
// Elements per block: 1 for F32/F16/BF16, 32 for Q8_0/Q4_0/Q4_1/Q5_0/Q5_1, 256 for the K-quants.
// Throws rwd::Error (unsupported) for an unknown type.
int64_t dtype_block_size(DType t);
// Bytes of one row of `cols` elements; throws rwd::Error if cols is negative or not a multiple of
// the block size (shape), or the type is unknown (unsupported).
size_t dtype_row_bytes(DType t, int64_t cols);

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f); // round to nearest even
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f); // round to nearest even; NaN stays NaN (quiet)

// out[0..cols) = the `row` of a row-major matrix of type `t` converted to float. Throws
// rwd::Error on null pointers (argument), a cols that dtype_row_bytes refuses (shape) or an unknown
// type (unsupported).
void dequantize_row(DType t, const void* row_data, int64_t cols, float* out);

// Writes x[0..cols) as one row of type `t` (dtype_row_bytes(t, cols) bytes at `out`), in blocks
// that llama.cpp reads as well as rewind. Deterministic: the same x gives the same bytes on every
// machine. F32 copies; F16/BF16 round to nearest even; Q8_0 is ggml's reference rule (below);
// Q4_0/Q5_0 use ggml's rule (scale = the signed value of largest magnitude / -8 resp. -16);
// Q4_1/Q5_1 map [min, max] onto 0..15 resp. 0..31; the K-quants choose each sub-block's scale (and
// min) by a small fixed search that minimises the squared error, then round the sub-block scales to
// 6 (Q4_K/Q5_K) or 8 (Q6_K) bits and requantize with them. Quality, not equality with
// llama-quantize, is the aim. Range: x must be finite, and for F16 and every block type (whose
// scales and mins are fp16) within fp16's finite range, |x| <= 65504; F32 and BF16 take any finite
// value. A value out of range and null pointers throw rwd::Error (argument) naming the type and
// column, and so does a cols that dtype_row_bytes refuses (shape; unsupported for an unknown type);
// `out` is written only when no error is thrown.
void quantize_row(DType t, const float* x, int64_t cols, void* out);

// Quantizes x[0..cols) to cols/32 Q8_0 blocks the way ggml's reference does: per block
// amax = max|x|, d = amax/127, q = roundf(x * (1/d)) (half away from zero; 0 when amax is 0), the
// scale stored as fp16. Throws rwd::Error (shape) if cols is not a multiple of 32, (argument) on
// null pointers.
void quantize_row_q8_0(const float* x, int64_t cols, BlockQ8_0* out);

// A row-major weight matrix: `rows` outputs, each a row of `cols` inputs stored as `type`.
struct MatrixView {
    DType type = DType::F32;
    const void* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    // Optional: the same weights repacked, Q8_0 by repack_q8_0 (q8_packed.h: matmul then takes the
    // packed bodies' reduction order), Q4_0/Q4_1/Q5_0/Q5_1 widened by repack_q8_0 and
    // Q4_K/Q5_K/Q6_K by repack_kq (the same bits as the file's layout). When set, matmul reads only
    // this.
    const void* packed = nullptr;
};

} // namespace rwd
