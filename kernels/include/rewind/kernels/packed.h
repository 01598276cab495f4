// One front end to the weight layouts repacked at load: Q8_0 and the 32-blocks widened to it
// (q8_packed.h) and the K-quants' interleaved rows (kq_packed.h). Callers ask one question
// (packable), quantize an input once per layout and multiply; the layout picks the bodies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "rewind/kernels/kq_packed.h"
#include "rewind/kernels/matmul.h"
#include "rewind/kernels/q8_packed.h"

namespace rwd {

// Which packed layout a weight type repacks into: None, Q8 (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: int8
// 32-blocks) or Kq (Q4_K, Q5_K, Q6_K: 256-superblocks, read with Q8_K activations).
enum class PackedLayout { None, Q8, Kq };
PackedLayout packed_layout(DType t);
// Whether repack takes matrices of type t (packed_layout(t) != None).
bool packable(DType t);
// Bytes of the packed form of a [rows, cols] matrix of packable type t (q8_packed_bytes or
// kq_packed_bytes). Throws rwd::Error as they do.
size_t packed_bytes(DType t, int64_t rows, int64_t cols);
// Writes w's packed form into dst (packed_bytes(w.type, w.rows, w.cols) bytes, 64-byte aligned).
void repack(const MatrixView& w, std::span<std::byte> dst, ThreadPool* pool = nullptr);

// An input quantized for one layout and width: every packed matrix of that layout and width may
// read it (Q, K, V; gate, up share one).
struct PackedInput {
    PackedLayout layout = PackedLayout::None;
    Q8Input q8; // layout Q8
    KqInput kq; // layout Kq
};
// Quantizes x [n_tokens, cols] for `layout` into scratch (at least matmul_scratch_bytes of a
// matrix of that layout and width). Q8 quantizes on the calling thread; Kq splits the tokens'
// Q8_K blocks over the pool. The same bits at every SIMD level.
PackedInput quantize_packed(PackedLayout layout, const float* x, int64_t n_tokens, int64_t cols,
                            std::span<std::byte> scratch, ThreadPool* pool, SimdLevel level);

// y = x · wᵀ for a packed matrix w of x's layout and width: the bits of matmul(w, ...) at `level`.
void matmul_packed(const MatrixView& w, const PackedInput& x, float* y, ThreadPool* pool, SimdLevel level);

struct PackedOut {
    const MatrixView* w = nullptr;
    float* y = nullptr;
};
// matmul_packed for each of outs (all of x's layout and width), each the bits it gives alone;
// Q8 runs up to kQ8PackedManyMax of them as one pool job.
void matmul_packed_many(std::span<const PackedOut> outs, const PackedInput& x, ThreadPool* pool, SimdLevel level);

} // namespace rwd
