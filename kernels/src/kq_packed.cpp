// Packed Q4_K/Q5_K/Q6_K products: the repacking, the front end that picks a body and splits row
// groups over the pool, and the scalar body -- the exact model of the SIMD bodies, which computes
// what matmul_quant.h states for the file's layout (so packed and unpacked give the same bits).
#include "rewind/kernels/kq_packed.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kq_packed_impl.h"
#include "row_groups.h"
#include "matmul_quant.h"
#include "matmul_quant_unpack.h"
#include "rewind/error.h"

namespace rwd {

namespace {

size_t sb_bytes(DType t) {
    return t == DType::Q4_K ? detail::kKqSbBytesQ4K : t == DType::Q5_K ? detail::kKqSbBytesQ5K : detail::kKqSbBytesQ6K;
}

void check(const char* who, DType type, int64_t rows, int64_t cols) {
    if (!kq_repackable(type))
        throw Error(ErrorCode::unsupported, std::string(who) + ": no packed layout for " + dtype_name(type) + " (Q4_K, Q5_K, Q6_K only)");
    if (cols <= 0 || cols % 256 != 0)
        throw Error(ErrorCode::shape, std::string(who) + ": " + std::to_string(cols) + " columns is not a positive multiple of 256");
    if (rows <= 0) throw Error(ErrorCode::shape, std::string(who) + ": non-positive row count " + std::to_string(rows));
}

// Unit of row `j` of a packed group, super-block `sb`: quants q[0..256) and factors, as the
// file's layout gives them (unpack256).
void unpack_packed(DType type, const uint8_t* sb, int64_t j, uint8_t* q, detail::Unit& u) {
    if (type == DType::Q4_K || type == DType::Q5_K) {
        for (int s = 0; s < 8; ++s) {
            for (int k = 0; k < 4; ++k)
                for (int i = 0; i < 4; ++i) {
                    const uint8_t v = sb[(s * 4 + k) * 64 + j * 4 + i];
                    const uint8_t h = type == DType::Q5_K ? sb[2368 + s * 64 + j * 4 + i] : 0;
                    q[32 * s + 4 * k + i] = uint8_t((v & 15) | ((h >> k) & 1) << 4);
                    q[32 * s + 16 + 4 * k + i] = uint8_t((v >> 4) | ((h >> (4 + k)) & 1) << 4);
                }
            u.sc[2 * s] = u.sc[2 * s + 1] = sb[2048 + 16 * s + j];
            u.c[2 * s] = u.c[2 * s + 1] = sb[2176 + 16 * s + j];
        }
        uint16_t hd, hm;
        std::memcpy(&hd, sb + 2304 + 2 * j, 2);
        std::memcpy(&hm, sb + 2336 + 2 * j, 2);
        u.d1 = fp16_to_fp32(hd);
        u.d2 = fp16_to_fp32(hm);
        return;
    }
    for (int h = 0; h < 8; ++h)
        for (int c = 0; c < 8; ++c)
            for (int i = 0; i < 4; ++i) {
                const uint8_t lo = sb[(h * 4 + c % 4) * 64 + j * 4 + i];
                const uint8_t hb = sb[2048 + (h * 2 + c / 4) * 64 + j * 4 + i];
                q[32 * h + 4 * c + i] = uint8_t((c < 4 ? lo & 15 : lo >> 4) | ((hb >> (2 * (c % 4))) & 3) << 4);
            }
    for (int k = 0; k < 16; ++k) {
        u.sc[k] = int8_t(sb[3072 + 16 * k + j]);
        u.c[k] = int16_t(32 * u.sc[k]);
    }
    uint16_t hd;
    std::memcpy(&hd, sb + 3328 + 2 * j, 2);
    u.d1 = fp16_to_fp32(hd);
    u.d2 = 0.0f;
}

// Writes row j's unit (q, u; raw fp16 factors d, dmin) into packed super-block sb.
void pack_unit(DType type, uint8_t* sb, int64_t j, const uint8_t* q, const detail::Unit& u, uint16_t d, uint16_t dmin) {
    if (type == DType::Q4_K || type == DType::Q5_K) {
        for (int s = 0; s < 8; ++s) {
            for (int k = 0; k < 4; ++k)
                for (int i = 0; i < 4; ++i) {
                    const uint8_t lo = q[32 * s + 4 * k + i], hi = q[32 * s + 16 + 4 * k + i];
                    sb[(s * 4 + k) * 64 + j * 4 + i] = uint8_t((lo & 15) | (hi & 15) << 4);
                    if (type == DType::Q5_K) sb[2368 + s * 64 + j * 4 + i] |= uint8_t((lo >> 4) << k | (hi >> 4) << (4 + k));
                }
            sb[2048 + 16 * s + j] = uint8_t(u.sc[2 * s]);
            sb[2176 + 16 * s + j] = uint8_t(u.c[2 * s]);
        }
        std::memcpy(sb + 2304 + 2 * j, &d, 2);
        std::memcpy(sb + 2336 + 2 * j, &dmin, 2);
        return;
    }
    for (int h = 0; h < 8; ++h)
        for (int c = 0; c < 8; ++c)
            for (int i = 0; i < 4; ++i) {
                const uint8_t v = q[32 * h + 4 * c + i];
                sb[(h * 4 + c % 4) * 64 + j * 4 + i] |= uint8_t(c < 4 ? v & 15 : (v & 15) << 4);
                sb[2048 + (h * 2 + c / 4) * 64 + j * 4 + i] |= uint8_t((v >> 4) << (2 * (c % 4)));
            }
    for (int k = 0; k < 16; ++k) sb[3072 + 16 * k + j] = uint8_t(int8_t(u.sc[k]));
    std::memcpy(sb + 3328 + 2 * j, &d, 2);
}

} // namespace

bool kq_repackable(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

size_t kq_packed_bytes(DType type, int64_t rows, int64_t cols) {
    check("kq_packed_bytes", type, rows, cols);
    const int64_t groups = (rows + kKqPackRows - 1) / kKqPackRows;
    return size_t(groups) * size_t(cols / 256) * sb_bytes(type);
}

void repack_kq(const MatrixView& w, std::span<std::byte> dst, ThreadPool* pool) {
    check("repack_kq", w.type, w.rows, w.cols);
    if (!w.data) throw Error(ErrorCode::argument, "repack_kq: null weights");
    const size_t need = kq_packed_bytes(w.type, w.rows, w.cols);
    if (!dst.data() || dst.size() < need)
        throw Error(ErrorCode::shape, "repack_kq: destination of " + std::to_string(dst.size()) + " bytes, need " + std::to_string(need));
    if (reinterpret_cast<uintptr_t>(dst.data()) % 64 != 0) throw Error(ErrorCode::argument, "repack_kq: destination not 64-byte aligned");
    const int64_t nb = w.cols / 256;
    const size_t row_bytes = dtype_row_bytes(w.type, w.cols), unit_bytes = row_bytes / size_t(nb);
    const size_t sbb = sb_bytes(w.type), gbytes = sbb * size_t(nb);
    const int64_t groups = (w.rows + kKqPackRows - 1) / kKqPackRows;
    auto pack = [&](int64_t g0, int64_t g1) {
        uint8_t q[256];
        detail::Unit u;
        for (int64_t g = g0; g < g1; ++g) {
            auto* grp = reinterpret_cast<uint8_t*>(dst.data() + size_t(g) * gbytes);
            std::memset(grp, 0, gbytes); // padding rows and bytes: zero quants, zero scales
            for (int64_t j = 0; j < kKqPackRows; ++j) {
                const int64_t r = g * kKqPackRows + j;
                if (r >= w.rows) break;
                const auto* row = static_cast<const std::byte*>(w.data) + size_t(r) * row_bytes;
                for (int64_t b = 0; b < nb; ++b) {
                    const std::byte* blk = row + size_t(b) * unit_bytes;
                    uint16_t d, dmin = 0;
                    if (w.type == DType::Q4_K || w.type == DType::Q5_K) {
                        if (w.type == DType::Q4_K) detail::unpack256<DType::Q4_K>(blk, q, u);
                        else detail::unpack256<DType::Q5_K>(blk, q, u);
                        std::memcpy(&d, blk, 2);
                        std::memcpy(&dmin, blk + 2, 2);
                    } else {
                        detail::unpack256<DType::Q6_K>(blk, q, u);
                        std::memcpy(&d, blk + 208, 2);
                    }
                    pack_unit(w.type, grp + size_t(b) * sbb, j, q, u, d, dmin);
                }
            }
        }
    };
    parallel_rows(pool, groups, pack);
}

size_t kq_input_bytes(int64_t n_tokens, int64_t cols) {
    if (n_tokens < 0) throw Error(ErrorCode::shape, "kq_input_bytes: negative token count");
    if (cols <= 0 || cols % 256 != 0)
        throw Error(ErrorCode::shape, "kq_input_bytes: " + std::to_string(cols) + " columns is not a positive multiple of 256");
    return size_t(n_tokens) * detail::quant_act_bytes(DType::Q4_K, cols);
}

namespace {
// Below this many input values quantize_kq_input stays on the calling thread: waking the pool
// would cost about what the work does.
constexpr int64_t kMinParallelQuantValues = 16 * 1024;
} // namespace

KqInput quantize_kq_input(const float* x, int64_t n_tokens, int64_t cols, std::span<std::byte> scratch, ThreadPool* pool,
                          SimdLevel level) {
    if (!x) throw Error(ErrorCode::argument, "quantize_kq_input: null input");
    if (n_tokens <= 0) throw Error(ErrorCode::shape, "quantize_kq_input: non-positive token count " + std::to_string(n_tokens));
    const size_t need = kq_input_bytes(n_tokens, cols);
    if (!scratch.data() || scratch.size() < need)
        throw Error(ErrorCode::shape, "quantize_kq_input: scratch of " + std::to_string(scratch.size()) + " bytes, need " + std::to_string(need));
    if (reinterpret_cast<uintptr_t>(scratch.data()) % alignof(float) != 0)
        throw Error(ErrorCode::shape, "quantize_kq_input: scratch must be 4-byte aligned");
    require_simd(level);
    const size_t ab = need / size_t(n_tokens);
    // The quantizer matmul uses for these types at this level (so the same blocks).
    auto quantize = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
            detail::quantize_act_at(DType::Q4_K, x + t * cols, cols, scratch.data() + size_t(t) * ab, level);
    };
    if (n_tokens > 1 && n_tokens * cols >= kMinParallelQuantValues) parallel_rows(pool, n_tokens, quantize);
    else quantize(0, n_tokens);
    return KqInput{scratch.data(), ab, n_tokens, cols};
}

namespace {

// The job of one product, its arguments checked (`who` names the caller in errors).
detail::KqPackedJob product_job(const char* who, const MatrixView& w, const KqInput& x, float* y) {
    // Messages are built only when thrown: this runs on every product of a forward pass.
    if (!y || !x.act) throw Error(ErrorCode::argument, std::string(who) + ": null pointer");
    if (!w.packed) throw Error(ErrorCode::argument, std::string(who) + ": matrix has no packed data (repack_kq)");
    check(who, w.type, w.rows, w.cols);
    if (x.cols != w.cols || x.n_tokens <= 0 || x.act_bytes != detail::quant_act_bytes(w.type, w.cols))
        throw Error(ErrorCode::shape, std::string(who) + ": input of " + std::to_string(x.n_tokens) + " x " +
                                          std::to_string(x.cols) + " for a matrix of " + std::to_string(w.cols) + " columns");
    if (reinterpret_cast<uintptr_t>(w.packed) % 64 != 0)
        throw Error(ErrorCode::argument, std::string(who) + ": packed data not 64-byte aligned");
    const int64_t nb = w.cols / 256;
    const size_t sbb = sb_bytes(w.type);
    return detail::KqPackedJob{w.type, static_cast<const std::byte*>(w.packed), sbb * size_t(nb), sbb, nb, w.rows,
                               x.act, x.act_bytes, x.n_tokens, y};
}

} // namespace

void matmul_kq_packed(const MatrixView& w, const KqInput& x, float* y, ThreadPool* pool, SimdLevel level) {
    const detail::KqPackedJob job = product_job("matmul_kq_packed", w, x, y);
    require_simd(level);
    detail::matmul_kq_packed(job, pool, level);
}

void matmul_kq_packed_list(std::span<const KqProduct> products, ThreadPool* pool, SimdLevel level) {
    if (products.size() > kKqProductsMax)
        throw Error(ErrorCode::argument, "matmul_kq_packed_list: " + std::to_string(products.size()) +
                                             " products, more than " + std::to_string(kKqProductsMax));
    detail::KqPackedJob jobs[kKqProductsMax];
    for (size_t i = 0; i < products.size(); ++i) {
        const KqProduct& p = products[i];
        if (!p.w || !p.x) throw Error(ErrorCode::argument, "matmul_kq_packed_list: null pointer");
        jobs[i] = product_job("matmul_kq_packed_list", *p.w, *p.x, p.y);
    }
    require_simd(level);
    detail::matmul_kq_packed_jobs(std::span<const detail::KqPackedJob>(jobs, products.size()), pool, level);
}

namespace detail {

// The exact model: per (token, row), super-blocks ascending, the int sums and float steps of
// matmul_quant.h (as rows_scalar computes them on the file's layout).
void kqp_groups_scalar(const KqPackedJob& job, int64_t g0, int64_t g1) {
    uint8_t q[256];
    Unit u;
    const bool has_min = job.type == DType::Q4_K || job.type == DType::Q5_K;
    for (int64_t g = g0; g < g1; ++g) {
        const auto* grp = reinterpret_cast<const uint8_t*>(job.w + size_t(g) * job.group_bytes);
        for (int64_t j = 0; j < kKqPackRows; ++j) {
            const int64_t r = g * kKqPackRows + j;
            if (r >= job.rows) break;
            for (int64_t t = 0; t < job.n_tokens; ++t) {
                const auto* act = reinterpret_cast<const Act256*>(job.act + size_t(t) * job.act_bytes);
                float s = 0.0f;
                for (int64_t b = 0; b < job.nb; ++b) {
                    unpack_packed(job.type, grp + size_t(b) * job.sb_bytes, j, q, u);
                    const Act256& a = act[b];
                    int32_t isum = 0, msum = 0;
                    for (int k = 0; k < 16; ++k) {
                        int32_t p = 0;
                        for (int i = 0; i < 16; ++i) p += int32_t(q[16 * k + i]) * int32_t(a.qs[16 * k + i]);
                        isum += int32_t(u.sc[k]) * p;
                        msum += int32_t(u.c[k]) * int32_t(a.bsums[k]);
                    }
                    if (has_min) {
                        s = std::fma(float(isum), u.d1 * a.d, s);
                        s = std::fma(float(-msum), u.d2 * a.d, s);
                    } else {
                        s = std::fma(float(isum - msum), u.d1 * a.d, s);
                    }
                }
                job.y[t * job.rows + r] = s;
            }
        }
    }
}

namespace {

using KqBody = void (*)(const KqPackedJob&, int64_t, int64_t);

KqBody body_for(SimdLevel level) {
    if (simd_has_avx512(level) && cpu_features().avx512vnni) return kqp_groups_avx512vnni;
    if (level != SimdLevel::Scalar && level != SimdLevel::Avx2 && cpu_features().avxvnni) return kqp_groups_avxvnni;
    if (level != SimdLevel::Scalar) return kqp_groups_avx2;
    return kqp_groups_scalar;
}

int64_t groups_of(const KqPackedJob& job) { return (job.rows + kKqPackRows - 1) / kKqPackRows; }

} // namespace


// The jobs' row groups numbered one after another: a chunk [g0, g1) of them runs each job's part
// of it, in job order.
void matmul_kq_packed_jobs(std::span<const KqPackedJob> jobs, ThreadPool* pool, SimdLevel level) {
    const KqBody body = body_for(level);
    int64_t groups = 0, macs = 0;
    for (const KqPackedJob& job : jobs) {
        groups += groups_of(job);
        macs += job.rows * job.nb * 256 * job.n_tokens;
    }
    detail::run_row_groups(pool, groups, macs, [&](int64_t g0, int64_t g1) {
        int64_t first = 0; // the first group of job i in the numbering
        for (const KqPackedJob& job : jobs) {
            const int64_t n = groups_of(job), b = std::max(g0, first), e = std::min(g1, first + n);
            if (b < e) body(job, b - first, e - first);
            first += n;
            if (first >= g1) break;
        }
    });
}

void matmul_kq_packed(const KqPackedJob& job, ThreadPool* pool, SimdLevel level) {
    matmul_kq_packed_jobs(std::span<const KqPackedJob>(&job, 1), pool, level);
}

} // namespace detail

} // namespace rwd
