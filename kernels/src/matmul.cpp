// matmul front end: validates shapes, quantizes activations for Q8_0, splits output rows over
// the pool and hands each range to the body for the requested SIMD level.
#include "rewind/kernels/matmul.h"

#include <algorithm>
#include <string>

#include "kq_packed_impl.h"
#include "matmul_impl.h"
#include "matmul_quant.h"
#include "rewind/kernels/q8_packed.h"
#include "rewind/error.h"

namespace rwd {

namespace {

// Below this many multiply-adds a call runs on the calling thread: waking workers would cost
// more than it saves. Only who computes a row changes, never its value.
constexpr int64_t kMinMacsPerThread = 48 * 1024;
// Thread ranges are multiples of this many rows: coarse enough that few rows fall outside the
// bodies' row tiles, fine enough to balance small matrices (64 rows over 2 threads: 32 + 32).
constexpr int64_t kRowGrain = 8;

// Runs body(r0, r1) over the output rows [0, rows): on the calling thread for a small product
// (macs multiply-adds), else split into one range per thread, each a multiple of kRowGrain rows
// (but the last). Only who computes a row changes, never its value.
template <class Body>
void for_row_ranges(ThreadPool* pool, int64_t rows, int64_t macs, const Body& body) {
    const int64_t threads = pool ? std::min<int64_t>(pool->size(), std::max<int64_t>(1, macs / kMinMacsPerThread)) : 1;
    if (threads <= 1) {
        body(int64_t{0}, rows);
        return;
    }
    const int64_t per = (rows + threads - 1) / threads;
    const int64_t grain = ((per + kRowGrain - 1) / kRowGrain) * kRowGrain;
    pool->run(rows, [&](int64_t r0, int64_t r1) { body(r0, r1); }, grain);
}

} // namespace

size_t matmul_scratch_bytes(DType type, int64_t n_tokens, int64_t cols) {
    if (type != DType::Q8_0 && !detail::is_quant_type(type)) return 0;
    if (n_tokens < 0) throw Error(ErrorCode::shape, "matmul_scratch_bytes: negative token count");
    dtype_row_bytes(type, cols); // throws for a bad width
    const size_t file_layout = size_t(n_tokens) * (type == DType::Q8_0 ? dtype_row_bytes(DType::Q8_0, cols)
                                                                         : detail::quant_act_bytes(type, cols));
    // q8_packable types: enough for either path, the file layout's or a Q8Input (packed).
    if (q8_packable(type)) return n_tokens == 0 ? 0 : std::max(file_layout, q8_input_bytes(n_tokens, cols));
    return file_layout;
}

namespace {

// Q4_0 .. Q6_K: activations quantized per token into scratch, then a body per SIMD level (all
// levels give the same bits; see matmul_quant.h).
void matmul_quant(const MatrixView& w, const float* x, int64_t n_tokens, float* y, std::span<std::byte> scratch,
                  ThreadPool* pool, SimdLevel level) {
    detail::QuantJob job{};
    job.type = w.type;
    job.w = w.data;
    job.cols = w.cols;
    job.row_bytes = dtype_row_bytes(w.type, w.cols); // throws for widths that are not whole blocks
    job.act_bytes = detail::quant_act_bytes(w.type, w.cols);
    job.n_tokens = n_tokens;
    job.y = y;
    job.rows = w.rows;
    const size_t need = size_t(n_tokens) * job.act_bytes;
    if (!scratch.data() || scratch.size() < need)
        throw Error(ErrorCode::shape, std::string("matmul: ") + dtype_name(w.type) + " scratch of " + std::to_string(scratch.size()) +
                    " bytes, need " + std::to_string(need));
    if (reinterpret_cast<uintptr_t>(scratch.data()) % alignof(float) != 0)
        throw Error(ErrorCode::shape, std::string("matmul: ") + dtype_name(w.type) + " scratch must be 4-byte aligned");
    for (int64_t t = 0; t < n_tokens; ++t)
        detail::quantize_act_at(w.type, x + t * w.cols, w.cols, scratch.data() + size_t(t) * job.act_bytes, level);
    job.act = scratch.data();

    if (w.packed) { // Q4_K/Q5_K/Q6_K repacked at load (repack_kq): the same arithmetic, so the same bits
        if (!kq_repackable(w.type))
            throw Error(ErrorCode::unsupported, std::string("matmul: no packed layout for ") + dtype_name(w.type));
        if (reinterpret_cast<uintptr_t>(w.packed) % 64 != 0) throw Error(ErrorCode::argument, "matmul: packed data not 64-byte aligned");
        const int64_t nb = w.cols / 256;
        const size_t sbb = kq_packed_bytes(w.type, 1, w.cols) / size_t(nb);
        const detail::KqPackedJob kj{w.type, static_cast<const std::byte*>(w.packed), sbb * size_t(nb), sbb, nb, w.rows,
                                     static_cast<const std::byte*>(job.act), job.act_bytes, n_tokens, y};
        detail::matmul_kq_packed(kj, pool, level);
        return;
    }

    auto body = detail::quant_rows_scalar;
    if (simd_has_avx512(level) && cpu_features().avx512vnni) body = detail::quant_rows_avx512vnni;
    else if (level != SimdLevel::Scalar) body = detail::quant_rows_avx2;

    for_row_ranges(pool, w.rows, w.rows * w.cols * n_tokens, [&](int64_t r0, int64_t r1) { body(job, r0, r1); });
}

} // namespace

void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y, std::span<std::byte> scratch,
            ThreadPool* pool, SimdLevel level) {
    if (!w.data || !x || !y) throw Error("matmul: null pointer");
    if (w.rows <= 0 || w.cols <= 0 || n_tokens <= 0)
        throw Error(ErrorCode::shape, "matmul: non-positive size (rows " + std::to_string(w.rows) + ", cols " +
                    std::to_string(w.cols) + ", n_tokens " + std::to_string(n_tokens) + ")");
    require_simd(level);
    if (w.packed && q8_packable(w.type)) { // Q8_0, or a 32-block format widened by repack_q8_0
        const Q8Input xq = quantize_input(x, n_tokens, w.cols, scratch, level);
        matmul_q8_packed(w, xq, y, pool, q8_kernel_for(level));
        return;
    }
    if (detail::is_quant_type(w.type)) {
        matmul_quant(w, x, n_tokens, y, scratch, pool, level);
        return;
    }
    if (w.type != DType::F32 && w.type != DType::F16 && w.type != DType::BF16 && w.type != DType::Q8_0)
        throw Error(ErrorCode::unsupported, std::string("matmul: no kernel for ") + dtype_name(w.type) + " weights");
    detail::MatmulJob job{};
    job.type = w.type;
    job.w = w.data;
    job.cols = w.cols;
    job.row_bytes = dtype_row_bytes(w.type, w.cols); // throws for bad Q8_0 widths / types
    job.x = x;
    job.n_tokens = n_tokens;
    job.y = y;
    job.rows = w.rows;

    if (w.type == DType::Q8_0) {
        const size_t need = size_t(n_tokens) * dtype_row_bytes(DType::Q8_0, w.cols);
        if (!scratch.data() || scratch.size() < need)
            throw Error(ErrorCode::shape, "matmul: Q8_0 scratch of " + std::to_string(scratch.size()) + " bytes, need " +
                        std::to_string(need));
        auto* xq = reinterpret_cast<BlockQ8_0*>(scratch.data()); // BlockQ8_0 has alignment 2
        if (reinterpret_cast<uintptr_t>(xq) % alignof(BlockQ8_0) != 0)
            throw Error(ErrorCode::shape, "matmul: Q8_0 scratch must be 2-byte aligned");
        const int64_t nb = w.cols / kQ8Block;
        for (int64_t t = 0; t < n_tokens; ++t) {
            if (level == SimdLevel::Scalar) quantize_row_q8_0(x + t * w.cols, w.cols, xq + t * nb);
            else detail::quantize_row_q8_0_avx2(x + t * w.cols, w.cols, xq + t * nb);
        }
        job.xq = xq;
    }

    auto body = detail::matmul_rows_scalar;
    if (simd_has_avx512(level)) body = detail::matmul_rows_avx512;
    else if (simd_has_avx2(level)) body = detail::matmul_rows_avx2;

    for_row_ranges(pool, w.rows, w.rows * w.cols * n_tokens, [&](int64_t r0, int64_t r1) { body(job, r0, r1); });
}

} // namespace rwd
