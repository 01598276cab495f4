// AVX2+FMA+F16C matmul body: 8-lane vector traits for the shared tile engine (matmul_tiles.h),
// and the AVX2 Q8_0 activation quantizer (bit-identical to the scalar rule).
#include <immintrin.h>

#include "matmul_tiles.h"

namespace rwd::detail {

namespace {

struct Avx2 {
    using F = __m256;
    using I = __m256i;
    static constexpr int kLanes = 8;
    static constexpr int kQ8Blocks = 1;
    // Float tiles: rows per tile for 1..4 tokens, accumulators + the operands kept in registers
    // (min(tokens, rows) + 1) within the 16 ymm registers; more tokens go in blocks of 3-4.
    static constexpr int kMaxTokensFloat = 4;
    static constexpr int kRowsFloat[4] = {8, 6, 4, 3};
    // Q8_0 tiles: rows per tile for 1, 2, 3, 4 tokens (at most 12 accumulators).
    static constexpr int kRowsQ8[4] = {6, 4, 3, 2};

    static F zero() { return _mm256_setzero_ps(); }
    static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    // Lane sums of four accumulators, each as ((0+1)+(2+3)) + ((4+5)+(6+7)).
    static __m128 reduce4(F a, F b, F c, F d) {
        const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
        return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    }
    static F load_x(const float* p) { return _mm256_loadu_ps(p); }
    template <DType T>
    static F load(const std::byte* row, int64_t k) {
        if constexpr (T == DType::F32) {
            return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
        } else if constexpr (T == DType::F16) {
            return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
        } else {
            const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
            return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
        }
    }
    static I q8_load(const BlockQ8_0* b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs)); }
    static F q8_scale(const BlockQ8_0* b) { return _mm256_set1_ps(_cvtsh_ss(b->d)); }
    static I q8_abs(I w) { return _mm256_sign_epi8(w, w); } // |w| as unsigned bytes (-128 -> 128)
    // Exact int8 x int8 products summed into 8 int32 lanes (lane j: 4 adjacent products), as
    // float: |w| times x carrying w's sign (0 where w is 0). Activations satisfy |x| <= 127, so
    // negating x is exact and the pairwise int16 sums (<= 2 * 128 * 127) cannot saturate.
    static F q8_dot(I aw, I w, I x) {
        const __m256i sx = _mm256_sign_epi8(x, w);
        const __m256i p16 = _mm256_maddubs_epi16(aw, sx);
        return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
    }
};

} // namespace

void matmul_rows_avx2(const MatmulJob& job, int64_t r0, int64_t r1) { matmul_rows<Avx2>(job, r0, r1); }

void quantize_row_q8_0_avx2(const float* x, int64_t cols, BlockQ8_0* out) {
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    const __m256 half = _mm256_set1_ps(0.5f);
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t b = 0; b < cols / kQ8Block; ++b) {
        const float* xb = x + b * kQ8Block;
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < 4; ++i) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, v[i]));
        }
        // max is exact, so the lane order cannot change amax.
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        out[b].d = fp32_to_fp16(d);
        const __m256 idv = _mm256_set1_ps(id);
        __m256i q[4];
        for (int i = 0; i < 4; ++i) {
            // roundf, half away from zero: truncate, then step away from zero when the exact
            // fraction s - trunc(s) has magnitude >= 0.5.
            const __m256 s = _mm256_mul_ps(v[i], idv);
            const __m256 t = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 frac = _mm256_andnot_ps(sign_bit, _mm256_sub_ps(s, t));
            const __m256 step = _mm256_and_ps(_mm256_cmp_ps(frac, half, _CMP_GE_OQ),
                                              _mm256_or_ps(one, _mm256_and_ps(sign_bit, s)));
            q[i] = _mm256_cvttps_epi32(_mm256_add_ps(t, step));
        }
        // 32 int32 -> 32 int8. The in-lane packs interleave the 128-bit halves; the permute
        // restores element order.
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        const __m256i ordered = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), ordered);
    }
}

} // namespace rwd::detail
