// Per-token kernels of the llama block (RMSNorm, "norm" rope, SwiGLU, residual add), written to
// follow ggml's arithmetic closely: RMSNorm sums squares in double, rope steps theta by repeated
// multiplication with powf(base, -2/n_rot). Nothing here mixes tokens. SwiGLU's AVX2 body is in
// ops_avx2.cpp; the scalar one computes its exact arithmetic (exp_avx2_model).
#include "rewind/kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "ops_impl.h"
#include "simd_math_model.h"
#include "rewind/error.h"

namespace rwd {

void rms_norm(const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps, float* out) {
    if (!x || !weight || !out) throw Error("rms_norm: null pointer");
    if (n_tokens <= 0 || dim <= 0)
        throw Error(ErrorCode::shape, "rms_norm: non-positive size (n_tokens " + std::to_string(n_tokens) + ", dim " + std::to_string(dim) + ")");
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x + t * dim;
        float* ot = out + t * dim;
        double sum = 0.0; // squares rounded to float, summed in double, as ggml does
        for (int64_t i = 0; i < dim; ++i) sum += double(xt[i] * xt[i]);
        const float mean = float(sum / double(dim));
        const float scale = 1.0f / std::sqrt(mean + eps);
        // ggml scales first, then multiplies by the weight as a separate op.
        for (int64_t i = 0; i < dim; ++i) ot[i] = (xt[i] * scale) * weight[i];
    }
}

namespace {

void check_rope(int64_t n_tokens, int64_t n_rot, float freq_base, const char* who) {
    if (n_tokens <= 0) throw Error(ErrorCode::shape, std::string(who) + ": non-positive token count");
    if (n_rot <= 0 || n_rot % 2 != 0)
        throw Error(ErrorCode::shape, std::string(who) + ": n_rot " + std::to_string(n_rot) + " must be even and positive");
    if (!(freq_base > 0.0f)) throw Error(std::string(who) + ": freq_base must be positive");
}

void check_rope_heads(int64_t n_heads, int64_t head_dim, int64_t n_rot, const char* who) {
    if (n_heads <= 0 || head_dim <= 0) throw Error(ErrorCode::shape, std::string(who) + ": non-positive size");
    if (n_rot > head_dim)
        throw Error(ErrorCode::shape, std::string(who) + ": n_rot " + std::to_string(n_rot) + " exceeds head_dim " + std::to_string(head_dim));
}

// Angles for pairs [i0, i0 + np) continuing the recurrence from `theta`, which it advances:
// theta = pos * theta_scale^i by repeated multiplication, as ggml does.
void angles(float& theta, float theta_scale, int64_t np, float* cs, float* sn) {
    for (int64_t i = 0; i < np; ++i) {
        cs[i] = std::cos(theta);
        sn[i] = std::sin(theta);
        theta *= theta_scale;
    }
}

inline void rotate(float* p, float c, float s) {
    const float x0 = p[0], x1 = p[1];
    p[0] = x0 * c - x1 * s;
    p[1] = x0 * s + x1 * c;
}

} // namespace

void rope_norm(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
               float freq_base) {
    if (!x || !positions) throw Error("rope_norm: null pointer");
    check_rope(n_tokens, n_rot, freq_base, "rope_norm");
    check_rope_heads(n_heads, head_dim, n_rot, "rope_norm");
    const float theta_scale = std::pow(freq_base, -2.0f / float(n_rot));
    // Angles for a run of pairs are computed once per token and applied to every head.
    constexpr int64_t kPairs = 64;
    float cs[kPairs], sn[kPairs];
    for (int64_t t = 0; t < n_tokens; ++t) {
        float theta = float(positions[t]);
        float* xt = x + t * n_heads * head_dim;
        for (int64_t i0 = 0; i0 < n_rot / 2; i0 += kPairs) {
            const int64_t np = std::min<int64_t>(kPairs, n_rot / 2 - i0);
            angles(theta, theta_scale, np, cs, sn);
            for (int64_t h = 0; h < n_heads; ++h) {
                float* p = xt + h * head_dim + 2 * i0;
                for (int64_t i = 0; i < np; ++i) rotate(p + 2 * i, cs[i], sn[i]);
            }
        }
    }
}

