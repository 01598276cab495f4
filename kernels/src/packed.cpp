// packed.h's front end: each call dispatches on the layout to q8_packed.h's or kq_packed.h's
// bodies, unchanged, so the bits are theirs.
#include "rewind/kernels/packed.h"

#include <algorithm>
#include <string>

#include "rewind/error.h"

namespace rwd {

PackedLayout packed_layout(DType t) {
    if (q8_packable(t)) return PackedLayout::Q8;
    if (kq_repackable(t)) return PackedLayout::Kq;
    return PackedLayout::None;
}

bool packable(DType t) { return packed_layout(t) != PackedLayout::None; }

size_t packed_bytes(DType t, int64_t rows, int64_t cols) {
    return q8_packable(t) ? q8_packed_bytes(t, rows, cols) : kq_packed_bytes(t, rows, cols);
}

void repack(const MatrixView& w, std::span<std::byte> dst, ThreadPool* pool) {
    if (q8_packable(w.type)) repack_q8_0(w, dst, pool);
    else repack_kq(w, dst, pool);
}

PackedInput quantize_packed(PackedLayout layout, const float* x, int64_t n_tokens, int64_t cols,
                            std::span<std::byte> scratch, ThreadPool* pool, SimdLevel level) {
    PackedInput in;
    in.layout = layout;
    if (layout == PackedLayout::Q8) in.q8 = quantize_input(x, n_tokens, cols, scratch, level);
    else if (layout == PackedLayout::Kq) in.kq = quantize_kq_input(x, n_tokens, cols, scratch, pool, level);
    else throw Error(ErrorCode::argument, "quantize_packed: no packed layout");
    return in;
}

namespace {
void require_layout(const MatrixView& w, const PackedInput& x) {
    if (!w.packed || packed_layout(w.type) != x.layout || x.layout == PackedLayout::None)
        throw Error(ErrorCode::argument, std::string("matmul_packed: a ") + dtype_name(w.type) +
                                             " matrix that is not packed in the input's layout");
}
} // namespace

void matmul_packed(const MatrixView& w, const PackedInput& x, float* y, ThreadPool* pool, SimdLevel level) {
    require_layout(w, x);
    if (x.layout == PackedLayout::Q8) matmul_q8_packed(w, x.q8, y, pool, q8_kernel_for(level));
    else matmul_kq_packed(w, x.kq, y, pool, level);
}

void matmul_packed_many(std::span<const PackedOut> outs, const PackedInput& x, ThreadPool* pool, SimdLevel level) {
    for (const PackedOut& o : outs) require_layout(*o.w, x);
    if (x.layout != PackedLayout::Q8) {
        for (const PackedOut& o : outs) matmul_kq_packed(*o.w, x.kq, o.y, pool, level);
        return;
    }
    // One pool job per kQ8PackedManyMax outputs: fewer wake-ups and joins per layer.
    Q8PackedOut q8_outs[kQ8PackedManyMax];
    for (size_t i = 0; i < outs.size(); i += kQ8PackedManyMax) {
        const size_t n = std::min(kQ8PackedManyMax, outs.size() - i);
        for (size_t j = 0; j < n; ++j) q8_outs[j] = Q8PackedOut{outs[i + j].w, outs[i + j].y};
        matmul_q8_packed_many(std::span<const Q8PackedOut>(q8_outs, n), x.q8, pool, q8_kernel_for(level));
    }
}

} // namespace rwd
