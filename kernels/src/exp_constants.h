// The constants of rewind's expf (a Cephes-style range reduction and degree-6 polynomial), one
// definition for every body that computes it: simd_math_avx2.h's, attention_avx512.cpp's and the
// scalar model. Bit-identity across SIMD levels rests on all of them reading these same floats.
#pragma once

namespace rwd::detail::exp_c {

inline constexpr float lo = -87.0f;              // below: the result is 0
inline constexpr float hi = 88.3762626647949f;   // above: +inf (2^n would leave the normal range)
inline constexpr float log2e = 1.44269504088896341f;
inline constexpr float ln2_hi = 0.693359375f;    // ln2 in two parts: r = x - n*ln2_hi - n*ln2_lo
inline constexpr float ln2_lo = -2.12194440e-4f;
// e^r ~ 1 + r + r^2 (p5 + r (p4 + r (p3 + r (p2 + r (p1 + r p0))))), Horner from p0.
inline constexpr float p0 = 1.9875691500e-4f;
inline constexpr float p1 = 1.3981999507e-3f;
inline constexpr float p2 = 8.3334519073e-3f;
inline constexpr float p3 = 4.1665795894e-2f;
inline constexpr float p4 = 1.6666665459e-1f;
inline constexpr float p5 = 5.0000001201e-1f;

} // namespace rwd::detail::exp_c
