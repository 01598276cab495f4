// Packed Q8_0 products: the repacking, the activation quantizer, the front end that validates,
// picks a body and splits row groups over the pool, and the scalar body -- which is also the exact
// model of every SIMD body's arithmetic (same int sums, same float order).
#include "rewind/kernels/q8_packed.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "matmul_impl.h"
#include "matmul_quant_unpack.h"
#include "q8_packed_impl.h"
#include "row_groups.h"
#include "rewind/error.h"

namespace rwd {

namespace {

std::byte* align64(std::byte* p) {
    const auto u = reinterpret_cast<uintptr_t>(p);
    return reinterpret_cast<std::byte*>((u + 63) & ~uintptr_t(63));
}

void check_cols(const char* who, int64_t cols) {
    if (cols <= 0 || cols % kQ8Block != 0)
        throw Error(ErrorCode::shape, std::string(who) + ": " + std::to_string(cols) + " columns is not a positive multiple of 32");
}

} // namespace

bool q8_packable(DType t) {
    return t == DType::Q8_0 || t == DType::Q5_0 || t == DType::Q4_0 || t == DType::Q5_1 || t == DType::Q4_1;
}

namespace {

bool has_offset(DType t) { return t == DType::Q4_1 || t == DType::Q5_1; }

} // namespace

size_t q8_packed_bytes(DType t, int64_t rows, int64_t cols) {
    if (!q8_packable(t)) throw Error(ErrorCode::unsupported, std::string("q8_packed_bytes: matrix of type ") + dtype_name(t));
    check_cols("q8_packed_bytes", cols);
    if (rows <= 0) throw Error(ErrorCode::shape, "q8_packed_bytes: non-positive row count " + std::to_string(rows));
    const int64_t groups = (rows + kQ8PackRows - 1) / kQ8PackRows;
    return size_t(groups) * detail::q8_packed_group_bytes(cols / kQ8Block, has_offset(t));
}

namespace {

// Block b of row `src` (type t, one of q8_packable's) widened: the same fp16 scale (and offset m
// for Q4_1 / Q5_1) and the int8 values the file layout's rule multiplies (matmul_quant.h): q - c
// for the no-min formats (Q4_0: c = 8, Q5_0: 16), q itself for Q4_1 / Q5_1, from the unpacking
// the file-layout product uses.
struct Widened {
    uint16_t d = 0, m = 0;
    int8_t qs[32];
};

Widened widen_block(DType t, const std::byte* src, size_t block_bytes, int64_t b) {
    Widened out;
    if (t == DType::Q8_0) {
        BlockQ8_0 q8;
        std::memcpy(&q8, src + size_t(b) * sizeof(BlockQ8_0), sizeof q8);
        out.d = q8.d;
        std::memcpy(out.qs, q8.qs, 32);
        return out;
    }
    const std::byte* blk = src + size_t(b) * block_bytes;
    uint8_t q[32];
    detail::Unit u;
    switch (t) {
    case DType::Q4_0: detail::unpack32<DType::Q4_0>(blk, q, u); break;
    case DType::Q5_0: detail::unpack32<DType::Q5_0>(blk, q, u); break;
    case DType::Q4_1: detail::unpack32<DType::Q4_1>(blk, q, u); break;
    default: detail::unpack32<DType::Q5_1>(blk, q, u); break;
    }
    std::memcpy(&out.d, blk, 2); // the fp16 scale leads every layout
    const bool offset = has_offset(t);
    if (offset) std::memcpy(&out.m, blk + 2, 2); // then Q4_1 / Q5_1's offset
    const int c = offset ? 0 : u.c[0];
    for (int i = 0; i < 32; ++i) out.qs[i] = int8_t(q[i] - c);
    return out;
}

} // namespace

void repack_q8_0(const MatrixView& w, std::span<std::byte> dst, ThreadPool* pool) {
    if (!q8_packable(w.type)) throw Error(ErrorCode::unsupported, std::string("repack_q8_0: matrix of type ") + dtype_name(w.type));
    if (!w.data) throw Error(ErrorCode::argument, "repack_q8_0: null weights");
    const size_t need = q8_packed_bytes(w.type, w.rows, w.cols);
    if (!dst.data() || dst.size() < need)
        throw Error(ErrorCode::shape, "repack_q8_0: destination of " + std::to_string(dst.size()) + " bytes, need " + std::to_string(need));
    if (reinterpret_cast<uintptr_t>(dst.data()) % 64 != 0) throw Error(ErrorCode::argument, "repack_q8_0: destination not 64-byte aligned");
    const int64_t nb = w.cols / kQ8Block;
    const size_t row_bytes = dtype_row_bytes(w.type, w.cols);
    const size_t block_bytes = row_bytes / size_t(nb);
    const bool offset = has_offset(w.type);
    const size_t gbytes = detail::q8_packed_group_bytes(nb, offset);
    const int64_t groups = (w.rows + kQ8PackRows - 1) / kQ8PackRows;
    auto pack = [&](int64_t g0, int64_t g1) {
        for (int64_t g = g0; g < g1; ++g) {
            std::byte* grp = dst.data() + size_t(g) * gbytes;
            std::memset(grp, 0, gbytes); // padding rows and bytes: zero weights, zero scales
            auto* qs = reinterpret_cast<int8_t*>(grp);
            auto* sc = reinterpret_cast<uint16_t*>(grp + size_t(nb) * detail::kQ8PackBlockBytes);
            auto* mn = reinterpret_cast<uint16_t*>(grp + size_t(nb) * detail::kQ8PackBlockBytes + detail::q8_packed_scale_bytes(nb));
            for (int64_t j = 0; j < kQ8PackRows; ++j) {
                const int64_t r = g * kQ8PackRows + j;
                if (r >= w.rows) break;
                const std::byte* src = static_cast<const std::byte*>(w.data) + size_t(r) * row_bytes;
                for (int64_t b = 0; b < nb; ++b) {
                    const Widened blk = widen_block(w.type, src, block_bytes, b);
                    sc[b * kQ8PackRows + j] = blk.d;
                    if (offset) mn[b * kQ8PackRows + j] = blk.m;
                    for (int q = 0; q < 8; ++q)
                        std::memcpy(qs + b * detail::kQ8PackBlockBytes + q * 64 + j * 4, blk.qs + 4 * q, 4);
                }
            }
        }
    };
    parallel_rows(pool, groups, pack);
}

size_t q8_input_bytes(int64_t n_tokens, int64_t cols) {
    check_cols("q8_input_bytes", cols);
    if (n_tokens <= 0) throw Error(ErrorCode::shape, "q8_input_bytes: non-positive token count " + std::to_string(n_tokens));
    const size_t nbt = size_t(n_tokens) * size_t(cols / kQ8Block);
    return size_t(n_tokens) * size_t(cols) + nbt * (sizeof(float) + sizeof(int32_t)) + 3 * 64;
}

Q8Input quantize_input(const float* x, int64_t n_tokens, int64_t cols, std::span<std::byte> scratch, SimdLevel level) {
    if (!x) throw Error(ErrorCode::argument, "quantize_input: null input");
    const size_t need = q8_input_bytes(n_tokens, cols);
    if (!scratch.data() || scratch.size() < need)
        throw Error(ErrorCode::shape, "quantize_input: scratch of " + std::to_string(scratch.size()) + " bytes, need " + std::to_string(need));
    require_simd(level);
    const int64_t nb = cols / kQ8Block;
    std::byte* p = align64(scratch.data());
    auto* qs = reinterpret_cast<int8_t*>(p);
    p = align64(p + size_t(n_tokens) * size_t(cols));
    auto* d = reinterpret_cast<float*>(p);
    p = align64(p + size_t(n_tokens * nb) * sizeof(float));
    auto* sum = reinterpret_cast<int32_t*>(p);
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t b = 0; b < nb; ++b) {
            BlockQ8_0 blk;
            const float* xb = x + t * cols + b * kQ8Block;
            if (level == SimdLevel::Scalar) quantize_row_q8_0(xb, kQ8Block, &blk);
            else detail::quantize_row_q8_0_avx2(xb, kQ8Block, &blk);
            int32_t s = 0;
            for (int j = 0; j < kQ8Block; ++j) s += blk.qs[j];
            std::memcpy(qs + (b * n_tokens + t) * kQ8Block, blk.qs, kQ8Block);
            d[b * n_tokens + t] = fp16_to_fp32(blk.d);
            sum[b * n_tokens + t] = s;
        }
    }
    return Q8Input{qs, d, sum, n_tokens, cols};
}

