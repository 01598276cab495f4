// AVX-512 intrinsics from SIMDe's portable code, for building an AVX-512 body on a CPU without
// AVX-512 and testing it against the scalar model. Included before the body, which must then not
// see the compiler's own <immintrin.h>. Adds what SIMDe 0.7.4 lacks, lane by lane as Intel defines
// it, and replaces SIMDe's portable FMA family (a * b + c, rounded twice) by fused std::fma.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

// Tells kernel code that its vectors are SIMDe's (matmul_tiles.h's register pin is then a no-op).
#define REWIND_EMULATED_SIMD 1
// Portable code even where the build's flags (-march=native, -mavx2) let SIMDe use the CPU's own
// intrinsics: those would pull in the compiler's <immintrin.h>, whose AVX-512 declarations clash
// with the aliases below.
#define SIMDE_NO_NATIVE
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <simde/x86/fma.h>

// The body's own #include <immintrin.h> (GCC's guard, clang's guard) must be a no-op.
#define _IMMINTRIN_H_INCLUDED
#define __IMMINTRIN_H

// What the bodies test with #if (q8_packed_body.h's 8-lane traits), set only after SIMDe has
// decided, from the real flags, that nothing is native.
#ifndef __AVX2__
#define __AVX2__ 1
#endif

typedef simde__mmask16 __mmask16;
typedef simde__mmask8 __mmask8;
typedef simde__mmask32 __mmask32;
typedef simde__mmask64 __mmask64;
#ifndef _MM_FROUND_NO_EXC
#define _MM_FROUND_NO_EXC SIMDE_MM_FROUND_NO_EXC
#define _MM_FROUND_TO_NEAREST_INT SIMDE_MM_FROUND_TO_NEAREST_INT
#endif

