// llama.cpp's CPU numerics (ggml-cpu, 2026): flash attention one (token, head) at a time -- the
// one-chunk body with its F16 rounding of Q and of the V accumulator, the tiled body with F32
// accumulators over 64-position key tiles -- and the F32 dot-product order of its matmuls.
// Written to reproduce another program's roundings, not to be fast; each rounding step says how
// ggml does it. The AVX2 dot body is in ggml_compat_avx2.cpp.
#include "rewind/kernels/ggml_compat.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "attention_impl.h"
#include "ggml_compat_impl.h"
#include "rewind/error.h"
#include "rewind/kernels/ops.h"

namespace rwd {

namespace {

constexpr int64_t kTile = 64;       // GGML_FA_TILE_Q and GGML_FA_TILE_KV
constexpr int64_t kSimdFloats = 16; // GGML_F32_EPR on AVX-512: the tiled body wants head_dim % 16 == 0

inline float round_f16(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }
constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
constexpr float kGeluCoefA = 0.044715f;

// One (token, head): q and out [head_dim]; k and v point at position 0 of this KV head.
struct Row {
    const float* q;
    const std::byte* k;
    const std::byte* v;
    size_t pos_bytes; // bytes between positions of one KV head
    DType kv_type;
    int64_t head_dim;
    int64_t lo;       // positions lo .. n_pos-1 are visible (causal, sliding window)
    int64_t n_pos;
    float scale;
    float* out;
};

using detail::kv_at;

// ggml_compute_forward_flash_attn_ext_f16_one_chunk. scratch: [2 * head_dim].
void one_chunk(const Row& r, float* scratch) {
    const bool f16 = r.kv_type == DType::F16;
    const int64_t D = r.head_dim;
    float* qq = scratch;      // Q as the dot sees it: rounded to F16 when K is F16 (q_to_vec_dot)
    float* acc = scratch + D; // VKQ16 (values kept representable in F16) or VKQ32
    for (int64_t i = 0; i < D; ++i) {
        qq[i] = f16 ? round_f16(r.q[i]) : r.q[i];
        acc[i] = 0.0f;
    }
    float M = -INFINITY, S = 0.0f;
    // ggml visits every cell and skips the masked ones (outside the window).
    for (int64_t p = r.lo; p < r.n_pos; ++p) {
        const std::byte* kp = r.k + size_t(p) * r.pos_bytes;
        const std::byte* vp = r.v + size_t(p) * r.pos_bytes;
        // ggml_vec_dot_f16 on AVX-512 with head_dim < 64 runs its scalar tail: F16 x F16 products
        // (exact in F32) summed in double, stored as float. For F32 caches ggml's SIMD sum is
        // approximated by the same double sum.
        double dot = 0.0;
        for (int64_t i = 0; i < D; ++i) dot += double(qq[i] * kv_at(kp, r.kv_type, i));
        const float s = float(dot) * r.scale;

        float ms = 1.0f, vs = 1.0f;
        if (s > M) { // new maximum: rescale what was accumulated (ms == 0 at the first position)
            const float m_old = M;
            M = s;
            ms = std::exp(m_old - M);
            for (int64_t i = 0; i < D; ++i) acc[i] = f16 ? round_f16(acc[i] * ms) : acc[i] * ms;
        } else {
            vs = std::exp(s - M);
        }
        // ggml_vec_mad_f16 / _f32: acc + v*vs fused, then (F16 cache) rounded back to F16.
        for (int64_t i = 0; i < D; ++i) {
            const float a = std::fma(kv_at(vp, r.kv_type, i), vs, acc[i]);
            acc[i] = f16 ? round_f16(a) : a;
        }
        S = std::fma(S, ms, vs); // `S = S*ms + vs`, contracted by the compiler
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int64_t i = 0; i < D; ++i) r.out[i] = acc[i] * inv;
}

// ggml_compute_forward_flash_attn_ext_tiled, one query row of a tile (rows never mix).
// scratch: [kTile + head_dim].
void tiled(const Row& r, float* scratch) {
    const int64_t D = r.head_dim;
    float* w = scratch;         // this tile's scores, then softmax weights
    float* acc = scratch + kTile; // VKQ32
    std::fill(acc, acc + D, 0.0f);
    float M = -INFINITY, S = 0.0f;
    // Tiles stay aligned to position 0; a tile with no visible position is skipped, masked
    // positions inside a tile add exactly nothing (weight 0), so only [j0, n) is computed.
    for (int64_t c0 = 0; c0 < r.n_pos; c0 += kTile) {
        const int64_t n = std::min(kTile, r.n_pos - c0); // the rest of the tile is masked (-inf)
        const int64_t j0 = r.lo > c0 ? r.lo - c0 : 0;
        if (j0 >= n) continue;
        float tile_max = -INFINITY;
        for (int64_t j = j0; j < n; ++j) {
            // simd_gemm: one FMA chain over the head dimension starting from +0, then * scale.
            const std::byte* kp = r.k + size_t(c0 + j) * r.pos_bytes;
            float d = 0.0f;
            for (int64_t i = 0; i < D; ++i) d = std::fma(r.q[i], kv_at(kp, r.kv_type, i), d);
            w[j] = d * r.scale;
            tile_max = std::max(tile_max, w[j]);
        }
        const float m_new = std::fmax(M, tile_max);
        if (m_new > M) {
            const float ms = std::exp(M - m_new);
            for (int64_t i = 0; i < D; ++i) acc[i] *= ms;
            S *= ms;
        }
        M = m_new;
        // ggml_vec_soft_max_f32 over the whole tile (masked positions are -inf: weight 0): its
        // vector expf, each 16 weights summed in float as _mm512_reduce_add_ps does, those sums
        // added in double, the total added to the float S.
        for (int64_t j = 0; j < kTile; ++j) w[j] = j >= j0 && j < n ? expf_ggml(w[j] - M) : 0.0f;
        double sum = 0.0;
        for (int64_t b = 0; b < kTile; b += 16) {
            float v8[8], v4[4];
            for (int l = 0; l < 8; ++l) v8[l] = w[b + l + 8] + w[b + l];
            for (int l = 0; l < 4; ++l) v4[l] = v8[l + 4] + v8[l];
            sum += double((v4[0] + v4[2]) + (v4[1] + v4[3]));
        }
        S = float(double(S) + sum);
        // simd_gemm again: per output element one FMA chain over the tile's positions, continuing
        // from the running accumulator (masked positions add 0 * v).
        for (int64_t j = j0; j < n; ++j) {
            const std::byte* vp = r.v + size_t(c0 + j) * r.pos_bytes;
            for (int64_t i = 0; i < D; ++i) acc[i] = std::fma(w[j], kv_at(vp, r.kv_type, i), acc[i]);
        }
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int64_t i = 0; i < D; ++i) r.out[i] = acc[i] * inv;
}

int64_t slot_floats(const AttentionShape& s) { return ((kTile + 2 * s.head_dim + 15) / 16) * 16; }

// Below this many multiply-adds a matmul_ggml call stays on the calling thread.
constexpr int64_t kMinMacsPerThread = 32 * 1024;

} // namespace

GgmlFaPath ggml_fa_path(int64_t pass_tokens, int64_t head_dim) {
    return pass_tokens >= kTile && head_dim % kSimdFloats == 0 ? GgmlFaPath::Tiled : GgmlFaPath::OneChunk;
}

int64_t attention_ggml_scratch_floats(const AttentionShape& s, int n_threads) {
    if (n_threads < 1) throw Error("attention_ggml_scratch_floats: n_threads must be >= 1");
    detail::check_attention_shape(s, DType::F32, "attention_ggml_scratch_floats");
    return int64_t(n_threads) * slot_floats(s);
}

void attention_ggml(const AttentionShape& s, GgmlFaPath path, const float* q, const void* k, const void* v,
                    DType kv_type, float* out, float* scratch, ThreadPool* pool) {
    detail::check_attention_shape(s, kv_type, "attention_ggml");
    if (!q || !k || !v || !out || !scratch) throw Error("attention_ggml: null pointer");
    if (path != GgmlFaPath::OneChunk && path != GgmlFaPath::Tiled) throw Error("attention_ggml: unknown path");

    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t units = s.n_tokens * s.n_head; // one (token, query head) each
    const size_t eb = detail::kv_elem_bytes(kv_type);
    const float scale = detail::attention_scale(s); // llama.cpp: 1.0f/sqrtf(n_embd_head), or 1 (Q pre-scaled)
    const int64_t slotf = slot_floats(s);
    const auto body = path == GgmlFaPath::Tiled ? tiled : one_chunk;

    auto run_unit = [&](int64_t u, float* slot) {
        const int64_t t = u / s.n_head, h = u % s.n_head;
        Row r;
        r.q = q + (t * s.n_head + h) * s.head_dim;
        r.k = static_cast<const std::byte*>(k) + size_t((h / group) * s.head_dim) * eb;
        r.v = static_cast<const std::byte*>(v) + size_t((h / group) * s.head_dim) * eb;
        r.pos_bytes = size_t(s.n_head_kv * s.head_dim) * eb;
        r.kv_type = kv_type;
        r.head_dim = s.head_dim;
        r.lo = detail::first_visible(s, s.pos0 + t);
        r.n_pos = s.pos0 + t + 1;
        r.scale = scale;
        r.out = out + (t * s.n_head + h) * s.head_dim;
        body(r, slot);
    };

    const int64_t macs = s.n_tokens * s.n_head * (s.pos0 + s.n_tokens) * s.head_dim * 2;
    detail::for_each_unit(pool, units, macs, scratch, slotf, run_unit);
}

float detail::ggml_dot_scalar(const float* x, const float* w, int64_t cols) {
    const int64_t np = cols & ~(kGgmlDotStep - 1);
    float acc[4][16] = {};
    for (int64_t k = 0; k < np; ++k) {
        float& a = acc[(k / 16) % 4][k % 16];
        a = std::fma(x[k], w[k], a);
    }
    for (int l = 0; l < 16; ++l) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
    }
    float v[16];
    for (int l = 0; l < 16; ++l) v[l] = acc[0][l] + acc[1][l];
    for (int l = 0; l < 8; ++l) v[l] = v[l + 8] + v[l];
    for (int l = 0; l < 4; ++l) v[l] = v[l + 4] + v[l];
    double sum = double((v[0] + v[2]) + (v[1] + v[3]));
    for (int64_t k = np; k < cols; ++k) sum += double(x[k] * w[k]);
    return float(sum);
}