const char* q8_kernel_name(Q8Kernel k) {
    switch (k) {
    case Q8Kernel::Auto: return "auto";
    case Q8Kernel::Scalar: return "scalar";
    case Q8Kernel::Avx2: return "avx2";
    case Q8Kernel::AvxVnni: return "avx-vnni";
    case Q8Kernel::Avx512: return "avx512";
    case Q8Kernel::Avx512Vnni: return "avx512-vnni";
    }
    return "unknown";
}

namespace {

// Whether this CPU runs `k`; no allocation (matmul_q8_packed asks on every call of the hot path).
bool q8_kernel_supported(Q8Kernel k) {
    const CpuFeatures& f = cpu_features();
    switch (k) {
    case Q8Kernel::Scalar: return true;
    case Q8Kernel::Avx2: return simd_supported(SimdLevel::Avx2);
    case Q8Kernel::AvxVnni: return simd_supported(SimdLevel::AvxVnni);
    case Q8Kernel::Avx512: return simd_supported(SimdLevel::Avx512);
    case Q8Kernel::Avx512Vnni: return simd_supported(SimdLevel::Avx512) && f.avx512vnni;
    default: return false;
    }
}

} // namespace

std::vector<Q8Kernel> supported_q8_kernels() {
    std::vector<Q8Kernel> out;
    for (Q8Kernel k : {Q8Kernel::Scalar, Q8Kernel::Avx2, Q8Kernel::AvxVnni, Q8Kernel::Avx512, Q8Kernel::Avx512Vnni})
        if (q8_kernel_supported(k)) out.push_back(k);
    return out;
}