// Masked loads and stores touch only the lanes whose mask bit is set (as the hardware does: a
// masked-off lane past the end of a buffer is never read).
static inline __m512 _mm512_mask_loadu_ps(__m512 src, __mmask16 k, const void* p) {
    float v[16];
    _mm512_storeu_ps(v, src);
    for (int i = 0; i < 16; ++i)
        if ((k >> i) & 1) std::memcpy(&v[i], static_cast<const char*>(p) + 4 * i, 4);
    return _mm512_loadu_ps(v);
}
static inline __m512 _mm512_maskz_loadu_ps(__mmask16 k, const void* p) { return _mm512_mask_loadu_ps(_mm512_setzero_ps(), k, p); }
static inline void _mm512_mask_storeu_ps(void* p, __mmask16 k, __m512 a) {
    float v[16];
    _mm512_storeu_ps(v, a);
    for (int i = 0; i < 16; ++i)
        if ((k >> i) & 1) std::memcpy(static_cast<char*>(p) + 4 * i, &v[i], 4);
}
static inline __m256i _mm256_maskz_loadu_epi16(__mmask16 k, const void* p) {
    uint16_t v[16] = {};
    for (int i = 0; i < 16; ++i)
        if ((k >> i) & 1) std::memcpy(&v[i], static_cast<const char*>(p) + 2 * i, 2);
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v));
}
static inline __m512 _mm512_cvtph_ps(__m256i h) {
    float v[16];
    _mm256_storeu_ps(v, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
    _mm256_storeu_ps(v + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
    return _mm512_loadu_ps(v);
}
// Round to nearest even (the default MXCSR mode); out of range or NaN: INT32_MIN.
static inline __m512i _mm512_cvtps_epi32(__m512 a) {
    float v[16];
    int32_t r[16];
    _mm512_storeu_ps(v, a);
    for (int i = 0; i < 16; ++i) {
        const float x = std::nearbyint(v[i]);
        r[i] = (x >= 2147483648.0f || x < -2147483648.0f || x != x) ? INT32_MIN : int32_t(x);
    }
    return _mm512_loadu_si512(r);
}
static inline __m256 _mm512_extractf32x8_ps(__m512 a, int imm) {
    float v[16];
    _mm512_storeu_ps(v, a);
    return _mm256_loadu_ps(v + 8 * (imm & 1));
}
static inline float _mm512_reduce_max_ps(__m512 a) {
    float v[16];
    _mm512_storeu_ps(v, a);
    float m = v[0];
    for (int i = 1; i < 16; ++i) m = v[i] > m ? v[i] : m;
    return m;
}
// 128-bit lanes of the result: a[imm bits 0-1], a[bits 2-3], b[bits 4-5], b[bits 6-7].
static inline __m512 _mm512_shuffle_f32x4(__m512 a, __m512 b, int imm) {
    float x[16], y[16], r[16];
    _mm512_storeu_ps(x, a);
    _mm512_storeu_ps(y, b);
    for (int l = 0; l < 4; ++l) std::memcpy(r + 4 * l, (l < 2 ? x : y) + 4 * ((imm >> (2 * l)) & 3), 16);
    return _mm512_loadu_ps(r);
}

static inline float _cvtsh_ss(unsigned short h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }
static inline __m512 _mm512_cvtepi32_ps(__m512i a) {
    int32_t v[16];
    float r[16];
    _mm512_storeu_si512(v, a);
    for (int i = 0; i < 16; ++i) r[i] = float(v[i]); // round to nearest even, as cvtdq2ps
    return _mm512_loadu_ps(r);
}
template <class T>
static inline __m512i rwd_emulated_widen32(const void* p) {
    T v[16];
    int32_t r[16];
    std::memcpy(v, p, sizeof v);
    for (int i = 0; i < 16; ++i) r[i] = int32_t(v[i]);
    return _mm512_loadu_si512(r);
}
static inline __m512i _mm512_cvtepi8_epi32(__m128i a) { return rwd_emulated_widen32<int8_t>(&a); }
static inline __m512i _mm512_cvtepu8_epi32(__m128i a) { return rwd_emulated_widen32<uint8_t>(&a); }
static inline __m512i _mm512_cvtepu16_epi32(__m256i a) { return rwd_emulated_widen32<uint16_t>(&a); }
static inline __m512 _mm512_zextps256_ps512(__m256 a) {
    float r[16] = {};
    _mm256_storeu_ps(r, a);
    return _mm512_loadu_ps(r);
}
static inline __m512i _mm512_zextsi256_si512(__m256i a) {
    int32_t r[16] = {};
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(r), a);
    return _mm512_loadu_si512(r);
}
// SIMDe 0.7.4 aliases _mm512_madd_epi16 with the masked form's four arguments.
#undef _mm512_madd_epi16
static inline __m512i _mm512_madd_epi16(__m512i a, __m512i b) { return simde_mm512_madd_epi16(a, b); }
// AVX-VNNI's VEX form computes what AVX512-VL VNNI's does.
#define _mm256_dpbusd_avx_epi32(src, a, b) simde_mm256_dpbusd_epi32(src, a, b)

#undef _mm512_fmadd_ps
#undef _mm512_fnmadd_ps
#undef _mm256_fmadd_ps
#undef _mm256_fnmadd_ps
template <int N, class V, class Store, class Load>
static inline V rwd_emulated_fma(V a, V b, V c, bool negate, Store store, Load load) {
    float x[N], y[N], z[N];
    store(x, a);
    store(y, b);
    store(z, c);
    for (int i = 0; i < N; ++i) z[i] = std::fma(negate ? -x[i] : x[i], y[i], z[i]);
    return load(z);
}
static inline __m512 _mm512_fmadd_ps(__m512 a, __m512 b, __m512 c) {
    return rwd_emulated_fma<16>(a, b, c, false, [](float* d, __m512 v) { _mm512_storeu_ps(d, v); }, [](const float* s) { return _mm512_loadu_ps(s); });
}
static inline __m512 _mm512_fnmadd_ps(__m512 a, __m512 b, __m512 c) {
    return rwd_emulated_fma<16>(a, b, c, true, [](float* d, __m512 v) { _mm512_storeu_ps(d, v); }, [](const float* s) { return _mm512_loadu_ps(s); });
}
static inline __m256 _mm256_fmadd_ps(__m256 a, __m256 b, __m256 c) {
    return rwd_emulated_fma<8>(a, b, c, false, [](float* d, __m256 v) { _mm256_storeu_ps(d, v); }, [](const float* s) { return _mm256_loadu_ps(s); });
}
// mask3: lanes whose bit is clear keep c.
static inline __m512 _mm512_mask3_fmadd_ps(__m512 a, __m512 b, __m512 c, __mmask16 k) {
    const __m512 f = _mm512_fmadd_ps(a, b, c);
    float x[16], z[16];
    _mm512_storeu_ps(x, f);
    _mm512_storeu_ps(z, c);
    for (int i = 0; i < 16; ++i)
        if ((k >> i) & 1) z[i] = x[i];
    return _mm512_loadu_ps(z);
}
static inline __m256 _mm256_fnmadd_ps(__m256 a, __m256 b, __m256 c) {
    return rwd_emulated_fma<8>(a, b, c, true, [](float* d, __m256 v) { _mm256_storeu_ps(d, v); }, [](const float* s) { return _mm256_loadu_ps(s); });
}