void geglu_ggml(const float* gate, const float* up, int64_t n, float* out) {
    if (!gate || !up || !out) throw Error("geglu_ggml: null pointer");
    if (n < 0) throw Error("geglu_ggml: negative size");
    for (int64_t i = 0; i < n; ++i) {
        const float x = gate[i];
        if (x <= -10.0f) {
            out[i] = 0.0f;
        } else if (x >= 10.0f) {
            out[i] = x * up[i];
        } else {
            // The table entry for x's F16 bits: GELU of that F16 value (ggml_gelu_f32 as GCC
            // compiles it: 1 + a*x*x contracted to one fused multiply-add), rounded to F16.
            const float h = round_f16(x);
            const float inner = kSqrt2OverPi * h * std::fma(kGeluCoefA * h, h, 1.0f);
            const float g = 0.5f * h * (1.0f + std::tanh(inner));
            out[i] = round_f16(g) * up[i];
        }
    }
}

float detail::tinyblas_dot_scalar(const float* x, const float* w, int64_t cols) {
    float acc[16] = {};
    for (int64_t i = 0; i < cols; i += 16)
        for (int l = 0; l < 16; ++l) acc[l] = std::fma(w[i + l], x[i + l], acc[l]);
    float v[8], u[4];
    for (int l = 0; l < 8; ++l) v[l] = acc[l + 8] + acc[l];
    for (int l = 0; l < 4; ++l) u[l] = v[l + 4] + v[l];
    return (u[0] + u[2]) + (u[1] + u[3]);
}

