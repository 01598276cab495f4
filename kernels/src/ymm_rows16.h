// Pieces the 8-lane packed bodies (q8_packed_avx2.cpp, q8_packed_body.h, kq_packed_ymm.h) share
// for their 16-row groups: the float half of their traits, the 4-byte activation broadcast and the
// store of a group's two 8-row halves, partial last group included. Included only by ISA-specific
// files (anonymous namespace).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace rwd::detail {
namespace {

// The float arithmetic of an 8-lane traits type (each adds its loads, scales and int dots).
struct YmmFloat8 {
    using F = __m256;
    static constexpr int kLanes = 8;
    static F zero() { return _mm256_setzero_ps(); }
    static F set1(float f) { return _mm256_set1_ps(f); }
    static F cvt(__m256i i) { return _mm256_cvtepi32_ps(i); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static F loadf(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
};

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// y[0..nr) = the group's 16 sums (lo: rows 0-7, hi: rows 8-15); nr < 16 only for a matrix's last
// group, whose missing rows must not be written.
inline void store_rows16(float* y, __m256 lo, __m256 hi, int64_t nr) {
    if (nr == 16) {
        _mm256_storeu_ps(y, lo);
        _mm256_storeu_ps(y + 8, hi);
    } else {
        alignas(32) float tmp[16];
        _mm256_store_ps(tmp, lo);
        _mm256_store_ps(tmp + 8, hi);
        std::memcpy(y, tmp, size_t(nr) * sizeof(float));
    }
}

} // namespace
} // namespace rwd::detail
