// rewind's expf, its constants and its steps written once for every body that computes it: the
// scalar model (simd_math_model.h), AVX2 (simd_math_avx2.h) and AVX-512 (attention_avx512.cpp).
// Bit-identity across SIMD levels rests on all of them taking these same steps on these floats.
#pragma once

namespace rwd::detail {

namespace exp_c {
inline constexpr float lo = -87.0f;            // below: the result is 0
inline constexpr float hi = 88.3762626647949f; // above: +inf (2^n would leave the normal range)
inline constexpr float log2e = 1.44269504088896341f;
inline constexpr float ln2_hi = 0.693359375f; // ln2 in two parts, so r = x - n ln2 is accurate
inline constexpr float ln2_lo = -2.12194440e-4f;
// e^r ~ 1 + r + r^2 (p5 + r (p4 + r (p3 + r (p2 + r (p1 + r p0))))), Horner from p0.
inline constexpr float p0 = 1.9875691500e-4f;
inline constexpr float p1 = 1.3981999507e-3f;
inline constexpr float p2 = 8.3334519073e-3f;
inline constexpr float p3 = 4.1665795894e-2f;
inline constexpr float p4 = 1.6666665459e-1f;
inline constexpr float p5 = 5.0000001201e-1f;
} // namespace exp_c

// For x already clamped to [lo, hi]: n = round(x log2e) (nearest even) and e^r with
// r = x - n ln2, so exp(x) = e^r 2^n; the caller builds 2^n and handles the clamped ends. Ops
// gives one lane type's set1, mul, add, round, fmadd(a, b, c) = a b + c and fnmadd(a, b, c) =
// -(a b) + c, each one rounding.
template <class Ops, class V>
inline V exp_reduced(V x, V& n) {
    n = Ops::round(Ops::mul(x, Ops::set1(exp_c::log2e)));
    V r = Ops::fnmadd(n, Ops::set1(exp_c::ln2_hi), x);
    r = Ops::fnmadd(n, Ops::set1(exp_c::ln2_lo), r);
    V y = Ops::set1(exp_c::p0);
    y = Ops::fmadd(y, r, Ops::set1(exp_c::p1));
    y = Ops::fmadd(y, r, Ops::set1(exp_c::p2));
    y = Ops::fmadd(y, r, Ops::set1(exp_c::p3));
    y = Ops::fmadd(y, r, Ops::set1(exp_c::p4));
    y = Ops::fmadd(y, r, Ops::set1(exp_c::p5));
    return Ops::fmadd(y, Ops::mul(r, r), Ops::add(r, Ops::set1(1.0f)));
}

} // namespace rwd::detail