float expf_ggml(float x) {
    // Round x/ln2 to an integer n with the 1.5*2^23 trick, b = x - n*ln2 in two steps, a degree-5
    // polynomial in b (as nested fused multiply-adds), scaled by 2^n.
    const float shift = 0x1.8p23f;
    const float z = std::fma(x, 0x1.715476p+0f, shift);
    const float n = z - shift;
    const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
    if (std::fabs(n) > 192.0f) return n > 0.0f ? INFINITY : 0.0f; // ggml's special path saturates too
    const float u = b * b;
    const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                             u, std::fma(0x1.ffffecp-1f, b, 1.0f));
    return std::ldexp(j, int(n)); // _mm512_scalef_ps
}

void swiglu_ggml(const float* gate, const float* up, int64_t n, float* out) {
    if (!gate || !up || !out) throw Error("swiglu_ggml: null pointer");
    if (n < 0) throw Error("swiglu_ggml: negative size");
    const int64_t nv = n & ~int64_t(15);
    for (int64_t i = 0; i < n; ++i) {
        const float x = gate[i];
        const float e = i < nv ? expf_ggml(0.0f - x) : std::exp(-x);
        out[i] = (x / (1.0f + e)) * up[i];
    }
}

bool matmul_ggml_supports(DType type) { return type == DType::F32; }