Q8Kernel q8_kernel_for(SimdLevel level) {
    require_simd(level);
    const CpuFeatures& f = cpu_features();
    switch (level) {
    case SimdLevel::Scalar: return Q8Kernel::Scalar;
    case SimdLevel::Avx2: return Q8Kernel::Avx2; // plain AVX2: maddubs/madd, even where AVX-VNNI exists
    case SimdLevel::AvxVnni: return Q8Kernel::AvxVnni;
    case SimdLevel::Avx512: return f.avx512vnni ? Q8Kernel::Avx512Vnni : Q8Kernel::Avx512;
    }
    return Q8Kernel::Scalar;
}

namespace {

using BodyFn = void (*)(const detail::Q8PackedJob&, int64_t, int64_t);

// Checks one product's operands (what matmul_q8_packed promises to refuse).
void check_product(const MatrixView& w, const Q8Input& x, const float* y) {
    if (!w.packed) throw Error(ErrorCode::argument, "matmul_q8_packed: the matrix has no packed data (repack_q8_0)");
    if (!q8_packable(w.type)) throw Error(ErrorCode::unsupported, std::string("matmul_q8_packed: matrix of type ") + dtype_name(w.type));
    if (reinterpret_cast<uintptr_t>(w.packed) % 64 != 0) throw Error(ErrorCode::argument, "matmul_q8_packed: packed data not 64-byte aligned");
    if (!y || !x.qs || !x.d || !x.sum) throw Error(ErrorCode::argument, "matmul_q8_packed: null pointer");
    if (w.rows <= 0 || x.n_tokens <= 0) throw Error(ErrorCode::shape, "matmul_q8_packed: non-positive size");
    check_cols("matmul_q8_packed", w.cols);
    if (x.cols != w.cols)
        throw Error(ErrorCode::shape, "matmul_q8_packed: activations of " + std::to_string(x.cols) + " columns for a matrix of " +
                    std::to_string(w.cols));
}

// The body for `kernel` (Auto resolved for this CPU); throws if this CPU cannot run it.
BodyFn pick_body(Q8Kernel kernel) {
    if (kernel == Q8Kernel::Auto) kernel = q8_kernel_for(detect_simd());
    if (!q8_kernel_supported(kernel))
        throw Error(ErrorCode::unsupported, std::string("matmul_q8_packed: this CPU cannot run the ") + q8_kernel_name(kernel) + " body");
    switch (kernel) {
    case Q8Kernel::Avx2: return detail::q8p_groups_avx2;
    case Q8Kernel::AvxVnni: return detail::q8p_groups_avxvnni;
    case Q8Kernel::Avx512: return detail::q8p_groups_avx512;
    case Q8Kernel::Avx512Vnni: return detail::q8p_groups_avx512vnni;
    default: return detail::q8p_groups_scalar;
    }
}

detail::Q8PackedJob make_job(const MatrixView& w, const Q8Input& x, float* y) {
    const int64_t nb = w.cols / kQ8Block;
    const bool offset = has_offset(w.type);
    return detail::Q8PackedJob{static_cast<const std::byte*>(w.packed), detail::q8_packed_group_bytes(nb, offset), nb, w.rows, offset, x, y};
}

int64_t groups_of(const MatrixView& w) { return (w.rows + kQ8PackRows - 1) / kQ8PackRows; }

} // namespace