void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          const RopeParams& p) {
    if (!x || !positions) throw Error("rope: null pointer");
    check_rope(n_tokens, p.n_rot, p.freq_base, "rope");
    check_rope_heads(n_heads, head_dim, p.n_rot, "rope");
    if (p.mode != RopeMode::Norm && p.mode != RopeMode::Neox) throw Error("rope: unknown mode");
    if (!(p.freq_scale > 0.0f) || !std::isfinite(p.freq_scale)) throw Error("rope: freq_scale must be positive");
    const int64_t half = p.n_rot / 2;
    if (p.freq_factors)
        for (int64_t i = 0; i < half; ++i)
            if (!(p.freq_factors[i] > 0.0f) || !std::isfinite(p.freq_factors[i]))
                throw Error("rope: frequency factor " + std::to_string(i) + " is not a positive finite number");
    const float theta_scale = std::pow(p.freq_base, -2.0f / float(p.n_rot));
    // Pair i of a head: elements (2i, 2i+1) for Norm, (i, i + half) for Neox.
    const int64_t stride = p.mode == RopeMode::Norm ? 2 : 1;
    const int64_t other = p.mode == RopeMode::Norm ? 1 : half;
    constexpr int64_t kPairs = 64;
    float cs[kPairs], sn[kPairs];
    for (int64_t t = 0; t < n_tokens; ++t) {
        float theta = float(positions[t]);
        float* xt = x + t * n_heads * head_dim;
        for (int64_t i0 = 0; i0 < half; i0 += kPairs) {
            const int64_t np = std::min<int64_t>(kPairs, half - i0);
            // ggml_rope_cache_init + rope_yarn without YaRN: theta / factor, times freq_scale.
            for (int64_t i = 0; i < np; ++i) {
                const float ff = p.freq_factors ? p.freq_factors[i0 + i] : 1.0f;
                const float th = p.freq_scale * (theta / ff);
                cs[i] = std::cos(th);
                sn[i] = std::sin(th);
                theta *= theta_scale;
            }
            for (int64_t h = 0; h < n_heads; ++h) {
                float* ph = xt + h * head_dim;
                for (int64_t i = 0; i < np; ++i) {
                    float* a = ph + (i0 + i) * stride;
                    float* b = a + other;
                    const float x0 = *a, x1 = *b;
                    if (p.fused) {
                        *a = std::fma(x0, cs[i], -(x1 * sn[i]));
                        *b = std::fma(x0, sn[i], x1 * cs[i]);
                    } else {
                        *a = x0 * cs[i] - x1 * sn[i];
                        *b = x0 * sn[i] + x1 * cs[i];
                    }
                }
            }
        }
    }
}

void geglu(const float* gate, const float* up, int64_t n, float* out) {
    if (!gate || !up || !out) throw Error("geglu: null pointer");
    if (n < 0) throw Error("geglu: negative size");
    constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
    constexpr float kCoefA = 0.044715f;
    for (int64_t i = 0; i < n; ++i) {
        const float x = gate[i];
        const float inner = kSqrt2OverPi * x * (1.0f + kCoefA * x * x);
        out[i] = (0.5f * x * (1.0f + std::tanh(inner))) * up[i];
    }
}

void add_bias(float* x, const float* bias, int64_t n_tokens, int64_t dim) {
    if (!x || !bias) throw Error("add_bias: null pointer");
    if (n_tokens < 0 || dim <= 0) throw Error("add_bias: bad size");
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t i = 0; i < dim; ++i) x[t * dim + i] += bias[i];
}

void scale_inplace(float* x, int64_t n, float s) {
    if (!x) throw Error("scale_inplace: null pointer");
    if (n < 0) throw Error("scale_inplace: negative size");
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) { swiglu(gate, up, n, out, detect_simd()); }

void swiglu(const float* gate, const float* up, int64_t n, float* out, SimdLevel level) {
    if (!gate || !up || !out) throw Error("swiglu: null pointer");
    if (n < 0) throw Error(ErrorCode::shape, "swiglu: negative size");
    require_simd(level);
    if (level != SimdLevel::Scalar) {
        detail::swiglu_avx2(gate, up, n, out);
        return;
    }
    // swiglu_avx2's arithmetic, element by element, so every level gives the same bits.
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = (g / (1.0f + detail::exp_avx2_model(0.0f - g))) * up[i];
    }
}

void add_inplace(float* y, const float* x, int64_t n) {
    if (!y || !x) throw Error("add_inplace: null pointer");
    if (n < 0) throw Error(ErrorCode::shape, "add_inplace: negative size");
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

} // namespace rwd