void matmul_ggml(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool) {
    matmul_ggml(w, x, n_tokens, y, pool, detect_simd());
}

void matmul_ggml(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool,
                 SimdLevel level) {
    if (!w.data || !x || !y) throw Error("matmul_ggml: null pointer");
    if (w.rows <= 0 || w.cols <= 0 || n_tokens <= 0)
        throw Error(ErrorCode::shape, "matmul_ggml: non-positive size (rows " + std::to_string(w.rows) + ", cols " +
                    std::to_string(w.cols) + ", n_tokens " + std::to_string(n_tokens) + ")");
    if (!matmul_ggml_supports(w.type))
        throw Error(ErrorCode::unsupported, std::string("matmul_ggml: ") + dtype_name(w.type) + " weights are not supported (F32 only)");
    require_simd(level);
    const auto* wf = static_cast<const float*>(w.data);
    // ggml-cpu hands matmuls over 2+ rows to llamafile's tinyBLAS (k % 16 == 0 on AVX-512) and
    // runs single rows (decode, and llama.cpp's last layer after it drops unused rows) with
    // ggml_vec_dot_f32.
    const bool tiny = n_tokens >= 2 && w.cols % 16 == 0;
    const auto dot = level == SimdLevel::Scalar ? (tiny ? detail::tinyblas_dot_scalar : detail::ggml_dot_scalar)
                                                : (tiny ? detail::tinyblas_dot_avx2 : detail::ggml_dot_avx2);
    auto rows = [&](int64_t r0, int64_t r1) {
        for (int64_t t = 0; t < n_tokens; ++t)
            for (int64_t r = r0; r < r1; ++r) y[t * w.rows + r] = dot(x + t * w.cols, wf + r * w.cols, w.cols);
    };
    // Small calls stay on the calling thread: waking workers would cost more than they save.
    parallel_rows(w.rows * w.cols * n_tokens < kMinMacsPerThread ? nullptr : pool, w.rows, rows);
}

} // namespace rwd