void matmul_q8_packed(const MatrixView& w, const Q8Input& x, float* y, ThreadPool* pool, Q8Kernel kernel) {
    check_product(w, x, y);
    const BodyFn body = pick_body(kernel);
    const detail::Q8PackedJob job = make_job(w, x, y);
    const int64_t macs = w.rows * w.cols * x.n_tokens;
    detail::run_row_groups(pool, groups_of(w), macs, [&](int64_t g0, int64_t g1) { body(job, g0, g1); });
}

void matmul_q8_packed_many(std::span<const Q8PackedOut> outs, const Q8Input& x, ThreadPool* pool, Q8Kernel kernel) {
    if (outs.empty() || outs.size() > kQ8PackedManyMax)
        throw Error(ErrorCode::argument, "matmul_q8_packed_many: " + std::to_string(outs.size()) + " outputs, need 1 to " +
                                             std::to_string(kQ8PackedManyMax));
    for (const Q8PackedOut& o : outs) {
        if (!o.w) throw Error(ErrorCode::argument, "matmul_q8_packed_many: null matrix");
        check_product(*o.w, x, o.y);
    }
    const BodyFn body = pick_body(kernel);
    // The outputs' row groups laid end to end: [first[i], first[i + 1]) are output i's.
    detail::Q8PackedJob jobs[kQ8PackedManyMax] = {};
    int64_t first[kQ8PackedManyMax + 1] = {0};
    int64_t macs = 0;
    const size_t n = outs.size();
    for (size_t i = 0; i < n; ++i) {
        jobs[i] = make_job(*outs[i].w, x, outs[i].y);
        first[i + 1] = first[i] + groups_of(*outs[i].w);
        macs += outs[i].w->rows * outs[i].w->cols * x.n_tokens;
    }
    detail::run_row_groups(pool, first[n], macs, [&](int64_t g0, int64_t g1) {
        for (size_t i = 0; i < n; ++i) {
            const int64_t b = std::max(g0, first[i]), e = std::min(g1, first[i + 1]);
            if (b < e) body(jobs[i], b - first[i], e - first[i]);
        }
    });
}

namespace detail {

// The exact model: per (token, row), blocks ascending, exact int32 dot, s = fma(float(isum), dw*dx, s),
// then with offsets s = fma(float(sum x), mw*dx, s).
void q8p_groups_scalar(const Q8PackedJob& job, int64_t g0, int64_t g1) {
    const int64_t nb = job.nb, n = job.x.n_tokens;
    for (int64_t g = g0; g < g1; ++g) {
        const std::byte* grp = job.w + size_t(g) * job.group_bytes;
        const auto* qs = reinterpret_cast<const int8_t*>(grp);
        const uint16_t* sc = q8p_scales(job, grp);
        const uint16_t* mn = q8p_mins(job, grp);
        for (int64_t j = 0; j < kQ8PackRows; ++j) {
            const int64_t r = g * kQ8PackRows + j;
            if (r >= job.rows) break;
            for (int64_t t = 0; t < job.x.n_tokens; ++t) {
                float s = 0.0f;
                for (int64_t b = 0; b < nb; ++b) {
                    const int8_t* xb = job.x.qs + (b * n + t) * kQ8Block;
                    const int8_t* wb = qs + b * kQ8PackBlockBytes + j * 4;
                    int32_t isum = 0;
                    for (int q = 0; q < 8; ++q)
                        for (int k = 0; k < 4; ++k) isum += int32_t(wb[q * 64 + k]) * int32_t(xb[4 * q + k]);
                    const float dw = fp16_to_fp32(sc[b * kQ8PackRows + j]);
                    const float dx = job.x.d[b * n + t];
                    s = std::fma(float(isum), dw * dx, s);
                    if (mn) s = std::fma(float(job.x.sum[b * n + t]), fp16_to_fp32(mn[b * kQ8PackRows + j]) * dx, s);
                }
                job.y[t * job.rows + r] = s;
            }
        }
    }
}

} // namespace detail

} // namespace rwd
